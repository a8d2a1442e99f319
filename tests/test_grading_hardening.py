"""Issue 26, the grader: submissions that are not files, tampered test machinery, display floods.

One autograde run over several hostile students (one kernel each where a notebook is run).
"""
from __future__ import annotations

import csv
import html
import os
import shutil
from pathlib import Path

import nbformat
import pytest
from test_grading_sandbox import LIMITS, NAME, TIMEOUT, assignment, with_attack

from hpcnb.course.grading import autograde
from hpcnb.course.tamper import TAMPERED

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

SECRET = "ROOT-ONLY-S3CR3T"
NO_ASSERTS = """
import ast
class NoAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()
get_ipython().ast_transformers.append(NoAsserts())
"""
EMPTY_CELLS = "get_ipython().input_transformers_post.append(lambda lines: [])"
TRACE = "import sys\nsys.settrace(lambda *args: None)"
ASSERTION = "import builtins\nclass Quiet(Exception):\n    pass\nbuiltins.AssertionError = Quiet"
DISPLAY = """
from IPython.display import display
handles = [display('x', display_id=True) for _ in range(4)]
for _ in range(5):
    for handle in handles:
        handle.update('y' * (2 << 20))
"""


def wrong(code: str) -> nbformat.NotebookNode:
    """The attack, then wrong answers: only a tampered kernel could pass the tests."""
    nb = with_attack(code)
    nb.cells[1].source = "answer = 41"
    nb.cells[4].source = "second = 'no'"
    return nb


def _write(folder: Path, nb: nbformat.NotebookNode) -> None:
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{NAME}.ipynb")


def _not_files(subs: Path, solutions: Path, tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    _write(subs / "classmate", assignment())
    for student, target in {"link_secret": secret, "link_solution": solutions / f"{NAME}.ipynb",
                            "link_classmate": subs / "classmate" / f"{NAME}.ipynb",
                            "link_zero": Path("/dev/zero")}.items():
        (subs / student).mkdir()
        (subs / student / f"{NAME}.ipynb").symlink_to(target)
    (subs / "folder" / f"{NAME}.ipynb").mkdir(parents=True)
    (subs / "fifo").mkdir()
    os.mkfifo(subs / "fifo" / f"{NAME}.ipynb")
    (subs / "sparse").mkdir()
    with open(subs / "sparse" / f"{NAME}.ipynb", "wb") as fh:
        fh.truncate(1 << 30)
    (subs / "linked_folder").symlink_to(solutions)


@pytest.mark.slow
def test_hostile_submissions_are_each_graded_or_refused(tmp_path: Path) -> None:
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    nbformat.write(assignment(), solutions / f"{NAME}.ipynb")
    subs = tmp_path / "subs"
    _not_files(subs, solutions, tmp_path)
    for student, nb in {"no_asserts": wrong(NO_ASSERTS), "empty_cells": wrong(EMPTY_CELLS),
                        "trace": with_attack(TRACE), "assertion": wrong(ASSERTION),
                        "display": with_attack(DISPLAY)}.items():
        _write(subs / student, nb)

    out = tmp_path / "grades"
    grades = autograde(subs, out, solutions=solutions, timeout=TIMEOUT, limits=LIMITS, quiet=True)
    by = {g.student: g for g in grades}
    assert {s: (g.status, g.score) for s, g in by.items()} == {
        "classmate": ("graded", 3), "display": ("graded", 3),
        **{s: ("error", 0) for s in ("link_secret", "link_solution", "link_classmate", "link_zero", "folder",
                                     "fifo", "sparse", "linked_folder")},
        **{s: ("tampered", 0) for s in ("no_asserts", "empty_cells", "trace", "assertion")}}, \
        {s: g.message for s, g in by.items()}
    assert "is a symbolic link" in by["link_secret"].message and "is a FIFO" in by["fifo"].message
    assert "is a directory" in by["folder"].message and "larger than" in by["sparse"].message
    assert "linked_folder/ is a symbolic link" in by["linked_folder"].message
    assert "ast_transformers was changed" in by["no_asserts"].message
    assert "an assert that must fail passed" in by["empty_cells"].message
    assert "sys.settrace was changed" in by["trace"].message
    assert "AssertionError" in by["assertion"].message

    rows = {r["student"]: r for r in csv.DictReader(open(out / "grades.csv"))}
    assert rows["fifo"]["status"] == "error" and "is a FIFO" in rows["fifo"]["message"]
    cells = [r for r in csv.DictReader(open(out / "cells.csv")) if r["student"] == "no_asserts"]
    assert {r["cell"]: (r["score"], r["error"].split(":")[0]) for r in cells} == {
        "test_answer": ("0", TAMPERED), "test_second": ("0", TAMPERED)}
    feedback = {s: html.unescape((out / "feedback" / s / f"{NAME}.html").read_text()) for s in by}
    refused = [s for s, g in by.items() if g.status == "error"]
    assert not [s for s in refused if SECRET in feedback[s] or "answer = 42" in feedback[s]]
    assert TAMPERED in feedback["no_asserts"]
    assert "this cell printed more than 131072 bytes" in feedback["display"]
    assert (out / "autograded" / "display" / f"{NAME}.ipynb").stat().st_size < 4 << 20
