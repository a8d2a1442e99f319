"""Job arrays' ``--array`` specs (``0-5``, ``1-10:2%3``, ``1,4,7``): the task ids and the throttle."""
from __future__ import annotations

import re

from .bounds import c_int, saturated

MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize


def parse_array(spec: str) -> tuple[list[int], int | None]:
    """``1-10:2%3`` / ``1,4,7`` -> (task ids, throttle). Raises ValueError("Invalid job array
    specification"), sbatch's words, for a spec Slurm refuses."""
    body, _, throttle_text = spec.partition("%")
    ids: list[int] = []
    if not body:
        body = "0"  # "%2" alone: Slurm 22.05 makes it task 0 (captured)
    for part in body.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part)
        if not match:
            raise ValueError("Invalid job array specification")
        # read as C reads them (saturated): thousands of digits are a number too large, not a crash
        first = saturated(match.group(1))
        last = saturated(match.group(2)) if match.group(2) else first
        step = saturated(match.group(3) or "1")
        if last < first or step < 1 or last >= MAX_ARRAY_SIZE:  # checked before expanding it
            raise ValueError("Invalid job array specification")
        ids.extend(range(first, last + 1, step))
    # %0, %-1, %abc: no limit, as Slurm 22.05 reads them (atoi, which wraps past INT_MAX; captured)
    limit = c_int(saturated(re.match(r"[0-9]*", throttle_text).group()))
    return sorted(set(ids)), (limit if limit > 0 else None)
