"""hpcnb.course.grading: exercises generated from solutions/ with nbgrader, the leak check, and autograding.

The mechanism tests use a tiny assignment in tests/fixtures/grading/ (a function, a value and a
Slurm job); the slow tests also grade every notebook in solutions/: the solution scores full
marks (that each exercise as a student gets it fails every graded test, saying it is unanswered,
is tests/test_mutants.py's ``test_unanswered_says_so``; that a failed test cell scores 0 is shown
here on the fixture). With ``HPCNB_MUTANTS=all`` (``make test-mutants MUTANTS=all``)
each notebook is graded once more per exercise, with that exercise's answer made wrong (every
name None): it loses that exercise's points. ``make test`` leaves those runs out: that each
exercise's test fails on a wrong answer is shown, with plausible wrong answers, by
tests/test_mutants.py (``make test-mutants``, in CI).
"""
from __future__ import annotations

import copy
import csv
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from hpcnb.course import grading
from hpcnb.course.grading import (
    EXERCISES_DIR,
    SOLUTIONS_DIR,
    autograde,
    check,
    generate,
    plant_wrong_answer,
    secret_regions,
    solution_notebooks,
)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "grading" / "solutions"
FIXTURE_NB = "00-grading-fixture"
REAL = solution_notebooks(SOLUTIONS_DIR)
REAL_TIMEOUT = 180  # per cell: exercises with jobs on a busy 2-core machine take a while
WRONG_ANSWERS = os.environ.get("HPCNB_MUTANTS") == "all"  # also grade one wrong answer per exercise


def meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def is_test(cell) -> bool:
    m = meta(cell)
    return cell.cell_type == "code" and bool(m.get("grade")) and not m.get("solution")


def is_answer(cell) -> bool:
    return cell.cell_type == "code" and bool(meta(cell).get("solution")) and not meta(cell).get("grade")


def answer_tests(nb) -> dict[int, list[str]]:
    """cell index of each auto-graded answer -> grade ids of the test cells after it (up to the next answer)."""
    out: dict[int, list[str]] = {}
    current = None
    for index, cell in enumerate(nb.cells):
        if is_answer(cell):
            current = index
            out[current] = []
        elif is_test(cell) and current is not None:
            out[current].append(meta(cell)["grade_id"])
    return {k: v for k, v in out.items() if v}


def points(nb) -> dict[str, float]:
    return {meta(c)["grade_id"]: float(meta(c)["points"]) for c in nb.cells if meta(c).get("grade")}


@pytest.fixture(scope="module")
def fixture_exercises(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exercises")
    generate(FIXTURE, out, quiet=True)
    return out


# ------------------------------------------------------------------------ repo's exercises/

def test_repo_exercises_are_up_to_date_and_hold_no_solutions() -> None:
    problems = check(SOLUTIONS_DIR, EXERCISES_DIR)
    assert not problems, "exercises/ is not in order (run `python -m hpcnb.course.grading generate`):\n" + "\n".join(problems)


# --------------------------------------------------------------------------- generate/check

def test_generate_makes_student_versions(fixture_exercises: Path) -> None:
    assert sorted(p.name for p in fixture_exercises.iterdir()) == [f"{FIXTURE_NB}.ipynb"]
    nb = nbformat.read(fixture_exercises / f"{FIXTURE_NB}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
    assert "total = a + b" not in text and "n_nodes = 2" not in text and "hello from the cluster\"," not in text
    assert "add(-40, 40)" not in text  # the hidden test
    assert text.count("raise NotImplementedError()") == 3
    assert "def add(a, b):" in text and 'assert add(1, 2) == 3' in text  # given code and visible tests stay
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
        if is_test(cell):  # LockCells + ComputeChecksums
            assert cell.metadata["editable"] is False and cell.metadata["deletable"] is False
            assert meta(cell)["checksum"]


def test_generate_copies_only_notebooks(tmp_path: Path) -> None:
    solutions = tmp_path / "solutions"
    shutil.copytree(FIXTURE, solutions)
    (solutions / "answers.py").write_text("def add(a, b):\n    total = a + b\n    return total\n")
    (solutions / "data").mkdir()
    (solutions / "data" / "key.txt").write_text("n_nodes = 2\n")
    out = tmp_path / "exercises"
    generate(solutions, out, quiet=True)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [f"{FIXTURE_NB}.ipynb"]
    assert check(solutions, out) == []


def test_generate_removes_stale_exercises(tmp_path: Path) -> None:
    out = tmp_path / "exercises"
    out.mkdir()
    (out / "99-gone.ipynb").write_text("{}")
    generate(FIXTURE, out, quiet=True)
    assert not (out / "99-gone.ipynb").exists()


def _copy_exercises(src: Path, tmp_path: Path) -> Path:
    out = tmp_path / "exercises"
    shutil.copytree(src, out)
    return out


def _edit(path: Path, index: int, source: str) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells[index].source = source
    nbformat.write(nb, path)


def test_check_passes_on_fresh_exercises(fixture_exercises: Path, capsys) -> None:
    assert check(FIXTURE, fixture_exercises) == []
    assert grading.main(["check", "--solutions", str(FIXTURE), "--exercises", str(fixture_exercises)]) == 0
    assert "up to date" in capsys.readouterr().out


@pytest.mark.parametrize("planted, expected", [
    ("def add(a, b):\n    total = a + b\n    return total", "solution code leaked, 'total = a + b'"),
    ("def add(a, b):\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION", "nbgrader marker '### BEGIN SOLUTION'"),
    ('assert add(1, 2) == 3\nassert add(-40, 40) == 0, "add(-40, 40) should be 0"', "hidden test leaked"),
])
def test_check_finds_leaked_solutions(fixture_exercises: Path, tmp_path: Path, capsys, planted: str,
                                      expected: str) -> None:
    out = _copy_exercises(fixture_exercises, tmp_path)
    _edit(out / f"{FIXTURE_NB}.ipynb", 3, planted)
    problems = check(FIXTURE, out)
    assert any(expected in p for p in problems), problems
    assert any("out of date" in p for p in problems), problems
    assert grading.main(["check", "--solutions", str(FIXTURE), "--exercises", str(out)]) == 1
    err = capsys.readouterr().err
    assert expected in err and "python -m hpcnb.course.grading generate" in err


def test_check_finds_leaks_in_other_files(fixture_exercises: Path, tmp_path: Path) -> None:
    out = _copy_exercises(fixture_exercises, tmp_path)
    (out / "notes.md").write_text("Answer:\n\n    n_nodes = 2\n")
    problems = check(FIXTURE, out)
    assert problems == [f"{out / 'notes.md'}: solution code leaked, 'n_nodes = 2' from the solution cell 'nodes'"]


def test_check_finds_missing_stale_and_outdated(fixture_exercises: Path, tmp_path: Path) -> None:
    solutions = tmp_path / "solutions"
    shutil.copytree(FIXTURE, solutions)
    out = _copy_exercises(fixture_exercises, tmp_path)
    shutil.copy(out / f"{FIXTURE_NB}.ipynb", out / "98-stale.ipynb")
    shutil.copy(solutions / f"{FIXTURE_NB}.ipynb", solutions / "97-new.ipynb")
    _edit(solutions / f"{FIXTURE_NB}.ipynb", 2, "**1.** Write `add(a, b)`: the sum of a and b.")
    problems = "\n".join(check(solutions, out))
    assert "97-new.ipynb is missing" in problems
    assert "98-stale.ipynb has no solution" in problems
    assert f"{FIXTURE_NB}.ipynb is out of date" in problems
    generate(solutions, out, quiet=True)
    assert check(solutions, out) == []


def test_secret_regions() -> None:
    nb = nbformat.read(FIXTURE / f"{FIXTURE_NB}.ipynb", as_version=4)
    secrets, public = secret_regions(nb)
    kinds = [what for what, _ in secrets]
    assert kinds == ["solution cell 'add'", "hidden tests of 'test_add'", "solution cell 'nodes'",
                     "solution cell 'job'"]
    assert "def add(a, b):" in public and "total = a + b" not in public and "add(-40, 40)" not in public


def test_plant_wrong_answer_keeps_structure() -> None:
    nb = nbformat.read(FIXTURE / f"{FIXTURE_NB}.ipynb", as_version=4)
    assert plant_wrong_answer(nb, 3).cells[3].source == "def add(a, b):\n    total = None\n    return None"
    assert plant_wrong_answer(nb, 6).cells[6].source == "n_nodes = None"
    job = plant_wrong_answer(nb, 9).cells[9].source
    assert job == "job = None"
    assert nb.cells[3].source.count("BEGIN SOLUTION") == 1  # the original is untouched


# --------------------------------------------------------------------------------- autograde

def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_autograde_mechanisms(fixture_exercises: Path, tmp_path: Path) -> None:
    """Full marks, zero, a wrong answer, an infinite loop, a deleted and an edited test cell."""
    solution = nbformat.read(FIXTURE / f"{FIXTURE_NB}.ipynb", as_version=4)
    subs = tmp_path / "submissions"
    name = f"{FIXTURE_NB}.ipynb"

    def put(student: str, nb) -> None:
        (subs / student).mkdir(parents=True)
        nbformat.write(nb, subs / student / name)

    put("solution", solution)
    put("untouched", nbformat.read(fixture_exercises / name, as_version=4))
    wrong = copy.deepcopy(solution)  # off by one: the visible test fails too
    wrong.cells[3].source = "def add(a, b):\n    return a + b + 1"
    put("wrong", wrong)
    hidden = copy.deepcopy(solution)  # passes the visible test only: the hidden test takes the points
    hidden.cells[3].source = "def add(a, b):\n    return 3"
    put("hidden", hidden)
    loop = copy.deepcopy(solution)  # the test cell calls add(): it never returns
    loop.cells[3].source = "def add(a, b):\n    while True:\n        pass"
    put("loop", loop)
    deleted = copy.deepcopy(solution)  # the student deleted the test of add() and of n_nodes
    deleted.cells = [c for c in deleted.cells if meta(c).get("grade_id") not in ("test_add", "test_nodes")]
    put("deleted", deleted)
    edited = copy.deepcopy(solution)  # a wrong n_nodes, and its test "fixed" by the student
    edited.cells[6].source = "n_nodes = 8"
    edited.cells[7].source = "assert True  # my test now"
    edited.cells[4].metadata["nbgrader"]["points"] = 100
    put("edited", edited)
    (subs / "absent").mkdir()  # submitted nothing
    (subs / "absent" / "notes.ipynb").write_text("{}")

    out = tmp_path / "grades"
    started = time.monotonic()
    grades = autograde(subs, out, solutions=FIXTURE, timeout=15, quiet=True)
    took = time.monotonic() - started
    by = {g.student: g for g in grades}
    scores = {s: (g.score, g.max_score) for s, g in by.items()}
    assert scores == {
        "absent": (0, 5), "deleted": (5, 5), "edited": (4, 5), "hidden": (3, 5), "loop": (3, 5),
        "solution": (5, 5), "untouched": (0, 5), "wrong": (3, 5),
    }, scores
    cells = {s: {c.name: c.score for c in g.cells.values()} for s, g in by.items()}
    assert cells["wrong"] == {"test_add": 0, "test_nodes": 1, "test_job": 2}
    assert by["wrong"].cells["test_add"].error == "AssertionError"
    assert by["absent"].status == "missing"
    # the infinite loop: cut after 15 s, that cell 0, the rest graded
    assert by["loop"].timed_out_cells == ["test_add"] and cells["loop"]["test_job"] == 2
    assert took < 8 * 60, f"grading took {took:.0f} s"
    # the deleted test cells came back (with the hidden test) and were run
    restored = nbformat.read(out / "autograded" / "deleted" / name, as_version=4)
    restored_ids = [meta(c).get("grade_id") for c in restored.cells]
    assert restored_ids.index("test_add") == restored_ids.index("add") + 1
    assert "add(-40, 40)" in restored.cells[restored_ids.index("test_add")].source
    # the edited test cell was replaced by the source's, and its points are the source's
    assert cells["edited"] == {"test_add": 2, "test_nodes": 0, "test_job": 2}
    # what the instructor gets
    rows = _read_csv(out / "grades.csv")
    assert rows[0].keys() >= {"student", "notebook", "score", "max_score"}
    assert {(r["student"], r["notebook"], r["score"], r["max_score"]) for r in rows} >= {
        ("solution", FIXTURE_NB, "5", "5"), ("untouched", FIXTURE_NB, "0", "5"), ("loop", FIXTURE_NB, "3", "5")}
    timeouts = [r for r in _read_csv(out / "cells.csv") if r["error"] == "CellTimeoutError"]
    assert [(r["student"], r["cell"], r["score"]) for r in timeouts] == [("loop", "test_add", "0")]
    for student in ("solution", "untouched", "wrong", "loop", "deleted", "edited", "hidden"):
        html = (out / "feedback" / student / f"{FIXTURE_NB}.html").read_text()
        assert "test_add" in html or "Test cell" in html or "Score" in html
    assert not (out / "feedback" / "absent").exists()
    assert (out / "gradebook.db").exists()


@pytest.mark.slow
def test_autograde_survives_stubborn_and_broken_submissions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop that swallows KeyboardInterrupt: the notebook's grading is killed (kernel included) at
    notebook_timeout and scores 0; an unreadable notebook scores 0; the next student is graded."""
    import tempfile

    import psutil

    ours = tmp_path / "tmp"  # this grading's folders only: other pytest workers grade at the same time
    ours.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(ours))

    solution = nbformat.read(FIXTURE / f"{FIXTURE_NB}.ipynb", as_version=4)
    subs = tmp_path / "subs"
    name = f"{FIXTURE_NB}.ipynb"
    stubborn = copy.deepcopy(solution)
    stubborn.cells[3].source = ("def add(a, b):\n    import time\n    while True:\n        try:\n"
                                "            time.sleep(0.1)\n        except KeyboardInterrupt:\n            pass")
    for student, nb in (("stubborn", stubborn), ("zz-fine", solution)):
        (subs / student).mkdir(parents=True)
        nbformat.write(nb, subs / student / name)
    (subs / "broken").mkdir()
    (subs / "broken" / name).write_text('{"cells": [')
    started = time.monotonic()
    # the cell limit (60 s) is longer than the notebook's (40 s): the whole grading process is killed
    grades = autograde(subs, tmp_path / "grades", solutions=FIXTURE, timeout=60, notebook_timeout=40, quiet=True)
    took = time.monotonic() - started
    by = {g.student: g for g in grades}
    assert (by["stubborn"].status, by["stubborn"].score, by["stubborn"].max_score) == ("timeout", 0, 5)
    assert "longer than 40 s" in by["stubborn"].message
    assert (by["broken"].status, by["broken"].score) == ("error", 0)
    assert "NotJSONError" in by["broken"].message or "JSON" in by["broken"].message, by["broken"].message
    assert (by["zz-fine"].status, by["zz-fine"].score) == ("graded", 5)
    assert took < 180, took
    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "hpcnb.localslurm.controller" in cmdline:
            continue  # the local Slurm's daemon, started by the first Slurm command of the session
        try:
            if str(ours) in proc.cwd() or any(str(ours) in a for a in cmdline):
                left.append((proc.pid, cmdline))
        except psutil.Error:
            continue
    assert not left, f"processes left behind by grading: {left}"
    rows = {r["student"]: r for r in _read_csv(tmp_path / "grades" / "grades.csv")}
    assert rows["stubborn"]["status"] == "timeout" and rows["broken"]["status"] == "error"
    # with the cell limit shorter: the graded tests run in the test kernel, whose call of add() in
    # the notebook's kernel never returns; it is cut at the cell's limit: add's tests score 0 with
    # CellTimeoutError, the rest of the notebook is graded (hpcnb.course.testkernel)
    shutil.rmtree(subs / "zz-fine")
    shutil.rmtree(subs / "broken")
    (stuck,) = autograde(subs, tmp_path / "grades2", solutions=FIXTURE, timeout=5, quiet=True)
    assert (stuck.student, stuck.status) == ("stubborn", "graded") and stuck.score < stuck.max_score, stuck
    assert "CellTimeoutError" in {cell.error for cell in stuck.cells.values()}, stuck.cells


@pytest.mark.slow
def test_autograde_cli(fixture_exercises: Path, tmp_path: Path, capsys) -> None:
    subs = tmp_path / "subs"
    (subs / "ada").mkdir(parents=True)
    shutil.copy(FIXTURE / f"{FIXTURE_NB}.ipynb", subs / "ada")
    out = tmp_path / "grades"
    rc = grading.main(["autograde", str(subs), "--out", str(out), "--solutions", str(FIXTURE), "--timeout", "60"])
    assert rc == 0
    assert f"ada {FIXTURE_NB}: 5/5" in capsys.readouterr().out
    assert _read_csv(out / "grades.csv") == [
        {"student": "ada", "notebook": FIXTURE_NB, "score": "5", "max_score": "5", "status": "graded",
         "message": ""}]
    assert (out / "feedback" / "ada" / f"{FIXTURE_NB}.html").exists()


def test_autograde_refuses_bad_input(tmp_path: Path, capsys) -> None:
    assert grading.main(["autograde", str(tmp_path / "nope"), "--out", str(tmp_path / "g")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "subs").mkdir()
    assert grading.main(["autograde", str(tmp_path / "subs"), "--out", str(tmp_path / "g"),
                         "--solutions", str(tmp_path / "empty")]) == 2
    assert "no solution notebooks" in capsys.readouterr().err


def test_a_grading_process_reads_notebooks_without_rfc3987_syntax() -> None:
    """hpcnb.course leaves out jsonschema's rfc3987_syntax (its import builds 39 Earley parsers: 0.8
    CPU s of each grading process); nbformat still validates a notebook, and rejects a broken one."""
    probe = ("import sys, hpcnb.course, nbformat; from nbformat import v4; "
             "nbformat.validate(v4.new_notebook(cells=[v4.new_code_cell('1')])); "
             "bad = v4.new_notebook(); bad.cells = [{'cell_type': 'code'}]; "
             "print(nbformat.validator.isvalid(bad), sys.modules.get('rfc3987_syntax', 'never imported'))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "None"], done.stdout


# ---------------------------------------------------------------- the real solutions/ notebooks

SHARES = 3  # make test's xdist workers (-n 3)


def _stems(share: int) -> list:
    """One share of the solution notebooks (each share is graded on its own xdist worker)."""
    return sorted(REAL)[share::SHARES] or [pytest.param("none", marks=pytest.mark.skip("no solutions/ yet"))]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.function.__name__ == "test_autograde_real_solution":
        metafunc.parametrize("stem", _stems(metafunc.cls.share))


class _AutogradeShare:
    """The slowest tests of the suite (each solution notebook run once, 1 + exercises times with
    WRONG_ANSWERS), in one class per share so that ``--dist loadscope`` (make test) grades the
    shares side by side."""

    pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
    share = 0

    def test_autograde_real_solution(self, stem: str, tmp_path: Path) -> None:
        autograde_real_solution(stem, tmp_path)


class TestAutogradeShare1(_AutogradeShare):
    share = 0


class TestAutogradeShare2(_AutogradeShare):
    share = 1


class TestAutogradeShare3(_AutogradeShare):
    share = 2


def autograde_real_solution(stem: str, tmp_path: Path) -> None:
    """Solution: full marks; with WRONG_ANSWERS, a wrong answer in one exercise: its points lost."""
    solution = nbformat.read(REAL[stem], as_version=4)
    subs = tmp_path / "subs"
    name = f"{stem}.ipynb"
    (subs / "solution").mkdir(parents=True)
    shutil.copy(REAL[stem], subs / "solution" / name)
    answers = answer_tests(solution)
    assert answers, f"{name} has no auto-graded answer followed by a test cell"
    if not WRONG_ANSWERS:
        answers = {}
    for index in answers:
        student = f"wrong-{meta(solution.cells[index])['grade_id']}"
        (subs / student).mkdir()
        nbformat.write(plant_wrong_answer(solution, index), subs / student / name)
    grades = autograde(subs, tmp_path / "grades", solutions=SOLUTIONS_DIR, timeout=REAL_TIMEOUT,
                       notebooks=[stem], quiet=True)
    by = {g.student: g for g in grades}
    full = sum(points(solution).values())
    report = {s: f"{g.score:g}/{g.max_score:g} {g.status} " + str({c.name: (c.score, c.error) for c in g.cells.values()})
              + (f" {g.message}" if g.message else "") for s, g in by.items()}
    print(f"\n{stem}: " + "\n  ".join(f"{s}: {r}" for s, r in report.items()))
    assert by["solution"].status == "graded" and by["solution"].score == full == by["solution"].max_score, report
    for index, tests in answers.items():
        student = f"wrong-{meta(solution.cells[index])['grade_id']}"
        g = by[student]
        lost = {c: g.cells[c].score for c in tests}
        assert g.status == "graded", report[student]
        assert all(v == 0 for v in lost.values()), f"{student}: tests {lost} kept points: {report[student]}"
        assert g.score <= full - sum(points(solution)[c] for c in tests), report[student]


# ---------------------------------------------------------------------- the students' kit

def test_check_and_generate_ignore_work_folders(fixture_exercises: Path, tmp_path: Path) -> None:
    """Running an exercise writes exercises/work/ (job scripts, outputs): no leak, no loop of 'run generate'."""
    out = _copy_exercises(fixture_exercises, tmp_path)
    work = out / "work" / "job"
    work.mkdir(parents=True)
    (work / "hog.py").write_text("n_nodes = 2\nassert add(-40, 40) == 0\n")
    assert check(FIXTURE, out) == []
    generate(FIXTURE, out, quiet=True)  # raised "the generated exercises still hold solution text"
    assert (work / "hog.py").exists()


def test_autograde_timeout_follows_the_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcnb import backend

    monkeypatch.setattr(backend, "which_slurm", lambda: "local")
    assert grading.default_timeout() == grading.DEFAULT_TIMEOUT == 60
    monkeypatch.setattr(backend, "which_slurm", lambda: "real")
    assert grading.default_timeout() == grading.REAL_SLURM_TIMEOUT >= 600
    monkeypatch.undo()
    monkeypatch.setenv("HPCNB_SLURM", "bogus")
    with pytest.raises(grading.GradingError, match="HPCNB_SLURM='bogus'"):
        grading.default_timeout()


def _git(root: Path, *args: str) -> None:
    import subprocess

    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


def test_release_takes_the_committed_course_and_the_students_kit(tmp_path: Path, capsys) -> None:
    """Lessons as committed (not the local outputs), the kit's README and Makefile, nothing of the instructor's."""
    root = tmp_path / "course"
    (root / "notebooks").mkdir(parents=True)
    (root / "hpcnb").mkdir()
    (root / "hpcnb" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text("[project]\nname = 'hpcnb'\n")
    (root / "START.md").write_text("# Start here\n")  # the Lab's landing page (hpcnb.course.lab)
    lesson = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hello')")])
    nbformat.write(lesson, root / "notebooks" / "01-lesson.ipynb")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "course")
    lesson.cells[0].outputs = [nbformat.v4.new_output("stream", text="LOCAL OUTPUT of the instructor\n")]
    nbformat.write(lesson, root / "notebooks" / "01-lesson.ipynb")
    (root / "notebooks" / "scratch.ipynb").write_text("{}")  # not committed

    files = grading.release(tmp_path / "kit", root=root, solutions=FIXTURE, quiet=True)
    assert "is not a git checkout" not in capsys.readouterr().err
    kit = tmp_path / "kit"
    assert sorted(files) == ["Makefile", "README.md", "START.md", f"exercises/{FIXTURE_NB}.ipynb", "hpcnb/__init__.py",
                             "notebooks/01-lesson.ipynb", "pyproject.toml"]
    assert "LOCAL OUTPUT" not in (kit / "notebooks" / "01-lesson.ipynb").read_text()
    readme, makefile = (kit / "README.md").read_text(), (kit / "Makefile").read_text()
    for text in (readme, makefile):
        assert not re.search(r"solutions/|tests/|make test|nbgrader|\[all\]", text)
    assert "-e '.[student]'" in makefile and "-m hpcnb.course.lab" in makefile  # the course's Lab (make lab)
    assert "--root" not in makefile  # it serves the kit's folder: exercises/ reachable beside notebooks/
    assert "make lab" in readme and "exercises/" in readme

    plain = tmp_path / "plain"
    shutil.copytree(root, plain, ignore=shutil.ignore_patterns(".git"))
    grading.release(tmp_path / "kit2", root=plain, solutions=FIXTURE, quiet=True)
    assert "LOCAL OUTPUT" in (tmp_path / "kit2" / "notebooks" / "01-lesson.ipynb").read_text()
    assert "is not a git checkout: the bundle takes its files as they are" in capsys.readouterr().err


def test_student_extra_holds_what_the_lessons_need_only() -> None:
    import tomllib

    project = tomllib.loads((grading.ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["student"] == ["hpcnb[dl,lab]"]
    student = " ".join(extras["dl"] + extras["lab"]).lower()
    for instructor_only in ("nbgrader", "pytest", "playwright", "jupyterhub", "batchspawner"):
        assert instructor_only not in student
