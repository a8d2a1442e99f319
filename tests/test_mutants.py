"""Every graded exercise catches a plausible wrong answer (issue 13): the mutant suite.

``tests/mutants.py`` holds, for every exercise in ``solutions/``, at least one *mutant*: the
solution cell with one realistic student mistake planted in it. For each mutant this test builds
the notebook with that cell changed, runs the notebook's setup cells and the exercise's cells
(and those of an exercise it builds on, without that one's test) in a fresh course kernel on this
pytest session's local Slurm, and checks that

* every cell before the exercise's graded test cell ran without an error — the mutant really
  ran; a NameError from a broken notebook would prove nothing;
* the graded test cell then failed with the error the mutant names (``AssertionError`` unless it
  says otherwise), showing the text it names: the check meant to catch it did.

A few entries are right answers written another way (``passes=True``): the test must accept them.
That the real solutions score full marks is checked by tests/test_grading.py's autograding;
``HPCNB_MUTANTS=all`` runs them through this runner too (one run per exercise).

Notebooks take minutes to run, so the runs happen only with ``make test-mutants`` (which sets
``HPCNB_MUTANTS=1``); ``make test`` runs the cheap check that the data covers every exercise
and still applies to the solutions.
"""
from __future__ import annotations

import copy
import functools
import os
import re
from pathlib import Path

import nbformat
import pytest

from mutants import ANSWER, MUTANTS, NEEDS, SHOW_ONLY, Mutant

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = {p.stem.split("-")[0]: p for p in sorted((ROOT / "solutions").glob("[0-9][0-9]*-*.ipynb"))}
KERNEL = "hpcnb"      # the course kernel (make setup installs it)
CELL_TIMEOUT = 300    # seconds per cell, as make test's nbval (jobs on a busy 2-core machine)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
BEGIN, END = "### BEGIN SOLUTION\n", "### END SOLUTION"  # nbgrader's markers of the answer in a solution cell
MODE = os.environ.get("HPCNB_MUTANTS", "")
runs_notebooks = pytest.mark.skipif(MODE not in ("1", "all"), reason="notebook runs: make test-mutants")


# --------------------------------------------------------------------------- the notebooks

def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _is_solution(cell) -> bool:
    return cell.cell_type == "code" and bool(_nbgrader(cell).get("solution"))


def _is_graded_test(cell) -> bool:
    meta = _nbgrader(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


@functools.cache
def read(notebook: str):
    """The solution notebook (shared: copy it before changing it)."""
    return nbformat.read(SOLUTIONS[notebook], as_version=4)


def setup_end(nb) -> int:
    """Index of the first cell that belongs to an exercise (the first with nbgrader metadata)."""
    return next(i for i, c in enumerate(nb.cells) if _nbgrader(c))


def setup_cells(nb) -> list[int]:
    """The code cells before the first exercise (imports, the working folder, helpers)."""
    return [i for i in range(setup_end(nb)) if nb.cells[i].cell_type == "code"]


def exercises(nb) -> dict[str, list[int]]:
    """grade_id of each solution cell -> its exercise's code cells: from the end of the setup (or
    of the previous exercise) up to the last graded test cell before the next solution cell."""
    solutions = [i for i, c in enumerate(nb.cells) if _is_solution(c)]
    out: dict[str, list[int]] = {}
    start = setup_end(nb)
    for first, following in zip(solutions, solutions[1:] + [len(nb.cells)]):
        tests = [i for i in range(first, following) if _is_graded_test(nb.cells[i])]
        if not tests:
            continue  # the exercise goes on in the next solution cell
        out[_nbgrader(nb.cells[first])["grade_id"]] = [
            i for i in range(start, tests[-1] + 1) if nb.cells[i].cell_type == "code"]
        start = tests[-1] + 1
    return out


def plant(nb, mutant: Mutant):
    """A copy of the notebook with the mutant's edits made in its solution cell."""
    nb = copy.deepcopy(nb)
    [cell] = [c for c in nb.cells if _is_solution(c) and _nbgrader(c)["grade_id"] == mutant.cell]
    source = cell.source
    for old, new in mutant.edits:
        if old == ANSWER:  # the student's own answer in place of the whole solution
            begin = source.index(BEGIN) + len(BEGIN)
            end = source.rindex("\n", 0, source.index(END)) + 1  # the end marker's line keeps its indent
            old = source[begin:end]
        assert old in source, f"{mutant.id}: {old!r} is no longer in the solution cell {mutant.cell}"
        source = source.replace(old, new)
    assert source != cell.source, f"{mutant.id} changes nothing"
    cell.source = source
    return nb


def cells_to_run(nb, notebook: str, cell: str) -> list[int]:
    """Setup, then the cells of the exercises this one builds on (not their tests), then its own
    (less those that only show something)."""
    regions = exercises(nb)
    before = [i for need in NEEDS.get((notebook, cell), ()) for i in regions[need]
              if not _is_graded_test(nb.cells[i])]
    shown = SHOW_ONLY.get((notebook, cell), ())
    own = [i for i in regions[cell] if not nb.cells[i].source.startswith(shown)]
    return setup_cells(nb) + before + own


# ------------------------------------------------------------------------------ the runner

def course_client(nb, workdir: Path):
    """An nbclient for ``nb`` in a fresh course kernel (over ipc: hpcnb.course.kernels), in ``workdir``."""
    from nbclient import NotebookClient

    from hpcnb.course.kernels import ipc_kernel_manager

    return NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT, allow_errors=False,
                          kernel_manager_class=ipc_kernel_manager(),
                          resources={"metadata": {"path": str(workdir)}})


def run(nb, indices: list[int], workdir: Path):
    """Run the cells in order in one fresh course kernel, in ``workdir``; stop at the first error.
    Returns (index of the failing cell, its CellExecutionError), or (None, None)."""
    from nbclient.exceptions import CellExecutionError

    client = course_client(nb, workdir)
    with client.setup_kernel():
        for index in indices:
            try:
                client.execute_cell(nb.cells[index], index)
            except CellExecutionError as err:
                return index, err
    return None, None


def describe(err) -> str:
    return ANSI.sub("", str(err))[-3000:]


@pytest.fixture
def no_jobs_left():
    """Cancel what a run left in this worker's local Slurm (a wrong answer's job that hangs until
    its time limit, a cell stopped mid-way): else the next run's jobs queue behind it for minutes."""
    yield
    import getpass
    import subprocess
    import time

    subprocess.run(["scancel", "-u", getpass.getuser()], capture_output=True, timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=60)
        if left.returncode == 0 and not left.stdout.strip():
            return
        time.sleep(0.5)


# ---------------------------------------------------------------------------------- tests

WRONG_ANSWERS_PER_CELL = 5   # issue 38: at least five plausible wrong answers for every graded cell


def test_every_exercise_has_five_wrong_answers_that_apply() -> None:
    """Cheap (no kernel): every solution cell has at least five wrong answers, and every mutant
    still applies."""
    counts = {(nb, cell): sum(m.notebook == nb and m.cell == cell and not m.passes for m in MUTANTS)
              for nb in SOLUTIONS for cell in exercises(read(nb))}
    missing = [f"{SOLUTIONS[nb].name}: {cell} has {n}" for (nb, cell), n in counts.items() if n < WRONG_ANSWERS_PER_CELL]
    assert not missing, (f"graded cells with fewer than {WRONG_ANSWERS_PER_CELL} wrong answers in tests/mutants.py:\n"
                         + "\n".join(missing))
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids)), "mutant ids must be unique"
    for mutant in MUTANTS:
        assert mutant.notebook in SOLUTIONS, mutant.id
        nb = read(mutant.notebook)
        assert mutant.cell in exercises(nb), f"{mutant.id}: no exercise {mutant.cell}"
        assert mutant.passes or mutant.shows, f"{mutant.id}: say what its failure must show"
        plant(nb, mutant)
    for (notebook, cell), needs in NEEDS.items():
        regions = exercises(read(notebook))
        assert cell in regions and all(n in regions for n in needs), (notebook, cell, needs)
    for (notebook, cell), shown in SHOW_ONLY.items():
        nb = read(notebook)
        left_out = len(exercises(nb)[cell]) - len(cells_to_run(nb, notebook, cell)) + len(setup_cells(nb))
        assert left_out == len(shown), f"{notebook} {cell}: SHOW_ONLY {shown} no longer matches one cell each"


@runs_notebooks
@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
@pytest.mark.usefixtures("no_jobs_left")
def test_mutant(mutant: Mutant, tmp_path: Path) -> None:
    if mutant.apart:
        from hpcnb.localslurm.apart import mode

        if mode() != "apart":
            pytest.skip(f"needs virtual nodes apart; here: {mode()}")
    nb = read(mutant.notebook)
    planted = plant(nb, mutant)
    indices = cells_to_run(nb, mutant.notebook, mutant.cell)
    failed, err = run(planted, indices, tmp_path)
    what = f"{SOLUTIONS[mutant.notebook].name}, {mutant.cell}, {mutant.mistake}"
    if mutant.passes:
        assert failed is None, f"a right answer was rejected ({what}):\n{describe(err)}"
        return
    assert failed is not None, f"the graded test passed a wrong answer ({what})"
    if mutant.own_network and not _is_graded_test(planted.cells[failed]):
        from hpcnb.localslurm import network

        assert network.running(), f"the answer's own cell failed, on a shared network ({what}):\n{describe(err)}"
        assert err.ename == mutant.own_network, f"expected {mutant.own_network}, got {err.ename} ({what})"
        return
    assert _is_graded_test(planted.cells[failed]), (
        f"cell {failed}, not the graded test, failed: the mutant broke the notebook ({what}):\n{describe(err)}")
    text = describe(err)
    assert err.ename == mutant.error, f"expected {mutant.error}, got {err.ename} ({what}):\n{text}"
    assert mutant.shows in text, f"the test failed, but not on {mutant.shows!r} ({what}):\n{text}"


SOLVED = [(nb, cell) for nb in SOLUTIONS for cell in exercises(read(nb))]


@pytest.mark.skipif(MODE != "all", reason="the real solutions here too: HPCNB_MUTANTS=all")
@pytest.mark.slow
@pytest.mark.parametrize("notebook, cell", SOLVED, ids=[f"{nb}-{c.removesuffix('-solution')}" for nb, c in SOLVED])
@pytest.mark.usefixtures("no_jobs_left")
def test_solution_passes(notebook: str, cell: str, tmp_path: Path) -> None:
    """The control: the exercise with its real solution passes in this runner."""
    nb = copy.deepcopy(read(notebook))
    failed, err = run(nb, cells_to_run(nb, notebook, cell), tmp_path)
    assert failed is None, f"{SOLUTIONS[notebook].name}, {cell}: the real solution fails:\n{describe(err)}"


EXERCISES = {p.stem.split("-")[0]: p for p in sorted((ROOT / "exercises").glob("[0-9][0-9]*-*.ipynb"))}


@runs_notebooks
@pytest.mark.slow
@pytest.mark.parametrize("notebook", sorted(EXERCISES))
@pytest.mark.usefixtures("no_jobs_left")
def test_unanswered_says_so(notebook: str, tmp_path: Path) -> None:
    """The exercise notebook as a student gets it (exercises/, every answer still the stub): after
    the setup, each answer cell raises NotImplementedError and its graded test cell then says that
    the exercise is unanswered, not NameError. The cells between (jobs that use the answers) are
    not run: they fail on their own, and the test cell must say it regardless."""
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(EXERCISES[notebook], as_version=4)
    number = notebook.lstrip("0")
    graded = [i for i, c in enumerate(nb.cells) if _is_graded_test(c)]
    stubs = [i for i, c in enumerate(nb.cells) if _is_solution(c)]
    client = course_client(nb, tmp_path)
    said: dict[str, str] = {}
    with client.setup_kernel():
        for index in setup_cells(nb):
            client.execute_cell(nb.cells[index], index)
        for index in sorted(stubs + graded):
            try:
                client.execute_cell(nb.cells[index], index)
                said[_nbgrader(nb.cells[index])["grade_id"]] = "(no error)"
            except CellExecutionError as err:
                said[_nbgrader(nb.cells[index])["grade_id"]] = f"{err.ename}: {ANSI.sub('', err.evalue)}"
    for k, index in enumerate(graded, start=1):
        grade_id = _nbgrader(nb.cells[index])["grade_id"]
        assert said[grade_id].startswith(f"AssertionError: {number}.{k} is unanswered"), (
            f"{EXERCISES[notebook].name}, {grade_id}: {said[grade_id]}")
