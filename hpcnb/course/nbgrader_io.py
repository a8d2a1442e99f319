"""nbgrader's plumbing for the course: its folders, the solution notebooks, and nbgrader's
converters (generate_assignment, autograde, generate_feedback) run in a throw-away course directory.
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hpcnb.course.sandbox import Limits

ROOT = Path(__file__).resolve().parents[2]
# The course checkout's folders (an editable install); from a plain install: the current folder's.
_BASE = ROOT if (ROOT / "solutions").is_dir() else Path.cwd()
SOLUTIONS_DIR = _BASE / "solutions"
EXERCISES_DIR = _BASE / "exercises"
FEEDBACK_TEMPLATES = Path(__file__).resolve().parent / "feedback"  # hpcnb-feedback/: the students' page

__all__ = ["EXERCISES_DIR", "ROOT", "SOLUTIONS_DIR", "GradingError", "solution_notebooks"]


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

        from hpcnb.course.sandbox_jupyter import SandboxedExecute

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
    c.HTMLExporter.template_name = "hpcnb-feedback"  # nbgrader's, naming the exercises: feedback/
    c.HTMLExporter.template_file = "hpcnb-feedback.html.j2"
    c.HTMLExporter.extra_template_basedirs = [str(FEEDBACK_TEMPLATES), _nbgrader_templates()]
    return c


def _nbgrader_templates() -> str:
    """nbgrader's own templates folder (its feedback template, which the course's extends)."""
    import nbgrader

    return str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")


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
