"""Slurm's output conventions: job ids, run times, dependencies and ``%[.][width]x`` format strings
(times, sizes and states themselves are :mod:`hpcnb.slurm`'s)."""
from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from hpcnb.slurm.bounds import clamp_epoch, field_width


def stamp(epoch: float | None, missing: str = "Unknown") -> str:
    """A point in time as Slurm prints it (``2024-05-01T12:00:00``), within what Slurm can keep."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(clamp_epoch(epoch))) if epoch else missing


def job_id_text(job: dict[str, Any]) -> str:
    if job["array_job_id"] is not None:
        return f"{job['array_job_id']}_{job['array_task_id']}"
    return str(job["id"])


def array_tasks_text(array_job_id: int, tasks: list[int], throttle: int | None) -> str:
    """Array tasks that share one record (not started yet), as squeue and sacct print them:
    ``7_[1-3,5%2]`` (the throttle after ``%``), or ``7_4`` when only one is left."""
    from .commands.common import int_ranges

    if len(tasks) == 1:
        return f"{array_job_id}_{tasks[0]}"
    return f"{array_job_id}_[{int_ranges(tasks)}{f'%{throttle}' if throttle else ''}]"


def run_time(job: dict[str, Any], now: float | None = None) -> float:
    if not job["start_time"]:
        return 0.0
    end = job["end_time"] or now or time.time()
    return max(0.0, end - job["start_time"])


_SPEC = re.compile(r"%(\.)?(\d*)([A-Za-z%])")


def render(fmt: str, fields: dict[str, Callable[[], str]]) -> str:
    """Expand a squeue ``-o`` format (:func:`cell` each field)."""
    out = []
    pos = 0
    for match in _SPEC.finditer(fmt):
        out.append(fmt[pos : match.start()])
        pos = match.end()
        right, width, letter = match.groups()
        if letter == "%":
            out.append("%")
            continue
        getter = fields.get(letter)
        out.append(cell(getter() if getter else "", bool(right), width))
    out.append(fmt[pos:])
    return "".join(out)


def cell(value: str, right: bool, digits: str) -> str:
    """One ``%[.][N]x`` field as squeue's and sinfo's ``_print_str`` print it: cut to N, then padded
    (right-justified with ``.``); without a width, or with one that wrapped below 0 in C's ``int``,
    the value as it is (then with a space after it)."""
    size = field_width(digits) if digits else 0
    if size <= 0:
        return value + " " if size else value
    return value[:size].rjust(size) if right else value[:size].ljust(size)


def check_widths(fmt: str) -> None:
    """Raise ValueError (one line) for a field width in an ``-o`` format that no real command prints."""
    for match in _SPEC.finditer(fmt):
        if match[2]:
            field_width(match[2])


def header(fmt: str, names: dict[str, str]) -> str:
    return render(fmt, {k: (lambda v=v: v) for k, v in names.items()})


def dependency_text(conn, job: dict[str, Any]) -> str:
    """A job's dependency as squeue %E and scontrol show it: what is still outstanding, each id with
    ``(unfulfilled)`` or ``(failed)``; satisfied terms (and unknown jobs) drop out; ``(null)`` when none."""
    from .dependencies import parse_dependency, ref_status, singleton_busy, targets

    spec = job["req"].get("dependency")
    if not spec or job["state"] != "PENDING":
        return "(null)"
    try:
        joiner, terms = parse_dependency(spec)
    except ValueError:
        return spec
    parts = []
    for kind, refs in terms:
        if kind == "singleton":
            parts += ["singleton(unfulfilled)"] if singleton_busy(conn, job) else []
            continue
        for ref in refs:
            rows = targets(conn, ref)
            status = ref_status(kind, rows) if rows else "ok"  # unknown jobs drop out
            if status != "ok":
                parts.append(f"{kind}:{ref}({'unfulfilled' if status == 'wait' else 'failed'})")
    return ("?" if joiner == "any" else ",").join(parts) or "(null)"


def tres_per_node(req: dict[str, Any], modern: bool = False) -> str | None:
    """squeue %b / scontrol TresPerNode: ``gres:gpu:N`` (24.11, ``modern``: ``gres/gpu:N``; None
    without GPUs)."""
    if not req.get("gpus_per_node"):
        return None
    kind = f"{req['gpu_type']}:" if req.get("gpu_type") else ""
    return f"gres{'/' if modern else ':'}gpu:{kind}{req['gpus_per_node']}"
