"""Autograding (``hpcnb grading autograde``): each student's notebooks against the solutions.

Each solution notebook is one nbgrader assignment of one notebook; each student's notebook is graded
in its own process (``nbgrader autograde``: submitted test cells are replaced by the source's, deleted
ones are added back, hidden tests come back; every cell runs under ``ExecutePreprocessor.timeout``),
then ``grades.csv``, ``cells.csv``, feedback HTML (``nbgrader generate_feedback``) per student, the
autograded notebooks and the gradebook are written. nbgrader runs as the instructor; the student's
code runs only in the kernel, which nbgrader's Execute (:class:`hpcnb.course.sandbox_jupyter.SandboxedExecute`)
starts in a bubblewrap sandbox of its own.
"""
from __future__ import annotations

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
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from hpcnb.course import outputs, sandbox
from hpcnb.course.nbgrader_io import (
    ROOT,
    SOLUTIONS_DIR,
    GradingError,
    _build_source,
    _nbgrader_meta,
    _read,
    _run_converter,
    solution_notebooks,
)
from hpcnb.course.sandbox import Limits, SandboxError
from hpcnb.course.submissions import SubmissionError, read_submission, shown_name
from hpcnb.course.tamper import TAMPERED

DEFAULT_TIMEOUT = 60  # seconds per cell when autograding, on the local Slurm
REAL_SLURM_TIMEOUT = 600  # on a real one: a TIMEOUT takes 60-90 s there, a requeue hold 120 s
MESSAGE_CHARS = 300  # a failing cell's message in cells.csv, at most

__all__ = ["DEFAULT_TIMEOUT", "REAL_SLURM_TIMEOUT", "CellGrade", "NotebookGrade", "autograde", "default_timeout"]


@dataclass
class CellGrade:
    """One graded cell of one submission."""

    name: str
    score: float
    max_score: float
    error: str = ""  # the error's name when the cell failed (AssertionError, CellTimeoutError ...)
    message: str = ""  # its message (the assert's), on one line, at most MESSAGE_CHARS


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


def _students(submissions: Path, say: Callable[[str], None]) -> list[Path]:
    """The student folders of ``submissions`` (any name); a folder starting with '.' or '_' is said and left."""
    found = []
    for path in sorted(submissions.iterdir()):
        if path.name.startswith((".", "_")):
            say(f"ignoring {shown_name(path.name)}/ (a name starting with '.' or '_' is not a student's)")
        elif path.is_dir():
            found.append(path)
    return found


def _code_cells(path: Path) -> int:
    return sum(1 for c in _read(path).cells if c.cell_type == "code")


def _one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters (an ellipsis says it was cut)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _cell_errors(autograded: Path) -> dict[str, tuple[str, str]]:
    """grade_id -> (name, message) of the error a graded cell raised, from an autograded notebook."""
    errors: dict[str, tuple[str, str]] = {}
    if not autograded.exists():
        return errors
    for cell in _read(autograded).cells:
        meta = _nbgrader_meta(cell)
        if not meta.get("grade_id") or cell.cell_type != "code":
            continue
        found = {out.get("ename", "error"): out.get("evalue", "") for out in cell.get("outputs", [])
                 if out.get("output_type") == "error"}
        if TAMPERED in found:
            errors[meta["grade_id"]] = (f"{TAMPERED}: {found[TAMPERED]}", _one_line(found[TAMPERED]))
        elif found:  # a cell cut by the time limit shows KeyboardInterrupt, then CellTimeoutError
            name = "CellTimeoutError" if "CellTimeoutError" in found else next(iter(found))
            errors[meta["grade_id"]] = (name, _one_line(found[name]))
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
    argv = [sys.executable, "-m", "hpcnb.course.grading", "_grade-one", "--timeout", str(timeout),
            "--limits", json.dumps(asdict(limits)), "--", str(course), assignment, student]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["TMPDIR"] = str(course / "tmp")  # the kernel's host-side files go when the course goes
    proc = subprocess.Popen(argv, cwd=course, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    outputs.bound_grader_memory(proc.pid)  # whatever the kernel sends
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


def _check_out(out: Path) -> None:
    """--out as collect's SUBMISSIONS: made (0700) when missing, else the caller's and writable by no
    one else (never a link), so that nothing in it was prepared by another user."""
    from hpcnb.course.handout import HandoutError, own_folder

    try:
        os.close(own_folder(out))
    except HandoutError as err:
        raise GradingError(str(err)) from None


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
    notebook was not graded), ``cells.csv`` (one row per graded cell, with the error a failing cell
    raised and its message), both merged into an earlier run's (the rows of each (student, notebook)
    graded now replace that pair's, the others stay), ``feedback/<student>/<notebook>.html``,
    ``autograded/<student>/<notebook>.ipynb`` and ``gradebook.db`` (this run's). ``timeout``: seconds per cell
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
    every_source = solution_notebooks(solutions)
    sources = every_source
    if notebooks is not None:
        wanted = set(notebooks)
        unknown = wanted - set(sources)
        if unknown:
            raise GradingError(f"no solution for {', '.join(sorted(unknown))} in {solutions}")
        sources = {k: v for k, v in sources.items() if k in wanted}
    if not sources:
        raise GradingError(f"no solution notebooks in {solutions}: nothing to grade against")
    _check_out(out)
    _check_sandbox(solutions, submissions)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    students = _students(submissions, say)
    grades: list[NotebookGrade] = []
    with tempfile.TemporaryDirectory(prefix="hpcnb-autograde-") as tmp:
        course = Path(tmp)
        _build_source(course, sources)
        (course / "tmp").mkdir()
        for index, student_dir in enumerate(students):
            student = student_dir.name
            for extra in [] if student_dir.is_symlink() else sorted(student_dir.glob("*.ipynb")):
                if extra.stem not in every_source:
                    say(f"{shown_name(student)}: ignoring {shown_name(extra.name)} (no solution notebook of that name)")
            for stem, source in sources.items():
                try:  # nbgrader knows the student by an id of ours: any folder name is graded
                    grade = _grade_submission(course, out, student_dir, f"student{index:05d}", stem, source,
                                              timeout, notebook_timeout, limits)
                except SubmissionError as err:
                    grade = _unreadable(course, out, student, stem, str(err))
                except Exception as err:  # noqa: BLE001 - one student's failure is one row, the rest are graded
                    grade = _unreadable(course, out, student, stem, f"{type(err).__name__}: {err}")
                grades.append(grade)
                say(_summary(grade))
        shutil.copyfile(course / "gradebook.db", out / "gradebook.db")
    _merge_csv(out, grades)
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
    return f"{shown_name(grade.student)} {grade.notebook}: {grade.score:g}/{grade.max_score:g}{timed}{note}"


def _grade_submission(course: Path, out: Path, student_dir: Path, key: str, stem: str, source: Path,
                      timeout: int, notebook_timeout: float | None, limits: Limits | None) -> NotebookGrade:
    """Grade one student's notebook (read safely: :func:`~hpcnb.course.submissions.read_submission`);
    ``key``: the student's id in nbgrader's course."""
    student = student_dir.name
    data = read_submission(student_dir, f"{stem}.ipynb")
    if data is None:
        return NotebookGrade(student, stem, 0.0, _max_score(course, stem), "missing",
                             message=f"no {stem}.ipynb submitted")
    target = course / "submitted" / key / stem
    target.mkdir(parents=True, exist_ok=True)
    (target / f"{stem}.ipynb").write_bytes(data)
    limit = notebook_timeout or timeout * (_code_cells(source) + 2) + 120
    used = limits or Limits()
    if used.cpu_seconds is None:
        used = replace(used, cpu_seconds=math.ceil(limit))
    status, log = _grade_in_subprocess(course, stem, key, timeout, limit, used)
    score, max_score, cells = _read_grades(course, stem, key)
    autograded = course / "autograded" / key / stem / f"{stem}.ipynb"
    for name, (ename, message) in _cell_errors(autograded).items():
        if name in cells:
            cells[name].error, cells[name].message = ename, message
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
    feedback = course / "feedback" / key / stem / f"{stem}.html"
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


GRADES_COLUMNS = ["student", "notebook", "score", "max_score", "status", "message"]
CELLS_COLUMNS = ["student", "notebook", "cell", "score", "max_score", "error", "message"]


def _merge_csv(out: Path, grades: list[NotebookGrade]) -> None:
    """grades.csv and cells.csv: this run's rows, and an earlier run's rows of every other
    (student, notebook) (a regraded notebook's rows replace its old ones)."""
    graded = {(g.student, g.notebook) for g in grades}
    notebooks = [{"student": g.student, "notebook": g.notebook, "score": f"{g.score:g}",
                  "max_score": f"{g.max_score:g}", "status": g.status, "message": g.message} for g in grades]
    cells = [{"student": g.student, "notebook": g.notebook, "cell": c.name, "score": f"{c.score:g}",
              "max_score": f"{c.max_score:g}", "error": c.error, "message": c.message}
             for g in grades for c in g.cells.values()]
    _merge_rows(out / "grades.csv", GRADES_COLUMNS, notebooks, graded)
    _merge_rows(out / "cells.csv", CELLS_COLUMNS, cells, graded)


def _merge_rows(path: Path, columns: list[str], rows: list[dict[str, str]], replaced: set[tuple[str, str]]) -> None:
    """Write ``rows`` and ``path``'s earlier rows whose (student, notebook) is not in ``replaced``, by
    student and notebook (written aside, then renamed: an interrupted run leaves the old file)."""
    kept: list[dict[str, str]] = []
    if path.exists():
        with open(path, newline="") as fh:
            kept = [row for row in csv.DictReader(fh) if (row.get("student"), row.get("notebook")) not in replaced]
    merged = sorted(kept + rows, key=lambda row: (row.get("student") or "", row.get("notebook") or ""))
    aside = path.with_name(f".{path.name}.new")
    with open(aside, "w", newline="") as fh:
        writer = csv.DictWriter(fh, columns, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(merged)
    os.replace(aside, path)
