"""What an autograded notebook keeps of a submission's output, whatever the submission holds.

:class:`OutputBudget` counts everything that ends in the graded notebook and its feedback page, at
its size in the notebook file (JSON, UTF-8): stream text, rich data and its metadata, errors (name,
value, traceback), and widget (comm) state, which the notebook's metadata keeps. A cell keeps at
most CELL_BYTES and the whole notebook NOTEBOOK_BYTES; what passes either is dropped and the cell
says so, once (:meth:`OutputBudget.cut`); the notebook ends with a list of the cells that lost output
(:meth:`OutputBudget.summary`). An error is kept even past the budget, one a cell and shortened
(:func:`trim_error`): it decides the cell's grade.

The grader's side counts (:class:`hpcnb.course.sandbox_jupyter.SandboxedExecute`): the kernel's own caps run
in the student's process, which the student may change.
"""
from __future__ import annotations

import contextlib
import json
import resource
from typing import Any

CELL_BYTES = 128 << 10  # output kept per cell
NOTEBOOK_BYTES = 256 << 10  # output kept per notebook, widget state included
ERROR_TEXT = 2000  # characters kept of an error's value and of each line of its traceback
ERROR_LINES = 60  # lines kept of a traceback (its last ones)
SHORT_ERROR = 300  # characters kept of an error's value past the budget (no traceback)
GRADER_DATA_BYTES = 1 << 30  # the grading process's heap, whatever the kernel sends (a backstop)
KEPT = {  # what of each message's content ends in the notebook (nbformat's output_from_msg)
    "stream": {"name": "stdout", "text": ""},
    "display_data": {"data": {}, "metadata": {}},
    "execute_result": {"data": {}, "metadata": {}, "execution_count": None},
    "error": {"ename": "", "evalue": "", "traceback": []},
}
KEPT["update_display_data"] = KEPT["display_data"]  # its data and metadata replace a display's

__all__ = ["CELL_BYTES", "NOTEBOOK_BYTES", "OutputBudget", "bound_grader_memory", "kept_content",
           "lift_grader_bound", "size_of", "stream_start", "trim_error"]


def size_of(value: Any) -> int:
    """Bytes ``value`` takes in a notebook file (JSON, UTF-8)."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "replace"))


def kept_content(msg: dict[str, Any]) -> dict[str, Any]:
    """The output an output message makes in the notebook (its fields are ``content``'s: a missing
    one is given its default there, as a forged message lacks some); {} for another message."""
    content = msg.get("content")
    defaults = KEPT.get(msg.get("msg_type", ""))
    if defaults is None or not isinstance(content, dict):
        return {}
    for key, default in defaults.items():
        content.setdefault(key, default)
    return {"output_type": msg["msg_type"].removeprefix("update_"), **{key: content[key] for key in defaults}}


def trim_error(content: dict[str, Any], *, short: bool = False) -> None:
    """Cut an error's name, value and traceback, in place, to what a feedback page needs; ``short``:
    its name and value only (an error kept past the budget)."""
    content["ename"] = str(content.get("ename", ""))[:200]
    content["evalue"] = str(content.get("evalue", ""))[:SHORT_ERROR if short else ERROR_TEXT]
    lines = content.get("traceback")
    lines = lines[-ERROR_LINES:] if isinstance(lines, list) else []
    content["traceback"] = ([f"{content['ename']}: {content['evalue']}"] if short
                            else [str(line)[:ERROR_TEXT] for line in lines])


def stream_start(text: str, room: int) -> str:
    """The start of ``text`` that takes at most ``room`` bytes in the notebook (roughly: JSON
    escapes are not counted)."""
    return text.encode("utf-8", "replace")[:max(room, 0)].decode("utf-8", "ignore")


def _ranges(cells: list[int]) -> str:
    """Cell numbers (from 1) as ranges: ``3, 5-9``."""
    spans: list[list[int]] = []
    for number in sorted(index + 1 for index in cells):
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


class OutputBudget:
    """Bytes of output kept per cell and per notebook, and which cells lost some."""

    def __init__(self, cell_bytes: int = CELL_BYTES, notebook_bytes: int = NOTEBOOK_BYTES) -> None:
        self.cell_bytes, self.notebook_bytes = cell_bytes, notebook_bytes
        self.used: dict[int, int] = {}
        self.total = 0
        self.cut_cells: dict[int, None] = {}  # in the order they were cut
        self.errors: set[int] = set()  # cells that hold an error kept past the budget
        self.full_at: int | None = None  # the cell where the notebook's budget ran out

    def room(self, cell: int) -> int:
        """Bytes ``cell`` may still add."""
        return max(0, min(self.cell_bytes - self.used.get(cell, 0), self.notebook_bytes - self.total))

    def spend(self, cell: int, size: int) -> bool:
        """Charge ``size`` bytes to ``cell`` if they fit; whether they did."""
        if size > self.room(cell):
            return False
        self.used[cell] = self.used.get(cell, 0) + size
        self.total += size
        return True

    def cut(self, cell: int, what: str = "output") -> str | None:
        """Record that ``cell`` lost ``what``: the note to show there; None where one was shown (in
        this cell, or in an earlier one once the whole notebook's budget was spent)."""
        notebook_full = self.notebook_bytes - self.total < self.cell_bytes - self.used.get(cell, 0)
        first = cell not in self.cut_cells
        self.cut_cells[cell] = None
        if notebook_full:
            if self.full_at is not None:
                return None
            self.full_at = cell
            return (f"this notebook's output passed {self.notebook_bytes} bytes: the rest of this cell's "
                    f"{what}, and the output of later cells, was dropped (the list is at the end)")
        return f"this cell printed more than {self.cell_bytes} bytes: the rest of its {what} was dropped" \
            if first else None

    def keep_error(self, cell: int) -> bool:
        """May ``cell`` keep an error that passes the budget (shortened)? One a cell."""
        if cell in self.errors:
            return False
        self.errors.add(cell)
        return True

    def summary(self) -> str:
        """A markdown paragraph naming the cells whose output was cut; "" where none was."""
        if not self.cut_cells:
            return ""
        return (f"**hpcnb grader:** the output of cell(s) {_ranges(list(self.cut_cells))} (counted from 1, "
                f"text cells included) was cut: a graded notebook keeps {self.cell_bytes} bytes of output "
                f"per cell and {self.notebook_bytes} in all. Tests were run all the same.")


def bound_grader_memory(pid: int) -> None:
    """Bound the data (heap) of the grading process ``pid`` to GRADER_DATA_BYTES, its soft limit
    only: ZeroMQ bounds each part of a kernel's message, but takes a message of many parts whole
    before any cap of ours sees it. The sandbox's launcher lifts the limit again for the kernel
    (:func:`lift_grader_bound`)."""
    with contextlib.suppress(OSError):  # the process may be gone already
        _, hard = resource.prlimit(pid, resource.RLIMIT_DATA)
        soft = GRADER_DATA_BYTES if hard == resource.RLIM_INFINITY else min(GRADER_DATA_BYTES, hard)
        resource.prlimit(pid, resource.RLIMIT_DATA, (soft, hard))


def lift_grader_bound() -> None:
    """In the sandbox's launcher, before the kernel starts: the kernel's own limits apply there."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
