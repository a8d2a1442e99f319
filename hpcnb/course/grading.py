"""Course tooling for instructors: student exercises from worked solutions, and autograding.

Both go through nbgrader (its own preprocessors, in a throw-away course directory); ``hpcnb grading``
(or ``python -m hpcnb.course.grading``)::

    hpcnb grading generate     # solutions/*.ipynb -> exercises/*.ipynb (student versions)
    hpcnb grading check        # exercises/ up to date with solutions/, and nothing leaked
    hpcnb grading release OUT  # the students' kit (folder or .tar.gz), from the committed course
    hpcnb grading collect SUBMISSIONS   # each portal user's exercises (hpcnb.course.handout)
    hpcnb grading autograde SUBMISSIONS --out grades/ [--notebook NAME]
                               # SUBMISSIONS/<student>/<notebook>.ipynb -> grades.csv, feedback
    hpcnb grading return grades/feedback  # the feedback into each user's home

``generate`` copies only the solution notebooks into the temporary course (nbgrader would
copy every other file of a source folder into the release), runs ``generate_assignment``
(LockCells, ClearSolutions, ClearOutput, ComputeChecksums, SaveCells, ClearHiddenTests ...)
and writes the student versions to ``exercises/``; exercises whose solution is gone are removed.

``autograde`` treats each solution notebook as one nbgrader assignment of one notebook, grades
each student's notebook in its own process (``nbgrader autograde``: submitted test cells are
replaced by the source's, deleted ones are added back, hidden tests come back; every cell runs
under ``ExecutePreprocessor.timeout``), then writes ``grades.csv``, ``cells.csv``, feedback
HTML (``nbgrader generate_feedback``) per student, the autograded notebooks and the gradebook.
nbgrader runs as the instructor; the student's code runs only in the kernel, which nbgrader's
Execute (:class:`hpcnb.course.sandbox.SandboxedExecute`) starts in a bubblewrap sandbox of its own.
"""
from __future__ import annotations

import argparse
import ast
import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from hpcnb.course import handout, sandbox
from hpcnb.course.sandbox import Limits, SandboxError
from hpcnb.course.submissions import SubmissionError, read_submission
from hpcnb.course.tamper import TAMPERED
from hpcnb.slurm import sizes

ROOT = Path(__file__).resolve().parents[2]
# The course checkout's folders (an editable install); from a plain install: the current folder's.
_BASE = ROOT if (ROOT / "solutions").is_dir() else Path.cwd()
SOLUTIONS_DIR = _BASE / "solutions"
EXERCISES_DIR = _BASE / "exercises"
DEFAULT_TIMEOUT = 60  # seconds per cell when autograding, on the local Slurm
REAL_SLURM_TIMEOUT = 600  # on a real one: a TIMEOUT takes 60-90 s there, a requeue hold 120 s

__all__ = [
    "DEFAULT_TIMEOUT",
    "EXERCISES_DIR",
    "SOLUTIONS_DIR",
    "CellGrade",
    "GradingError",
    "NotebookGrade",
    "autograde",
    "bundle_problems",
    "check",
    "default_timeout",
    "generate",
    "main",
    "plant_wrong_answer",
    "release",
    "secret_regions",
]

#: Folders under exercises/ that are no exercise: Jupyter's checkpoints, the files a run writes.
_SKIPPED_DIRS = {".ipynb_checkpoints", "work"}
_MARKER = re.compile(r"(BEGIN|END)\s+(SOLUTION|HIDDEN\s+TESTS)\b")
_STUB_LINES = {"# YOUR CODE HERE", "raise NotImplementedError()", "YOUR ANSWER HERE"}


class GradingError(RuntimeError):
    """nbgrader refused a notebook, or the folders are not as expected."""


# ------------------------------------------------------------------------- notebooks

def _read(path: Path) -> Any:
    import nbformat

    return nbformat.read(os.fspath(path), as_version=4)


def solution_notebooks(solutions: Path = SOLUTIONS_DIR) -> dict[str, Path]:
    """``{stem: path}`` for every ``solutions/*.ipynb`` (top level only), sorted by name."""
    solutions = Path(solutions)
    if not solutions.is_dir():
        return {}
    found = {p.stem: p for p in sorted(solutions.glob("*.ipynb")) if not p.name.startswith(".")}
    bad = [s for s in found if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", s)]
    if bad:
        raise GradingError(f"notebook names must be letters, digits, '.', '_' or '-': {', '.join(bad)}")
    return found


def _nbgrader_meta(cell: Any) -> dict[str, Any]:
    return dict(cell.get("metadata", {}).get("nbgrader", {}) or {})


def _scripts_on_path() -> None:
    """nbgrader runs ``alembic`` (and kernels) from PATH: put this Python's scripts folder on it."""
    import sysconfig

    scripts = sysconfig.get_path("scripts")
    parts = os.environ.get("PATH", os.defpath).split(os.pathsep)
    if scripts and scripts not in parts:
        os.environ["PATH"] = os.pathsep.join([*parts, scripts])


def _config(course: Path, timeout: int | None = None, limits: Limits | None = None) -> Any:
    from traitlets.config import Config

    c = Config()
    if limits is not None:  # autograde: the kernel runs in the sandbox (hpcnb.course.sandbox)
        from nbgrader.converters import Autograde
        from nbgrader.preprocessors import Execute

        from hpcnb.course.sandbox import SandboxedExecute

        default = Autograde.class_traits()["autograde_preprocessors"].default()
        c.Autograde.autograde_preprocessors = [SandboxedExecute if p is Execute else p for p in default]
        c.SandboxKernelManager.limits = asdict(limits)
        c.SandboxKernelManager.sandbox_env = {"NBGRADER_EXECUTION": "autograde"}
    c.CourseDirectory.root = str(course)
    c.CourseDirectory.course_id = "hpcnb"
    c.OverwriteCells.add_missing_cells = True  # a deleted test cell comes back from the gradebook
    if timeout is not None:
        c.ExecutePreprocessor.timeout = timeout
        c.Execute.timeout = timeout
    c.Execute.interrupt_on_timeout = True
    c.HTMLExporter.template_name = "feedback"
    return c


def _run_converter(kind: str, course: Path, assignment: str, student: str | None = None,
                   timeout: int | None = None, db: bool = True, limits: Limits | None = None) -> dict[str, Any]:
    """Run one nbgrader converter in this process; return capture_log's dict (success, log, error)."""
    import logging

    from nbgrader.converters import Autograde, GenerateAssignment, GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import capture_log

    _scripts_on_path()
    cfg = _config(course, timeout, limits)
    if kind == "generate" and not db:  # nbgrader's --no-db flag
        cfg.SaveCells.enabled = False
        cfg.GenerateAssignment.no_database = True
    coursedir = CourseDirectory(config=cfg)
    coursedir.assignment_id = assignment
    if student is not None:
        coursedir.student_id = student
    cls = {"generate": GenerateAssignment, "autograde": Autograde, "feedback": GenerateFeedback}[kind]
    app = cls(coursedir=coursedir, config=cfg)
    app.force = True
    if kind == "generate":
        app.create_assignment = True
    elif kind == "autograde":
        app.create_student = True
    app.log.setLevel(logging.INFO)
    cwd = os.getcwd()
    try:
        return capture_log(app)
    finally:
        os.chdir(cwd)


def _build_source(course: Path, notebooks: dict[str, Path], db: bool = True) -> None:
    """One assignment per notebook, holding nothing but that notebook (no other file can leak)."""
    for stem, path in notebooks.items():
        folder = course / "source" / stem
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, folder / f"{stem}.ipynb")
        result = _run_converter("generate", course, stem, db=db)
        if not result.get("success"):
            raise GradingError(f"nbgrader generate_assignment failed for {path}:\n"
                               f"{_log_tail(result)}")


def _log_tail(result: dict[str, Any], lines: int = 30) -> str:
    text = (result.get("log") or "") + (result.get("error") or "")
    return "\n".join(text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------------------- generate

def _release(notebooks: dict[str, Path], into: Path) -> dict[str, Path]:
    """Student versions of ``notebooks`` written into ``into``; ``{stem: path}``."""
    import nbformat

    into.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="hpcnb-generate-") as tmp:
        course = Path(tmp)
        _build_source(course, notebooks, db=False)
        for stem in notebooks:
            released = course / "release" / stem / f"{stem}.ipynb"
            if not released.exists():
                raise GradingError(f"nbgrader wrote no student version of {stem}.ipynb")
            nb = _read(released)
            target = into / f"{stem}.ipynb"
            nbformat.write(nb, os.fspath(target))
            written[stem] = target
    return written


def generate(solutions: Path = SOLUTIONS_DIR, exercises: Path = EXERCISES_DIR, *, quiet: bool = False) -> list[Path]:
    """Write ``exercises/<name>.ipynb`` for every ``solutions/<name>.ipynb``; remove stale ones."""
    solutions, exercises = Path(solutions), Path(exercises)
    notebooks = solution_notebooks(solutions)
    exercises.mkdir(parents=True, exist_ok=True)
    written = _release(notebooks, exercises)
    for old in sorted(exercises.glob("*.ipynb")):
        if old.stem not in notebooks:
            old.unlink()
            if not quiet:
                print(f"removed {old} (no {solutions.name}/{old.name} any more)")
    for path in written.values():
        if not quiet:
            print(f"wrote {path}")
    if not notebooks and not quiet:
        print(f"no notebooks in {solutions}: nothing to generate")
    problems = _leaks(notebooks, exercises)
    if problems:
        raise GradingError("the generated exercises still hold solution text:\n  " + "\n  ".join(problems))
    return list(written.values())


# ------------------------------------------------------------------------------- check

def _regions(source: str, begin: str, end: str) -> list[str]:
    """Text between ``### BEGIN X`` and ``### END X`` lines (markers excluded)."""
    out, current = [], None
    for line in source.splitlines():
        if begin in line:
            current = []
        elif end in line and current is not None:
            out.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    if current:
        out.append("\n".join(current))
    return out


def secret_regions(nb: Any) -> tuple[list[tuple[str, str]], str]:
    """``([(what, text), ...], public_text)``: solution code/answers and hidden tests of a solution
    notebook, and all the text that students may see (everything else)."""
    secrets: list[tuple[str, str]] = []
    public: list[str] = []
    for index, cell in enumerate(nb.cells):
        meta = _nbgrader_meta(cell)
        name = meta.get("grade_id") or f"cell {index + 1}"
        source = cell.get("source", "")
        if meta.get("solution"):
            found = _regions(source, "BEGIN SOLUTION", "END SOLUTION")
            if found:
                secrets += [(f"solution cell {name!r}", text) for text in found]
                public.append(_outside(source, "BEGIN SOLUTION", "END SOLUTION"))
            else:  # the whole cell is the answer (nbgrader replaces it by the stub)
                secrets.append((f"solution cell {name!r}", source))
        elif meta.get("grade") or meta.get("task") or meta.get("locked"):
            found = _regions(source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
            secrets += [(f"hidden tests of {name!r}", text) for text in found]
            public.append(_outside(source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"))
        else:
            public.append(source)
    return secrets, "\n".join(public)


def _outside(source: str, begin: str, end: str) -> str:
    keep, inside = [], False
    for line in source.splitlines():
        if begin in line:
            inside = True
        elif end in line and inside:
            inside = False
        elif not inside:
            keep.append(line)
    return "\n".join(keep)


def _significant(line: str) -> bool:
    """A line distinctive enough that finding it in an exercise means it leaked."""
    text = line.strip()
    return len(re.sub(r"[^A-Za-z0-9_]", "", text)) >= 5 and text not in _STUB_LINES


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _text_lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if line.strip()}


def _leaks(notebooks: dict[str, Path], exercises: Path) -> list[str]:
    """Markers, solution code or hidden tests found in any file under ``exercises``."""
    per_notebook: dict[str, list[tuple[str, str]]] = {}
    for stem, path in notebooks.items():
        secrets, public = secret_regions(_read(path))
        allowed = _text_lines(public)
        per_notebook[stem] = [
            (what, line.strip()) for what, text in secrets for line in text.splitlines()
            if _significant(line) and line.strip() not in allowed
        ]
    problems: list[str] = []
    if not exercises.is_dir():
        return problems
    for path in sorted(p for p in exercises.rglob("*") if p.is_file()):
        if _SKIPPED_DIRS & set(path.relative_to(exercises).parts[:-1]):
            continue  # Jupyter's checkpoints, and what running an exercise wrote (work/)
        rel = _show(path)
        try:
            raw = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files cannot carry code text we would recognise
        if path.suffix == ".ipynb":
            try:
                text = "\n".join(_strings(json.loads(raw)))
            except json.JSONDecodeError:
                text = raw
            candidates = per_notebook.get(path.stem) or [s for v in per_notebook.values() for s in v]
        else:
            text, candidates = raw, [s for v in per_notebook.values() for s in v]
        for match in _MARKER.finditer(text):
            line = text[:match.start()].count("\n") + 1
            problems.append(f"{rel}: nbgrader marker '### {match.group(0)}' (line {line} of its text)")
        present = _text_lines(text)
        reported: set[tuple[str, str]] = set()
        for what, line in candidates:
            if line in present and (what, line) not in reported:
                reported.add((what, line))
                kind = "hidden test" if what.startswith("hidden") else "solution code"
                problems.append(f"{rel}: {kind} leaked, {line!r} from the {what}")
    return problems


def _show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _same_notebook(a: Path, b: Path) -> bool:
    try:
        return json.loads(a.read_text(encoding="utf-8")) == json.loads(b.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False


def check(solutions: Path = SOLUTIONS_DIR, exercises: Path = EXERCISES_DIR) -> list[str]:
    """Problems with ``exercises/`` (empty list: up to date and nothing leaked)."""
    solutions, exercises = Path(solutions), Path(exercises)
    notebooks = solution_notebooks(solutions)
    problems: list[str] = []
    existing = {p.stem: p for p in sorted(exercises.glob("*.ipynb"))} if exercises.is_dir() else {}
    with tempfile.TemporaryDirectory(prefix="hpcnb-check-") as tmp:
        try:
            fresh = _release(notebooks, Path(tmp))
        except GradingError as err:
            return [str(err)]
        for stem, path in fresh.items():
            if stem not in existing:
                problems.append(f"{_show(exercises / path.name)} is missing (solution {_show(notebooks[stem])})")
            elif not _same_notebook(existing[stem], path):
                problems.append(f"{_show(existing[stem])} is out of date with {_show(notebooks[stem])}")
    for stem, path in existing.items():
        if stem not in notebooks:
            problems.append(f"{_show(path)} has no solution in {_show(solutions)} (stale)")
    problems += _leaks(notebooks, exercises)
    return problems


# ------------------------------------------------------------------------------ release

#: What students get of the course checkout: its files as committed (exercises/ is generated afresh
#: from solutions/; the README and Makefile are the students' kit's, KIT).
BUNDLE = ("pyproject.toml", "environment.yml", "ci/install-system-deps.sh", "ci/build-horovod.sh", "hpcnb",
          "notebooks")
KIT = Path(__file__).with_name("kit")  # README.md, Makefile: what students read and run
_NOT_BUNDLED = {"__pycache__", ".ipynb_checkpoints", "work", "solutions", "tests"}


def _bundle_files(root: Path) -> Iterator[Path]:
    for name in BUNDLE:
        top = root / name
        if top.is_file():
            yield top
        for path in sorted(top.rglob("*")) if top.is_dir() else []:
            rel = path.relative_to(root).parts
            if path.is_file() and not any(p in _NOT_BUNDLED or p.startswith(".") for p in rel) \
                    and path.suffix != ".pyc":
                yield path


def _committed(root: Path, names: Iterable[str], into: Path) -> bool:
    """Extract ``names`` of ``root``'s git HEAD into ``into`` (False: ``root`` is no git checkout)."""
    import io
    import tarfile

    def git(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)

    top = git("rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(os.fsdecode(top.stdout.strip())).resolve() != root.resolve():
        return False
    listed = git("ls-tree", "-z", "--name-only", "HEAD", "--", *names).stdout.decode().split("\0")
    archive = git("archive", "--format=tar", "HEAD", "--", *filter(None, listed))
    if archive.returncode != 0:
        raise GradingError(f"git archive HEAD failed in {root}: {archive.stderr.decode().strip()}")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return True


def release(out: Path, *, root: Path = _BASE, solutions: Path = SOLUTIONS_DIR, quiet: bool = False) -> list[str]:
    """Write the student bundle to ``out`` (a new folder, or a ``.tar.gz``): the course as committed
    (a git checkout; else its files as they are, with a warning) without ``solutions/`` and tests,
    exercises generated from the solutions, the students' kit's README and Makefile; returns its files.
    Nothing is written when the bundle would carry a solution (GradingError; see :func:`bundle_problems`)."""
    out, root, solutions = Path(out), Path(root), Path(solutions)
    shown = _show(solutions)
    if out.exists() and (out.is_file() or any(out.iterdir())):
        raise GradingError(f"{out} exists: give a new folder or archive name")
    with tempfile.TemporaryDirectory(prefix="hpcnb-release-") as tmp:
        source = Path(tmp) / "committed"
        if _committed(root, (*BUNDLE, "solutions"), source):
            if solutions.resolve() == (root / "solutions").resolve():
                solutions = source / "solutions"
        else:
            source = root
            print(f"warning: {root} is not a git checkout: the bundle takes its files as they are "
                  "(notebooks with their outputs)", file=sys.stderr)
        folder = Path(tmp) / out.name.removesuffix(".tar.gz")
        for path in [*_bundle_files(source), *sorted(KIT.iterdir())]:
            dest = folder / (path.name if path.parent == KIT else path.relative_to(source))
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        generate(solutions, folder / "exercises", quiet=True)
        problems = bundle_problems(folder, solutions)
        if problems:
            raise GradingError("the student bundle would carry solutions:\n  " + "\n  ".join(problems))
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.name.endswith(".tar.gz"):
            import tarfile

            with tarfile.open(out, "w:gz") as tar:
                tar.add(folder, arcname=folder.name)
        else:
            shutil.copytree(folder, out, dirs_exist_ok=True)
    if not quiet:
        print(f"wrote {out}: {len(files)} files, exercises/ from {shown}, no solutions")
    return files


def bundle_problems(bundle: Path, solutions: Path = SOLUTIONS_DIR) -> list[str]:
    """Why ``bundle`` is not fit for students: a ``solutions``/``tests`` folder, a notebook with
    nbgrader markers or filled-in solution cells, a hidden test anywhere, or exercises that are
    not the generated ones (:func:`check`). Lessons may share code with solutions: they teach it."""
    hidden: set[str] = set()
    shown = _taught_lines(Path(solutions).parent)
    for path in solution_notebooks(solutions).values():
        secrets, public = secret_regions(_read(path))
        shown |= _text_lines(public)
        hidden |= {line.strip() for what, text in secrets if what.startswith("hidden")
                   for line in text.splitlines() if _significant(line)}
    hidden -= shown  # a line some exercise shows, or a lesson teaches, is no secret
    problems = [f"{p.relative_to(bundle)}: a {p.name}/ folder" for p in sorted(bundle.rglob("*"))
                if p.is_dir() and p.name in ("solutions", "tests")]
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        rel = path.relative_to(bundle)
        try:
            raw = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        text = raw
        if path.suffix == ".ipynb":
            try:
                nb = json.loads(raw)
                text = "\n".join(_strings(nb))
                problems += _notebook_problems(rel, nb)
            except json.JSONDecodeError:
                problems.append(f"{rel}: not a notebook (JSON)")
        problems += [f"{rel}: hidden test {line!r}" for line in sorted(hidden & _text_lines(text))]
    return problems + check(solutions, bundle / "exercises")


def _taught_lines(course: Path) -> set[str]:
    """Every line of the course's lessons (``notebooks/``, none with nbgrader cells) and package code."""
    lines: set[str] = set()
    for path in sorted((course / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        if not any(_nbgrader_meta(cell) for cell in nb.get("cells", [])):
            lines |= _text_lines("\n".join(_strings(nb)))
    for path in sorted((course / "hpcnb").rglob("*.py")):
        lines |= _text_lines(path.read_text(encoding="utf-8"))
    return lines


def _notebook_problems(rel: Path, nb: dict[str, Any]) -> list[str]:
    """nbgrader markers, and solution cells that hold more than nbgrader's stub."""
    problems = []
    for cell in nb.get("cells", []):
        source = "".join(cell.get("source", ""))
        if _MARKER.search(source):
            problems.append(f"{rel}: nbgrader marker in a cell")
        meta = _nbgrader_meta(cell)
        if meta.get("solution") and not _text_lines(source) & _STUB_LINES:
            problems.append(f"{rel}: solution cell {meta.get('grade_id')!r} is filled in")
    return sorted(set(problems))


# ------------------------------------------------------------------------- autograde

@dataclass
class CellGrade:
    """One graded cell of one submission."""

    name: str
    score: float
    max_score: float
    error: str = ""  # the error's name when the cell failed (AssertionError, CellTimeoutError ...)


@dataclass
class NotebookGrade:
    """One student's notebook: ``status`` is graded, missing, timeout (killed as a whole), error, or
    tampered (its graded cells after the tampering score 0: :mod:`hpcnb.course.tamper`)."""

    student: str
    notebook: str
    score: float
    max_score: float
    status: str = "graded"
    cells: dict[str, CellGrade] = field(default_factory=dict)
    feedback: Path | None = None
    message: str = ""

    @property
    def timed_out_cells(self) -> list[str]:
        return [c.name for c in self.cells.values() if c.error == "CellTimeoutError"]


def default_timeout() -> int:
    """Seconds per cell: DEFAULT_TIMEOUT on the local Slurm, REAL_SLURM_TIMEOUT on a real one (slower)."""
    from hpcnb.backend import which_slurm

    try:
        real = which_slurm() == "real"
    except ValueError as err:  # a bad HPCNB_SLURM
        raise GradingError(str(err)) from None
    return REAL_SLURM_TIMEOUT if real else DEFAULT_TIMEOUT


def _students(submissions: Path) -> list[Path]:
    return sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def _code_cells(path: Path) -> int:
    return sum(1 for c in _read(path).cells if c.cell_type == "code")


def _cell_errors(autograded: Path) -> dict[str, str]:
    """grade_id -> name of the error a graded cell raised, from an autograded notebook."""
    errors: dict[str, str] = {}
    if not autograded.exists():
        return errors
    for cell in _read(autograded).cells:
        meta = _nbgrader_meta(cell)
        if not meta.get("grade_id") or cell.cell_type != "code":
            continue
        found = {out.get("ename", "error"): out.get("evalue", "") for out in cell.get("outputs", [])
                 if out.get("output_type") == "error"}
        if TAMPERED in found:
            errors[meta["grade_id"]] = f"{TAMPERED}: {found[TAMPERED]}"
        elif found:  # a cell cut by the time limit shows KeyboardInterrupt, then CellTimeoutError
            errors[meta["grade_id"]] = "CellTimeoutError" if "CellTimeoutError" in found else next(iter(found))
    return errors


def _read_grades(course: Path, assignment: str, student: str) -> tuple[float, float, dict[str, CellGrade]]:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        try:
            sub = gb.find_submission_notebook(assignment, assignment, student)
        except MissingEntry:
            nb = gb.find_notebook(assignment, assignment)
            return 0.0, float(nb.max_score), {}
        cells = {g.name: CellGrade(g.name, float(g.score or 0.0), float(g.max_score)) for g in sub.grades}
        return float(sub.score or 0.0), float(sub.max_score), cells


def _max_score(course: Path, assignment: str) -> float:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return float(gb.find_notebook(assignment, assignment).max_score)


def _kill_tree(pid: int) -> None:
    """SIGKILL a process, everything it started (kernels run in their own session) and its group."""
    import psutil

    try:
        parent = psutil.Process(pid)
        procs = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    for proc in procs:
        for kill in (lambda p=proc: os.killpg(p.pid, signal.SIGKILL), proc.kill):
            try:
                kill()
            except (ProcessLookupError, PermissionError, psutil.Error):
                pass
    psutil.wait_procs(procs, timeout=10)


def _grade_in_subprocess(course: Path, assignment: str, student: str, timeout: int,
                         limit: float, limits: Limits) -> tuple[str, str]:
    """Autograde + feedback for one notebook in its own process group; (status, log tail).
    The process is the instructor's (nbgrader); the submission's code runs in its kernel's sandbox."""
    argv = [sys.executable, "-m", "hpcnb.course.grading", "_grade-one", str(course), assignment, student,
            "--timeout", str(timeout), "--limits", json.dumps(asdict(limits))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["TMPDIR"] = str(course / "tmp")  # the kernel's host-side files go when the course goes
    proc = subprocess.Popen(argv, cwd=course, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        out, _ = proc.communicate()
        return "timeout", f"{out or ''}\ngrading this notebook took longer than {limit:g} s: stopped"[-4000:]
    return ("graded" if proc.returncode == 0 else "error"), (out or "")[-4000:]


def _error_summary(log: str) -> str:
    """The most telling error line of a failed nbgrader run (not its generic 'see the traceback')."""
    found = [line.strip() for line in log.splitlines()
             if re.match(r"\s*[\w.]*(Error|Exception|Timeout)\w*: ", line) and "NbGraderException" not in line]
    if found:
        return found[-1][:300]
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _check_sandbox(*secret: Path) -> None:
    """A sandbox starts here, and none of the folders it shows holds ``secret`` ones."""
    try:
        sandbox.probe()
    except SandboxError as err:
        raise GradingError(f"cannot grade: {err}") from None
    for shown in sandbox.bind_sources():
        for path in secret:
            if shown.resolve() in (path.resolve(), *path.resolve().parents):
                raise GradingError(f"cannot grade: the sandbox shows {shown} (Python or hpcnb lives there), "
                                   f"which holds {path}: move the course or the submissions out of it")


def _grade_one(course: Path, assignment: str, student: str, timeout: int, limits: Limits) -> int:
    """The child process: nbgrader autograde (the kernel in a sandbox), then generate_feedback."""
    result = _run_converter("autograde", course, assignment, student, timeout=timeout, limits=limits)
    print(result.get("log", ""))
    if not result.get("success"):
        print(result.get("error", ""), file=sys.stderr)
        return 1
    feedback = _run_converter("feedback", course, assignment, student)
    print(feedback.get("log", ""))
    if not feedback.get("success"):
        print(feedback.get("error", ""), file=sys.stderr)
        return 1
    return 0


def autograde(
    submissions: Path,
    out: Path,
    *,
    solutions: Path = SOLUTIONS_DIR,
    timeout: int | None = None,
    notebook_timeout: float | None = None,
    notebooks: Iterable[str] | None = None,
    limits: Limits | None = None,
    quiet: bool = False,
) -> list[NotebookGrade]:
    """Grade ``submissions/<student>/<notebook>.ipynb`` against ``solutions/``; write into ``out``.

    ``out`` gets ``grades.csv`` (student, notebook, score, max_score, status, message: why a
    notebook was not graded), ``cells.csv`` (one
    row per graded cell, with the error a failing cell raised), ``feedback/<student>/<notebook>.html``,
    ``autograded/<student>/<notebook>.ipynb`` and ``gradebook.db``. ``timeout``: seconds per cell
    (a cell over it is interrupted and scores 0; default: :func:`default_timeout`); ``notebook_timeout``: seconds for one whole
    notebook (default: ``timeout`` x (code cells + 2) + 120), past which its grading process and
    kernel are killed and the notebook scores 0 (a loop that ignores KeyboardInterrupt).

    Each notebook's code runs in its own sandbox (:mod:`hpcnb.course.sandbox`) with ``limits`` (default:
    :class:`~hpcnb.course.sandbox.Limits`; CPU seconds per process, unless given: the notebook's time limit).
    """
    submissions, out = Path(submissions), Path(out)
    timeout = timeout or default_timeout()
    if not submissions.is_dir():
        raise GradingError(f"{submissions}: no such folder (expected SUBMISSIONS/<student>/<notebook>.ipynb)")
    sources = solution_notebooks(solutions)
    if notebooks is not None:
        wanted = set(notebooks)
        unknown = wanted - set(sources)
        if unknown:
            raise GradingError(f"no solution for {', '.join(sorted(unknown))} in {solutions}")
        sources = {k: v for k, v in sources.items() if k in wanted}
    if not sources:
        raise GradingError(f"no solution notebooks in {solutions}: nothing to grade against")
    _check_sandbox(solutions, submissions)
    students = _students(submissions)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    grades: list[NotebookGrade] = []
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hpcnb-autograde-") as tmp:
        course = Path(tmp)
        _build_source(course, sources)
        (course / "tmp").mkdir()
        for student_dir in students:
            student = student_dir.name
            for extra in [] if student_dir.is_symlink() else sorted(student_dir.glob("*.ipynb")):
                if extra.stem not in sources:
                    say(f"{student}: ignoring {extra.name} (no solution notebook of that name)")
            for stem, source in sources.items():
                try:
                    grade = _grade_submission(course, out, student_dir, stem, source, timeout,
                                              notebook_timeout, limits)
                except SubmissionError as err:
                    grade = _unreadable(course, out, student, stem, str(err))
                except Exception as err:  # noqa: BLE001 - one student's failure is one row, the rest are graded
                    grade = _unreadable(course, out, student, stem, f"{type(err).__name__}: {err}")
                grades.append(grade)
                say(_summary(grade))
        shutil.copyfile(course / "gradebook.db", out / "gradebook.db")
    _write_csv(out, grades)
    return grades


def _unreadable(course: Path, out: Path, student: str, stem: str, reason: str) -> NotebookGrade:
    """An "error" row for a submission that could not be graded at all, and the student's page."""
    grade = NotebookGrade(student, stem, 0.0, _max_score(course, stem), "error", message=reason)
    _write_failure_feedback(out, grade)
    return grade


def _write_failure_feedback(out: Path, grade: NotebookGrade) -> None:
    dest = out / "feedback" / grade.student / f"{grade.notebook}.html"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(_failure_feedback(grade))
    grade.feedback = dest


def _summary(grade: NotebookGrade) -> str:
    timed = f", timed out: {', '.join(grade.timed_out_cells)}" if grade.timed_out_cells else ""
    note = "" if grade.status == "graded" else f" [{grade.status}: {grade.message}]"
    return f"{grade.student} {grade.notebook}: {grade.score:g}/{grade.max_score:g}{timed}{note}"


def _grade_submission(course: Path, out: Path, student_dir: Path, stem: str, source: Path, timeout: int,
                      notebook_timeout: float | None, limits: Limits | None) -> NotebookGrade:
    """Grade one student's notebook (read safely: :func:`~hpcnb.course.submissions.read_submission`)."""
    student = student_dir.name
    data = read_submission(student_dir, f"{stem}.ipynb")
    if data is None:
        return NotebookGrade(student, stem, 0.0, _max_score(course, stem), "missing",
                             message=f"no {stem}.ipynb submitted")
    target = course / "submitted" / student / stem
    target.mkdir(parents=True, exist_ok=True)
    (target / f"{stem}.ipynb").write_bytes(data)
    limit = notebook_timeout or timeout * (_code_cells(source) + 2) + 120
    used = limits or Limits()
    if used.cpu_seconds is None:
        used = replace(used, cpu_seconds=math.ceil(limit))
    status, log = _grade_in_subprocess(course, stem, student, timeout, limit, used)
    score, max_score, cells = _read_grades(course, stem, student)
    autograded = course / "autograded" / student / stem / f"{stem}.ipynb"
    for name, ename in _cell_errors(autograded).items():
        if name in cells:
            cells[name].error = ename
    grade = NotebookGrade(student, stem, score, max_score, status, cells)
    if status == "error" and ("Timeout waiting for" in log or "CellTimeoutError" in log):
        grade.status = status = "timeout"  # nbclient gave up on a kernel that ignored the interrupt
        grade.message = (f"a cell ran past the {timeout} s limit and ignored the interrupt "
                         "(KeyboardInterrupt caught?): the notebook could not be graded")
    elif status != "graded":
        grade.message = _error_summary(log) or status
    if status != "graded":
        grade.score = 0.0
        for cell in grade.cells.values():
            cell.score = 0.0
    tampered = [c.error.partition(": ")[2] for c in grade.cells.values() if c.error.startswith(TAMPERED)]
    if status == "graded" and tampered:  # its tests ran on tampered machinery: nbgrader scored them 0
        grade.status, grade.message = "tampered", tampered[0]
    feedback = course / "feedback" / student / stem / f"{stem}.html"
    if status == "graded" and feedback.exists():  # a tampered notebook's shows why too
        dest = out / "feedback" / student / f"{stem}.html"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(feedback, dest)
        grade.feedback = dest
    else:  # the student hears why too
        _write_failure_feedback(out, grade)
    if autograded.exists():
        dest = out / "autograded" / student / f"{stem}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(autograded, dest)
    return grade


def _failure_feedback(grade: NotebookGrade) -> str:
    """A feedback page for a notebook that could not be graded (nbgrader writes none)."""
    from html import escape

    title = escape(f"{grade.notebook}: {grade.score:g} / {grade.max_score:g}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title></head><body>\n"
            f"<h1>{title}</h1>\n<p>Your notebook could not be graded ({escape(grade.status)}):</p>\n"
            f"<pre>{escape(grade.message)}</pre>\n</body></html>\n")


def _write_csv(out: Path, grades: list[NotebookGrade]) -> None:
    with open(out / "grades.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", "notebook", "score", "max_score", "status", "message"])
        for g in grades:
            writer.writerow([g.student, g.notebook, f"{g.score:g}", f"{g.max_score:g}", g.status, g.message])
    with open(out / "cells.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", "notebook", "cell", "score", "max_score", "error"])
        for g in grades:
            for c in g.cells.values():
                writer.writerow([g.student, g.notebook, c.name, f"{c.score:g}", f"{c.max_score:g}", c.error])


# ------------------------------------------------------------------ wrong answers (tests)

def _wrong_code(code: str) -> str:
    """Code that defines the same names as ``code`` with wrong values (None), keeping imports."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return "pass"
    lines: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lines.append(ast.unparse(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines.append(f"def {node.name}(*args, **kwargs):\n    return None")
        elif isinstance(node, ast.ClassDef):
            lines.append(f"class {node.name}:\n    pass")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        lines.append(f"{name.id} = None")
        elif isinstance(node, ast.Return):
            lines.append("return None")
    return "\n".join(lines) or "pass"


def plant_wrong_answer(nb: Any, cell_index: int) -> Any:
    """A copy of solution notebook ``nb`` whose answer in cell ``cell_index`` is wrong but runs:
    every name it defines is None (functions return None); the markers stay, as in a submission."""
    import copy

    nb = copy.deepcopy(nb)
    cell = nb.cells[cell_index]
    source = cell.source
    if "BEGIN SOLUTION" not in source:
        cell.source = _wrong_code(source)
        return nb
    out, region, indent = [], None, ""
    for line in source.splitlines():
        if "BEGIN SOLUTION" in line:
            region, indent = [], line[: len(line) - len(line.lstrip())]
        elif "END SOLUTION" in line and region is not None:
            out += [indent + wrong if wrong else wrong for wrong in _wrong_code("\n".join(region)).splitlines()]
            region = None
        elif region is not None:
            region.append(line)
        else:
            out.append(line)
    cell.source = "\n".join(out)
    return nb


# -------------------------------------------------------------------------------- CLI

def _limits_json(text: str) -> Limits:
    return Limits.from_dict(json.loads(text))


def _limit(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` of a sandbox limit (VALUE: an integer, or with K, M, G for bytes)."""
    name, _, value = text.partition("=")
    names = [f.name for f in fields(Limits)]
    if name not in names or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {', '.join(names)}: {text!r}")
    if not re.fullmatch(r"\d+[KMGkmg]?", value):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return name, sizes.parse_bytes(value)


_VERBS_HELP = """\
a class, in order: generate and check (exercises/ from solutions/), release (the students' kit),
collect (each portal user's exercises/ into SUBMISSIONS/<user>/), autograde (grades, feedback),
return (the feedback into each user's home). Exit codes: 0 done, 1 check found problems or
collect/return failed for a user (the others are done), 2 usage or bad input."""


def build_parser(prog: str = "python -m hpcnb.course.grading") -> argparse.ArgumentParser:
    """The instructor's verbs (the internal per-notebook entry, ``_grade-one``, is not among them)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0], epilog=_VERBS_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB")

    def verb(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary)

    gen = verb("generate", "write exercises/ (student versions) from solutions/")
    chk = verb("check", "exit 1 unless exercises/ is up to date and holds no solution text (work/ folders aside)")
    for p in (gen, chk):
        p.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR)
        p.add_argument("--exercises", type=Path, default=EXERCISES_DIR)
    bundle = verb("release", "write the students' kit from the committed course: no solutions/ or tests")
    bundle.add_argument("out", type=Path, help="a new folder, or a file name ending in .tar.gz")
    bundle.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR)
    users_help = "a count N (student1 .. studentN) or names, as PORTAL_USERS (default: $PORTAL_USERS, else 3)"
    take = verb("collect", "copy each portal user's ~/COURSE/exercises/*.ipynb into SUBMISSIONS/<user>/")
    take.add_argument("submissions", type=Path, help="where to put them (SUBMISSIONS/<user>/<notebook>.ipynb)")
    back = verb("return", "copy FEEDBACK/<user>/*.html into each user's ~/COURSE/feedback/ (theirs, 0600)")
    back.add_argument("feedback", type=Path, help="autograde's feedback folder (grades/feedback)")
    for p in (take, back):
        p.add_argument("--users", default=os.environ.get("PORTAL_USERS", "3"), help=users_help)
        p.add_argument("--course-dir", default="hpcnb-course", metavar="COURSE",
                       help="each user's course folder in their home (default hpcnb-course)")
    grade = verb("autograde", "grade SUBMISSIONS/<student>/<notebook>.ipynb: grades.csv, cells.csv, feedback")
    grade.add_argument("submissions", type=Path)
    grade.add_argument("--out", type=Path, default=Path("grades"))
    grade.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR)
    grade.add_argument("--timeout", type=int, default=None,
                       help=f"seconds per cell (default {DEFAULT_TIMEOUT} on the local Slurm, "
                            f"{REAL_SLURM_TIMEOUT} on a real one)")
    grade.add_argument("--notebook-timeout", type=float, default=None,
                       help="seconds for one whole notebook (default: timeout x (code cells + 2) + 120)")
    grade.add_argument("--notebook", action="append", dest="notebooks", metavar="NAME",
                       help="grade only this notebook, e.g. 03-first-batch-job-exercises (repeatable; "
                            "default: every solution notebook)")
    grade.add_argument("--limit", action="append", type=_limit, default=[], metavar="NAME=VALUE",
                       help="a limit of each submission's sandbox, e.g. memory_bytes=4G, processes=256 "
                            "(repeatable; see hpcnb.course.sandbox.Limits)")
    return parser


def _grade_one_main(argv: list[str]) -> int:
    """The internal per-notebook grading process (``_grade-one``), started by :func:`autograde`."""
    one = argparse.ArgumentParser(prog="python -m hpcnb.course.grading _grade-one")
    one.add_argument("course", type=Path)
    one.add_argument("assignment")
    one.add_argument("student")
    one.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT)
    one.add_argument("--limits", type=_limits_json, default=Limits())
    args = one.parse_args(argv)
    return _grade_one(args.course, args.assignment, args.student, args.timeout, args.limits)


def main(argv: list[str] | None = None, prog: str = "python -m hpcnb.course.grading") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_grade-one"]:
        return _grade_one_main(argv[1:])
    args = build_parser(prog).parse_args(argv)
    try:
        if args.command == "generate":
            generate(args.solutions, args.exercises)
            return 0
        if args.command == "check":
            problems = check(args.solutions, args.exercises)
            if problems:
                print(f"{_show(args.exercises)} is not in order:", file=sys.stderr)
                for problem in problems:
                    print(f"  - {problem}", file=sys.stderr)
                print(f"Fix: {prog} generate (and commit exercises/)", file=sys.stderr)
                return 1
            count = len(solution_notebooks(args.solutions))
            print(f"{_show(args.exercises)}: {count} exercise notebook(s) up to date, no solution text in them")
            return 0
        if args.command == "release":
            release(args.out, solutions=args.solutions)
            return 0
        if args.command in ("collect", "return"):
            users = handout.portal_users(args.users)
            if args.command == "collect":
                outcome = handout.collect(users, args.submissions, course_dir=args.course_dir)
            else:
                outcome = handout.return_feedback(args.feedback, users, course_dir=args.course_dir)
            return 1 if outcome.failed else 0
        limits = replace(Limits(), **dict(args.limit)) if args.limit else None
        grades = autograde(args.submissions, args.out, solutions=args.solutions, timeout=args.timeout,
                           notebook_timeout=args.notebook_timeout, notebooks=args.notebooks, limits=limits)
        print(f"wrote {args.out / 'grades.csv'} ({len(grades)} row(s)), {args.out / 'cells.csv'}, "
              f"feedback in {args.out / 'feedback'}")
        return 0
    except (GradingError, handout.HandoutError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
