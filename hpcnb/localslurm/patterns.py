"""A batch step's file name patterns (``--output=slurm-%j.out``): as slurmstepd expands them for the
files it opens, and as ``scontrol show job`` shows them. Pure text; used by the supervisor and scontrol."""
from __future__ import annotations

import re
from typing import Any

NO_ARRAY_TASK = "4294967294"  # %a of a job that is not an array task (NO_VAL - 1)
MAX_PAD = 10  # %20j pads to 10 digits


def expand_pattern(pattern: str, job: dict[str, Any], node: str) -> str:
    """A batch step's file name pattern, as Slurm 22.05's slurmstepd expands it: %% %A %a %J %j %N %n
    %s %t %u %x, numbers zero-padded by a width (%4j, at most 10). Quirks kept: a width before a
    letter that is no pattern drops the % and all but its last digit (%12q: 2q); a backslash
    anywhere turns expansion off and is removed (\\\\ leaves one)."""
    if "\\" in pattern:
        return _unescaped(pattern)
    numbers = {**_ids(job), "J": job["id"], "n": 0, "t": 0}  # %J: the batch step has no ".step"
    texts = {"x": job["name"], "u": job["user"], "N": node, "s": "batch"}
    out: list[str] = []
    kept = i = 0  # pattern[kept:i] is copied as it is
    while i < len(pattern):
        if pattern[i] != "%":
            i += 1
            continue
        if pattern.startswith("%%", i):
            out.append(pattern[kept:i + 1])
            i = kept = i + 2
            continue
        i += 1
        width = 0
        digits = re.match(r"\d+", pattern[i:])
        if digits:
            out.append(pattern[kept:i - 1])
            width = min(int(digits.group()), MAX_PAD)
            i += len(digits.group())
            kept = i - 1  # the last digit stays, unless a letter follows
        if i == len(pattern):
            break
        letter = pattern[i]
        if letter in numbers or letter in texts:
            out.append(pattern[kept:i - 1])
            out.append(str(numbers[letter]).zfill(width) if letter in numbers else str(texts[letter]))
            i = kept = i + 1
    out.append(pattern[kept:])
    return "".join(out)


def _ids(job: dict[str, Any]) -> dict[str, Any]:
    """%j, %A, %a: the job's id, its array's (its own when not a task), its task id."""
    array_id = job["array_job_id"] if job["array_job_id"] is not None else job["id"]
    task = job["array_task_id"]
    return {"j": job["id"], "A": array_id, "a": NO_ARRAY_TASK if task is None else task}


def _unescaped(pattern: str) -> str:
    """A pattern with a backslash: no expansion; each backslash goes, but one of a pair stays."""
    return re.sub(r"\\(\\?)", r"\1", pattern)


def shown_pattern(pattern: str, job: dict[str, Any], since_2411: bool = False) -> str:
    """A file name pattern as ``scontrol show job`` shows it (StdOut=...): Slurm 22.05's scontrol
    expands only %A %a %j %u %x, with no width and no %%, and keeps backslashes; 24.11's also %% and
    the widths of %A %a %j (zero-padded, at most 10), and keeps every other % as it is."""
    values = {**_ids(job), "u": job["user"], "x": job["name"]}
    if not since_2411:
        return re.sub(r"%([Aajux])", lambda m: str(values[m.group(1)]), pattern)

    def expanded(m: re.Match[str]) -> str:
        if m.group(0) == "%%":
            return "%"
        width, letter = m.group(1), m.group(2)
        text = str(values[letter])
        return text.zfill(min(int(width), MAX_PAD)) if width and letter in "Aaj" else text
    return re.sub(r"%%|%(\d*)([Aajux])", expanded, pattern)


def default_output(job: dict[str, Any]) -> str:
    return "slurm-%A_%a.out" if job["array_job_id"] is not None else "slurm-%j.out"
