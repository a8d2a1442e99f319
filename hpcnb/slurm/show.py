"""What ``scontrol show`` prints: records of ``Key=Value`` pairs (``show partition``, ``show node``,
``show reservation``; a value may hold spaces, as ``OS=Linux 6.8.0 #1 SMP``), and ``show config``'s
``Key = Value`` lines; GRES lists as nodes print them (``gpu:a100:4(S:0-1),gpu:v100:2``)."""
from __future__ import annotations

import re

__all__ = ["NULL_VALUES", "parse_config", "parse_gres", "parse_records"]

#: How Slurm prints "nothing here".
NULL_VALUES = frozenset({"", "(null)", "N/A", "NONE", "none"})
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w/:.\[\]-]*)=")
_CONFIG_LINE = re.compile(r"^([A-Za-z][\w/:.\[\]-]*)\s*=\s?(.*)$")


def parse_records(text: str) -> list[dict[str, str]]:
    """The records of a ``scontrol show partition|node|reservation`` text (one per blank-line
    separated block, or one per line with ``-o``), each as {key: value}, values stripped."""
    records: list[dict[str, str]] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        keys = list(_KEY.finditer(block))
        if not keys:
            continue
        record: dict[str, str] = {}
        for match, following in zip(keys, [*keys[1:], None]):
            end = following.start() if following else len(block)
            record.setdefault(match.group(1), " ".join(block[match.end():end].split()))
        records.append(record)
    return records


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``'s settings as {key: value}: its first section (the slurm.conf
    settings) and later ones alike; the first line (``Configuration data as of ...``) and headings skipped."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        match = _CONFIG_LINE.match(line.strip())
        if match:
            settings.setdefault(match.group(1), match.group(2).strip())
    return settings


def parse_gres(text: str) -> list[tuple[str, str | None, int | None]]:
    """(name, type, count) of each item of a node's ``Gres=`` (``gpu:a100:4(S:0-1)``, ``gpu:2``,
    ``gpu:a100`` gives count None: no count written); [] for ``(null)``. Raises ValueError for an item
    whose count is not a number (``gpu:a100:x``)."""
    items = []
    for item in re.split(r",(?![^(]*\))", text.strip()):
        item = item.split("(", 1)[0].strip()
        if item in NULL_VALUES:
            continue
        name, *rest = item.split(":")
        kind, count = (rest[0] if rest else None), None
        if rest and rest[-1].isdigit():
            count = int(rest[-1])
            kind = rest[0] if len(rest) == 2 else None
        elif len(rest) > 1:
            raise ValueError(f"GRES {item!r}: the count {rest[-1]!r} is not a whole number")
        items.append((name, kind or None, count))
    return items
