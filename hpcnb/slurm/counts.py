"""Slurm's per-node counts, as in ``SLURM_TASKS_PER_NODE`` and ``SLURM_JOB_CPUS_PER_NODE``: ``2(x2),1``."""
from __future__ import annotations

import re

_PART = re.compile(r"(\d+)(?:\(x(\d+)\))?")


def compress_counts(counts: list[int]) -> str:
    """[2, 2, 1] -> ``2(x2),1``."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        run = j - i + 1
        out.append(f"{counts[i]}(x{run})" if run > 1 else str(counts[i]))
        i = j + 1
    return ",".join(out)


def expand_counts(text: str) -> list[int]:
    """``2(x2),1`` -> [2, 2, 1]; ValueError on anything else."""
    counts: list[int] = []
    for part in text.split(","):
        found = _PART.fullmatch(part.strip())
        if not found:
            raise ValueError(f"not a Slurm per-node count: {text!r}")
        counts += [int(found[1])] * int(found[2] or 1)
    return counts
