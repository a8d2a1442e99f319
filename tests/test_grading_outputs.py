"""Issue 38: a graded notebook's output is bounded per cell and per notebook, whatever it holds.

Four floods, each a student of one autograde run (bubblewrap, nbgrader): printed text, display
metadata, forged error messages, widget (comm) state. Each is graded in full, its autograded notebook
keeps at most the budget (:mod:`hpcnb.course.outputs`), and its feedback says where output was cut.
A few cells stand for the adversary's hundreds: the budget behaves the same.
"""
from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell
from test_grading_sandbox import LIMITS, NAME, TIMEOUT, assignment

from hpcnb.course import outputs
from hpcnb.course.grading import autograde

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

CHUNK = 200 << 10  # more than a cell keeps
FLOODS = {  # the cells of each student's flood (3 cells: the notebook's budget runs out in the third)
    "printed": ["print('x' * CHUNK)"] * 3,
    "metadata": ["from IPython.display import display\nfor _ in range(4):\n"
                 "    display('x', metadata={'junk': 'y' * (CHUNK // 4)})"] * 3,
    "errors": ["k = get_ipython().kernel\nfor _ in range(20):\n"
               "    k.session.send(k.iopub_socket, 'error', {'ename': 'Forged', 'evalue': 'v' * 5000,\n"
               "                   'traceback': ['t' * 5000] * 100}, parent=k.get_parent())"] * 3,
    "widgets": ["from comm import create_comm\n"
                "create_comm(target_name='jupyter.widget', data={'state': {'_model_name': 'Bare'}})\n"
                "for _ in range(3):\n"
                "    create_comm(target_name='jupyter.widget', data={'state': {\n"
                "        '_model_name': 'DOMWidgetModel', '_model_module': '@jupyter-widgets/base',\n"
                "        'junk': 'z' * (CHUNK // 4)}, 'buffer_paths': []})"] * 3,
}
FIRST_FLOOD = 3  # the flooding cells come after the first answer: cells 3, 4 ... counted from 1


def flooded(cells: list[str]) -> nbformat.NotebookNode:
    """The solution, with the flooding cells after its first answer."""
    nb = assignment()
    for source in reversed(cells):
        nb.cells.insert(FIRST_FLOOD - 1, new_code_cell(f"CHUNK = {CHUNK}\n{source}"))
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[object, nbformat.NotebookNode, str]]:
    """{student: (grade, autograded notebook, feedback text)}: one autograde run over the floods."""
    tmp = tmp_path_factory.mktemp("outputs")
    (tmp / "solutions").mkdir()
    nbformat.write(assignment(), tmp / "solutions" / f"{NAME}.ipynb")
    for student, cells in FLOODS.items():
        (tmp / "subs" / student).mkdir(parents=True)
        nbformat.write(flooded(cells), tmp / "subs" / student / f"{NAME}.ipynb")
    out = tmp / "grades"
    grades = autograde(tmp / "subs", out, solutions=tmp / "solutions", timeout=TIMEOUT, limits=LIMITS, quiet=True)
    found = {}
    for grade in grades:
        autograded = out / "autograded" / grade.student / f"{NAME}.ipynb"
        feedback = out / "feedback" / grade.student / f"{NAME}.html"
        nb = nbformat.read(autograded, as_version=4) if autograded.exists() else None
        found[grade.student] = (grade, nb, html.unescape(feedback.read_text()))
    return found


def _kept(nb: nbformat.NotebookNode) -> int:
    """Bytes of output the notebook holds, widget state included, the grader's notes left out."""
    notes = [o for c in nb.cells for o in c.get("outputs", []) if "[hpcnb grader:" in o.get("text", "")]
    every = sum(outputs.size_of(o) for c in nb.cells for o in c.get("outputs", []))
    return every - sum(outputs.size_of(o) for o in notes) + outputs.size_of(nb.metadata.get("widgets", {}))


def _check_bounded(graded: dict, student: str, extra: int = 0) -> tuple[nbformat.NotebookNode, str]:
    """Graded in full, the output within the notebook's budget (and ``extra``), the cut told."""
    grade, nb, feedback = graded[student]
    assert (grade.status, grade.score) == ("graded", 3), (grade.status, grade.message)
    assert _kept(nb) <= outputs.NOTEBOOK_BYTES + extra, _kept(nb)
    assert f"this notebook's output passed {outputs.NOTEBOOK_BYTES} bytes" in feedback
    assert f"the output of cell(s) {FIRST_FLOOD}-" in feedback  # the summary at the end: where
    return nb, feedback


@pytest.mark.slow
@needs_bwrap
def test_printed_text_is_bounded_per_cell_and_per_notebook(graded: dict) -> None:
    nb, feedback = _check_bounded(graded, "printed")
    assert f"this cell printed more than {outputs.CELL_BYTES} bytes" in feedback
    kept = [sum(outputs.size_of(o) for o in c.outputs) for c in nb.cells[FIRST_FLOOD - 1:FIRST_FLOOD + 2]]
    assert kept[0] <= outputs.CELL_BYTES + 200 and kept[2] < 1000, kept  # the last cell: a note only


@pytest.mark.slow
@needs_bwrap
def test_display_metadata_counts(graded: dict) -> None:
    _check_bounded(graded, "metadata")


@pytest.mark.slow
@needs_bwrap
def test_forged_errors_count_one_kept_per_cell_past_the_budget(graded: dict) -> None:
    nb, _ = _check_bounded(graded, "errors", extra=3 * 1000)  # past it: one short error a cell
    for cell in nb.cells[FIRST_FLOOD - 1:FIRST_FLOOD + 2]:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert errors and all(o.ename == "Forged" for o in errors)
        assert len(errors[-1].evalue) <= outputs.SHORT_ERROR


@pytest.mark.slow
@needs_bwrap
def test_widget_state_counts_and_a_bare_widget_is_graded(graded: dict) -> None:
    nb, feedback = _check_bounded(graded, "widgets")
    assert "the rest of its widget state was dropped" in feedback or "rest of this cell's widget state" in feedback
    states = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert any(s["model_module"] is None for s in states.values())  # the bare widget, kept
    assert len(json.dumps(states)) <= outputs.NOTEBOOK_BYTES


def test_budget_notes_once_per_cell_and_once_for_the_notebook() -> None:
    budget = outputs.OutputBudget(cell_bytes=100, notebook_bytes=150)
    assert budget.spend(0, 60) and not budget.spend(0, 60)
    assert budget.cut(0) == "this cell printed more than 100 bytes: the rest of its output was dropped"
    assert budget.cut(0) is None
    assert budget.spend(1, 80) and not budget.spend(1, 20)
    assert "this notebook's output passed 150 bytes" in budget.cut(1, "widget state")
    assert budget.cut(2) is None and budget.cut(4) is None  # later cells: told once, at the end
    assert "cell(s) 1-3, 5 (counted from 1" in budget.summary()


def test_forged_messages_are_measured_as_stored() -> None:
    msg = {"msg_type": "display_data", "content": {"data": {"text/plain": "x"}}}  # no metadata
    assert outputs.kept_content(msg) == {"output_type": "display_data", "data": {"text/plain": "x"}, "metadata": {}}
    update = {"msg_type": "update_display_data", "content": {"data": {"text/plain": "y" * 100}, "metadata": {}}}
    assert outputs.size_of(outputs.kept_content(update)) > 100  # what it puts in place of the display's
    error = {"ename": "E" * 500, "evalue": "v" * 10_000, "traceback": ["t" * 10_000] * 1000}
    outputs.trim_error(error)
    assert len(error["traceback"]) == outputs.ERROR_LINES and outputs.size_of(error) < 130_000
    outputs.trim_error(error, short=True)
    assert error["traceback"] == [f"{'E' * 200}: {'v' * outputs.SHORT_ERROR}"]
    assert outputs.stream_start("\u00e9" * 10, 5) == "\u00e9\u00e9"  # whole characters only
