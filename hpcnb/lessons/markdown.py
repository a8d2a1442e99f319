"""Markdown tables that JupyterLab renders as written: lessons 1, 2, 6, 7 and 11 (the storage,
scaling and tuning tables).

JupyterLab typesets ``$...$`` in Markdown as math and drops ``<...>`` as HTML, so a table cell
``$HOME`` or ``--account=def-<PI>`` would lose text in the browser. :func:`escape` is the one
place where a cell's text is made safe; every table the course builds goes through
:func:`table`.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

__all__ = ["escape", "show_table", "table"]

# `\` first, so that the backslashes added for `$` and `|` are not escaped again
_ESCAPES = (("\\", "\\\\"), ("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("$", "\\$"), ("|", "\\|"),
            ("\n", "<br>"))


def escape(text: Any) -> str:
    """``text`` for a Markdown table cell: ``$``, ``<``, ``>``, ``&``, ``\\`` and ``|`` shown as
    themselves, a newline as a line break within the cell."""
    text = str(text)
    for plain, escaped in _ESCAPES:
        text = text.replace(plain, escaped)
    return text


def table(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table: one line per row, every cell escaped."""
    def line(cells: Iterable[Any]) -> str:
        return "| " + " | ".join(escape(c) for c in cells) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *map(line, rows)])


def show_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
    """Display a list of dicts as a Markdown table in a notebook (missing values as '—')."""
    from IPython.display import Markdown, display

    rows = list(rows)
    columns = list(columns or rows[0])
    cell = lambda value: "—" if value is None else value  # noqa: E731
    display(Markdown(table(columns, ([cell(r.get(c)) for c in columns] for r in rows))))
