"""Issue 38: the graded tests run in a test kernel the notebook's code cannot steer.

One small assignment (a setup cell, three answers, three tests) graded for real (nbgrader,
bubblewrap): the solution, and wrong answers behind tricks that made a test kernel of the
student's own pass them (hpcnb.course.testkernel).
"""
from __future__ import annotations

import csv
import datetime
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell
from test_grading_sandbox import LIMITS, TIMEOUT, _cell

from hpcnb.course import testkernel
from hpcnb.course.grading import autograde

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

NAME = "00-isolation"
# the snapshot kept, asserts that name a variable dropped, the snapshot given back to the grader
BYPASS = """
import ast
import hpcnb.course.tamper as tamper
from IPython import get_ipython
saved = tamper.kernel_state()
class DropAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        named = any(isinstance(n, ast.Name) for n in ast.walk(node.test))
        return ast.Pass() if named else node
get_ipython().ast_transformers.append(DropAsserts())
tamper.kernel_state = lambda: saved
"""
ALLCLOSE = "import numpy\nnumpy.allclose = lambda *a, **k: True"
# what the notebook's code would need to steer the test kernel: its memory, descriptors, environment
REACH = """
import glob, os
found = [p.split('/')[2] for p in glob.glob('/proc/[0-9]*/cmdline') if b'hpcnb.course.testkernel' in open(p, 'rb').read()]
reached = []
for pid in found:
    for what, attempt in {"mem": lambda: open(f'/proc/{pid}/mem', 'rb').close(), "fd": lambda: os.listdir(f'/proc/{pid}/fd'),
                          "environ": lambda: open(f'/proc/{pid}/environ', 'rb').read(),
                          "root": lambda: os.listdir(f'/proc/{pid}/root/')}.items():
        try:
            attempt()
            reached.append(what)
        except OSError:
            pass
print("TEST KERNELS:", len(found), "REACHED:", reached)
"""


def assignment() -> nbformat.NotebookNode:
    """``answer`` 42, ``values`` close to [0.5, 2.0], ``twice(f, x)`` = f(f(x)) (a callback of the test's)."""
    return nbformat.v4.new_notebook(cells=[
        new_code_cell("import numpy\nfrom pathlib import Path\nHERE = Path.cwd()"),
        _cell("code", "### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION", "answer", solution=True),
        _cell("code", "assert answer == 42, f'0.1: not {answer}'", "test_answer", points=1),
        _cell("code", "### BEGIN SOLUTION\nvalues = numpy.array([0.5, 2.0])\n### END SOLUTION", "values",
              solution=True),
        _cell("code", "assert numpy.allclose(values, [0.5, 2.0]), f'0.2: not {values}'\n"
                      "assert Path.cwd() == HERE", "test_values", points=1),
        _cell("code", "### BEGIN SOLUTION\ndef twice(f, x):\n    if x < 0:\n        raise ValueError('negative')\n"
                      "    return f(f(x))\n### END SOLUTION", "twice", solution=True),
        _cell("code", "seen = []\ndef step(v):\n    seen.append(v)\n    return v + 1\n"
                      "assert twice(step, 1) == 3 and seen == [1, 2], f'0.3: {seen}'\n"
                      "try:\n    twice(step, -1)\nexcept ValueError:\n    pass\nelse:\n"
                      "    raise AssertionError('0.3: a negative x raises ValueError')", "test_twice", points=1),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def wrong(*tricks: str) -> nbformat.NotebookNode:
    """Wrong answers, after the tricks."""
    nb = assignment()
    nb.cells[1].source = "answer = 41"
    nb.cells[3].source = "values = numpy.array([0.0, 0.0])"
    nb.cells[5].source = "def twice(f, x):\n    return 3"
    for at, trick in enumerate(tricks):
        nb.cells.insert(1 + at, new_code_cell(trick))
    return nb


def stuck() -> nbformat.NotebookNode:
    """The right answers, but ``twice`` never returns."""
    nb = assignment()
    nb.cells[5].source = "def twice(f, x):\n    import time\n    time.sleep(3600)"
    return nb


def test_names_used_reach_into_functions() -> None:
    source = "def check(x):\n    return helper(x) + y\nassert check(answer) == (lambda: z)()"
    assert testkernel.names_used(source) == ["answer", "check", "helper", "x", "y", "z"]


def test_values_come_by_value_and_the_rest_as_references() -> None:
    import numpy

    handles: list[object] = []
    sent = {"n": [1, 2.5, "s", None], "path": Path("/a"), "array": numpy.arange(3.0), "f": testkernel.names_used,
            "g": lambda: 1, "when": datetime.datetime(2026, 12, 7, 2, 30, tzinfo=datetime.timezone.utc)}
    back = testkernel.decode(testkernel._load_plain(__import__("pickle").dumps(testkernel.encode(sent, handles))),
                             None if not handles else _NoLink())
    assert back["n"] == [1, 2.5, "s", None] and back["path"] == Path("/a") and back["when"] == sent["when"]
    assert numpy.array_equal(back["array"], numpy.arange(3.0)) and back["f"] is testkernel.names_used
    assert isinstance(back["g"], testkernel.Proxy) and handles == [sent["g"]]


def test_the_test_kernel_accepts_no_class_of_the_notebooks() -> None:
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("owned",))

    with pytest.raises(pickle.UnpicklingError):
        testkernel._load_plain(pickle.dumps(Evil()))
    for module, name in [("builtins", "eval"), ("os", "system"), ("torch", "load"), ("evil", "x")]:
        with pytest.raises(testkernel.NotebookKernelError):
            testkernel.decode(["import", module, name], None)
    with pytest.raises(testkernel.NotebookKernelError):  # only dataclasses of the course's, by value
        testkernel.decode(["dataclass", "subprocess", "Popen", []], None)


class _NoLink:
    callbacks: list[object] = []


class Swallow:
    """A context manager of the notebook's that would swallow any exception (a failed assert)."""

    def __enter__(self):
        return "in"

    def __exit__(self, *exc):
        return True


class Equal:
    """An answer of the notebook's that says it equals anything."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


def _conversation(namespace: dict) -> testkernel.Link:
    """T's end of a real conversation with S's side, run in a thread on a socket pair."""
    import socket
    import threading

    ours, theirs = socket.socketpair()
    threading.Thread(target=testkernel._Conversation(theirs, namespace).run, daemon=True).start()
    ours.settimeout(30)
    return testkernel.Link(ours)


def test_calls_run_in_the_notebooks_kernel_and_asserts_stay_the_tests() -> None:
    def twice(f, x):
        if x < 0:
            raise ValueError("negative")
        return f(f(x))

    link = _conversation({"twice": twice, "guard": Swallow(), "table": {"a": [1, 2]}, "n": 3, "equal": Equal()})
    names = link.request(["get", ["twice", "guard", "table", "n", "equal", "absent"]])["names"]
    assert set(names) == {"twice", "guard", "table", "n", "equal"} and names["table"] == {"a": [1, 2]}
    seen = []
    assert names["twice"](lambda v: seen.append(v) or v + 1, 1) == 3 and seen == [1, 2]  # a callback, run here
    with pytest.raises(ValueError, match="negative"):
        names["twice"](abs, -1)
    with pytest.raises(AssertionError), names["guard"] as inside:  # S's __exit__ says True: ignored
        assert inside == "in"
        assert False, "the test's own assert"
    assert names["equal"] != 42 and not names["equal"] == 42  # S's __eq__ is never asked


@pytest.mark.slow
def test_tricks_in_the_notebook_no_longer_pass_wrong_answers(tmp_path: Path) -> None:
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    nbformat.write(assignment(), solutions / f"{NAME}.ipynb")
    subs = tmp_path / "subs"
    for student, nb in {"right": assignment(), "wrong": wrong(), "bypass": wrong(BYPASS),
                        "allclose": wrong(ALLCLOSE), "both": wrong(ALLCLOSE, BYPASS), "stuck": stuck(),
                        "reach": wrong(REACH)}.items():
        (subs / student).mkdir(parents=True)
        nbformat.write(nb, subs / student / f"{NAME}.ipynb")

    out = tmp_path / "grades"
    grades = autograde(subs, out, solutions=solutions, timeout=TIMEOUT, limits=LIMITS, quiet=True)
    by = {g.student: g for g in grades}
    scores = {s: {c.name: c.score for c in g.cells.values()} for s, g in by.items()}
    assert scores["right"] == {"test_answer": 1, "test_values": 1, "test_twice": 1}, by["right"].message
    for student in ("wrong", "bypass", "allclose", "both", "reach"):
        assert scores[student] == {"test_answer": 0, "test_values": 0, "test_twice": 0}, (student, by[student].message)
    assert scores["stuck"] == {"test_answer": 1, "test_values": 1, "test_twice": 0}, by["stuck"].message
    cells = {(r["student"], r["cell"]): r["error"] for r in csv.DictReader(open(out / "cells.csv"))}
    assert cells[("bypass", "test_answer")] == cells[("allclose", "test_values")] == "AssertionError"
    assert cells[("stuck", "test_twice")] == "CellTimeoutError"
    feedback = (out / "feedback" / "stuck" / f"{NAME}.html").read_text()
    assert "did not answer within" in feedback
    assert "TEST KERNELS: 1 REACHED: []" in (out / "feedback" / "reach" / f"{NAME}.html").read_text()
