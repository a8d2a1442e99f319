"""Slurm's output conventions: times, job ids, states, and ``%[.][width]x`` format strings."""
from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

STATE_CODES = {
    "PENDING": "PD", "RUNNING": "R", "COMPLETING": "CG", "COMPLETED": "CD", "FAILED": "F", "CANCELLED": "CA",
    "TIMEOUT": "TO", "OUT_OF_MEMORY": "OOM", "NODE_FAIL": "NF", "PREEMPTED": "PR", "SUSPENDED": "S",
    "REQUEUED": "RQ",
}


def duration(seconds: float | None) -> str:
    """squeue's TIME: ``M:SS``, ``H:MM:SS`` or ``D-HH:MM:SS``."""
    secs = int(seconds or 0)
    days, rem = divmod(secs, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, sec = divmod(rem, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{sec:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{sec:02d}"
    return f"{minutes}:{sec:02d}"


def limit(seconds: int | None) -> str:
    """A time limit as squeue/sinfo print it (``UNLIMITED`` / ``infinite`` handled by callers)."""
    return "UNLIMITED" if seconds is None else duration(seconds)


def elapsed(seconds: float | None) -> str:
    """sacct's Elapsed / scontrol's RunTime: ``HH:MM:SS`` or ``D-HH:MM:SS``."""
    secs = int(seconds or 0)
    days, rem = divmod(secs, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, sec = divmod(rem, 60)
    text = f"{hours:02d}:{minutes:02d}:{sec:02d}"
    return f"{days}-{text}" if days else text


def cpu_time(seconds: float | None) -> str:
    """sacct's TotalCPU: ``MM:SS.mmm`` under an hour, else ``HH:MM:SS``, ``D-HH:MM:SS``; "" if unknown."""
    if seconds is None:
        return ""
    whole, millis = divmod(int(round(seconds * 1000)), 1000)
    if whole >= 3600:
        return elapsed(whole)
    minutes, sec = divmod(whole, 60)
    return f"{minutes:02d}:{sec:02d}.{millis:03d}" if millis else f"00:{minutes:02d}:{sec:02d}"


def stamp(epoch: float | None, missing: str = "Unknown") -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch)) if epoch else missing


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
    """Expand a squeue/sinfo ``-o`` format. ``%.N`` right-justifies, ``%N`` left-justifies; values are cut to N."""
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
        value = getter() if getter else ""
        if width:
            size = int(width)
            value = value[:size]
            value = value.rjust(size) if right else value.ljust(size)
        out.append(value)
    out.append(fmt[pos:])
    return "".join(out)


def header(fmt: str, names: dict[str, str]) -> str:
    return render(fmt, {k: (lambda v=v: v) for k, v in names.items()})


def dependency_text(conn, job: dict[str, Any]) -> str:
    """A job's dependency as squeue %E and scontrol show it: what is still outstanding, each id with
    ``(unfulfilled)`` or ``(failed)``; satisfied terms (and unknown jobs) drop out; ``(null)`` when none."""
    from . import db
    from .scheduler import parse_dependency

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
            busy = conn.execute(
                "SELECT 1 FROM jobs WHERE name=? AND uid=? AND id<? AND state IN ('PENDING','RUNNING','COMPLETING')",
                (job["name"], job["uid"], job["id"]),
            ).fetchone()
            if busy:
                parts.append("singleton(unfulfilled)")
            continue
        for ref in refs:
            if "_" in ref:
                base, task = ref.split("_")
                rows = conn.execute("SELECT state, start_time FROM jobs WHERE array_job_id=? AND array_task_id=?",
                                    (int(base), int(task))).fetchall()
            else:
                rows = conn.execute("SELECT state, start_time FROM jobs WHERE id=? OR array_job_id=?",
                                    (int(ref), int(ref))).fetchall()
            if not rows:
                continue
            states = [r["state"] for r in rows]
            final = all(s in db.FINAL_STATES for s in states)
            if kind == "after":
                status = "ok" if all(r["start_time"] for r in rows) else "wait"
            elif kind == "afterany":
                status = "ok" if final else "wait"
            elif kind == "afterok":
                bad = any(s in db.FINAL_STATES and s != "COMPLETED" for s in states)
                status = "never" if bad else "ok" if final else "wait"
            else:  # afternotok / aftercorr
                good = all(s == "COMPLETED" for s in states)
                status = "never" if final and good else "ok" if final else "wait"
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
