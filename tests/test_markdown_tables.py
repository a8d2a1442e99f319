"""Markdown tables keep `$NAME`, `<placeholder>` and `|` as text (hpcnb.lessons.markdown): JupyterLab
typesets `$...$` as math and drops `<...>` as HTML. The browser itself is tests/test_browser.py."""
from __future__ import annotations

import html
import re

import pytest

from hpcnb.lessons import markdown, scaling, tuning

AWKWARD = ["$HOME", "--account=def-<PI>", "/tmp/hpcnb-$USER/scratch", "a | b", "x & y", "back\\slash", "1 < 2 > 0"]


def _cells(text: str) -> list[str]:
    """The text of every rendered table cell, as a reader sees it (CommonMark + GFM tables)."""
    mistune = pytest.importorskip("mistune")
    rendered = mistune.create_markdown(escape=False, plugins=["table"])(text)
    return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[dh](?:\s[^>]*)?>(.*?)</t[dh]>", rendered, re.S)]


def test_escape_leaves_no_math_delimiter_or_tag() -> None:
    assert markdown.escape("$HOME") == "\\$HOME"
    assert markdown.escape("--account=def-<PI>") == "--account=def-&lt;PI&gt;"
    assert markdown.escape("two\nlines") == "two<br>lines"
    for text in AWKWARD:
        assert re.search(r"(?<!\\)\$|<(?!br>)", markdown.escape(text)) is None, text


def test_a_table_renders_every_cell_as_written() -> None:
    text = markdown.table(["value", "n"], [[v, i] for i, v in enumerate(AWKWARD)])
    assert _cells(text) == ["value", "n"] + [c for i, v in enumerate(AWKWARD) for c in (v, str(i))]


def test_the_lesson_tables_escape() -> None:
    rows = [{"setting": "$SLURM_TMPDIR", "note": "<PI>"}]
    assert "\\$SLURM_TMPDIR" in tuning.markdown_table(rows) and "&lt;PI&gt;" in tuning.markdown_table(rows)
    runs = [scaling.Run(tasks=n, nodes=1, seconds=10.0 / n) for n in (1, 2)]
    assert _cells(scaling.format_table(runs))[:3] == ["kind", "tasks", "nodes"]
