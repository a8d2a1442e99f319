"""Value parsers of site profiles: time limits, byte and file-count quotas, hostlists."""
from __future__ import annotations

import re

import hostlist

from hpcnb.slurm import sizes
from hpcnb.slurm.times import parse_time

#: Seconds in a Slurm time limit (None for INFINITE/UNLIMITED): Slurm's own parser.
parse_time_limit = parse_time
_COUNT_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMG]?)$", re.IGNORECASE)
_COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}


def _quota(value: int | str, what: str, example: str) -> int | str:
    """An int quota as it is (refused if negative or a bool), or a string to parse; else ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"a {what} quota cannot be true/false")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"quota {value} is negative")
        return value
    if not isinstance(value, str):
        raise ValueError(f"a {what} quota must be an integer or a string like '{example}', "
                         f"got {type(value).__name__}")
    return value


def parse_bytes(value: int | str) -> int:
    """A byte quota: an int, or a string with a binary unit ("50G" = 50 * 2**30, "1T", "7.2T")."""
    value = _quota(value, "byte", "50G")
    return value if isinstance(value, int) else sizes.parse_bytes(value)


def parse_file_count(value: int | str) -> int:
    """A file-count quota: an int, or a string with a decimal unit ("500k" = 500_000, "1M")."""
    value = _quota(value, "file", "500k")
    if isinstance(value, int):
        return value
    m = _COUNT_RE.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a file count (write e.g. 5000, 500k, 1M)")
    count = float(m.group(1)) * _COUNT_UNITS[m.group(2).upper()]
    if count != int(count):
        raise ValueError(f"{value!r} is not a whole number of files")
    return int(count)


def expand_hostlist(expr: str) -> list[str]:
    """Node names of a Slurm hostlist expression ("node[1-2],gpu3" -> node1, node2, gpu3).

    Uses python-hostlist, the same expander the local Slurm uses. Raises ``ValueError``.
    """
    try:
        names = hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as exc:
        raise ValueError(f"{expr!r} is not a hostlist expression ({exc})") from None
    if not names or any(not n for n in names):
        raise ValueError(f"{expr!r} names no nodes")
    return names
