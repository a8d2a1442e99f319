"""The package's rooms (ARCHITECTURE.md): what lives at the top level, lesson helpers naming their
lessons, and the old module names that still import."""
from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hpcnb

PACKAGE = Path(hpcnb.__file__).parent
ROOT = PACKAGE.parent
# the job API (jobs.py and its errors and records), the linter, the command line, which Slurm; and one
# old name kept as a module
TOP_LEVEL = {"__init__", "backend", "cli", "jobs", "job_errors", "job_records", "jobscript", "lint", "poller",
             "widgets", "slurm_options"}
ROOMS = {"slurm", "localslurm", "sites", "lessons", "course", "scripts"}


def test_top_level_holds_only_the_job_api_and_the_rooms():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert modules == TOP_LEVEL
    assert folders == ROOMS


@pytest.mark.parametrize("path", sorted((PACKAGE / "lessons").glob("*.py")), ids=lambda p: p.stem)
def test_every_lesson_helper_names_its_lessons(path):
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert re.search(r"\b[Ll]essons? \d+", doc) or "every lesson" in doc, path.name


@pytest.mark.parametrize("old", sorted(hpcnb.MOVED))
def test_old_module_names_import_the_moved_module(old):
    code = (f"import hpcnb.{old} as a, {hpcnb.MOVED[old]} as b\n"
            f"from hpcnb import {old} as c\n"
            "assert a is b is c, (a, b, c)\n"
            f"assert a.__name__ == a.__spec__.name == {hpcnb.MOVED[old]!r}, a.__spec__\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("old", ["kernel", "grading"])
def test_old_module_names_still_run_with_dash_m(old):
    """A kernelspec written before the move says ``python -m hpcnb.kernel``: every notebook's kernel
    died ("'_OldNames' object has no attribute 'get_code'") until the old names could run."""
    new = subprocess.run([sys.executable, "-m", hpcnb.MOVED[old], "--help"], capture_output=True, text=True,
                         timeout=120)
    got = subprocess.run([sys.executable, "-m", f"hpcnb.{old}", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0 and got.stdout.splitlines()[:1] == new.stdout.splitlines()[:1], got.stderr[-2000:]


def test_an_unknown_module_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("hpcnb.no_such_module")
    with pytest.raises(AttributeError):
        hpcnb.no_such_module  # noqa: B018


def test_the_readme_is_a_door_one_screen_with_the_two_commands_first():
    """A newcomer's first screen (issue 41): the two commands, what the course is, where to go next;
    the reference lives in docs/, each page linked from the README."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 60, "README.md: keep it to one screen; move reference to docs/"
    first_block = readme.split("```")[1]
    assert "make lab" in first_block and "make test" in first_block
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"docs/{page.name} is not linked from README.md"


@pytest.mark.parametrize("document", ["README.md", "INSTRUCTORS.md", "ARCHITECTURE.md", "notebooks/README.md",
                                      *[f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))]])
def test_every_relative_link_of_the_documents_resolves(document):
    path = ROOT / document
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
    broken = [t for t in targets if not re.match(r"^[a-z]+:", t) and not (path.parent / t).exists()]
    assert not broken, f"{document}: links to nothing: {broken}"
