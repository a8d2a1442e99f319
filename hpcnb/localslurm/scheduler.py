"""Scheduling decisions: which pending jobs start now, and why the others wait (Slurm's reasons)."""
from __future__ import annotations

import json
import sqlite3
from typing import Any

import hostlist

from . import alloc, db, transitions
from .cluster import Cluster
from .dependencies import dependency_status
from .request import JobRequest


def schedule(conn: sqlite3.Connection, cluster: Cluster) -> list[dict[str, Any]]:
    """Start every pending job that may run now; returns the started jobs. Call in a transaction."""
    running = conn.execute("SELECT alloc, array_job_id FROM jobs WHERE state IN ('RUNNING','COMPLETING')").fetchall()
    free = alloc.free_resources(cluster, [json.loads(j["alloc"]) for j in running if j["alloc"]])
    running_per_array: dict[int, int] = {}
    for j in running:
        if j["array_job_id"] is not None:
            running_per_array[j["array_job_id"]] = running_per_array.get(j["array_job_id"], 0) + 1
    pending = _pending(conn)
    started = []
    blocked = False
    now = db.now()
    for job in pending:
        reason = _wait_reason(conn, cluster, job, running_per_array, now)
        req = job["request"]
        if reason == "DependencyNeverSatisfied" and req.kill_on_invalid_dep:
            transitions.cancel_pending(conn, job["id"], now, reason)
            continue
        placed = None
        if reason is None:
            # every job needs a CPU: with none free anywhere nothing fits, and placing is skipped
            full = all(slot.cpus <= 0 for slot in free.values())
            placed = None if full else alloc.place(req, cluster, job["partition"], free)
            if placed is None:
                reason = "Priority" if blocked else "Resources"
                blocked = True
        if placed is None:
            if reason != job["reason"]:
                conn.execute("UPDATE jobs SET reason=? WHERE id=?", (reason, job["id"]))
            continue
        for part in placed:
            slot = free[part["node"]]
            slot.cpus -= part["cpus"]
            slot.mem -= part["mem"]
            slot.gpus = [g for g in slot.gpus if g not in part["gpus"]]
            slot.idle = False
        nodelist = hostlist.collect_hostlist([p["node"] for p in placed])
        transitions.start(conn, job["id"], now, json.dumps(placed), nodelist)
        if job["array_job_id"] is not None:
            running_per_array[job["array_job_id"]] = running_per_array.get(job["array_job_id"], 0) + 1
        started.append(job)
    return started


class _Parsed:
    """A pending job's request, parsed once per controller (a request never changes once queued,
    but for its comment), and whether it fits its partition when idle (known once asked)."""

    __slots__ = ("data", "request", "fits_idle")

    def __init__(self, data: dict[str, Any]) -> None:
        self.data, self.request, self.fits_idle = data, JobRequest.from_dict(data), None


_PARSED: dict[int, _Parsed] = {}


def _pending(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """The pending jobs in scheduling order; each request is read and decoded only the first time."""
    rows = conn.execute(
        "SELECT id, array_job_id, array_task_id, array_throttle, name, uid, partition, kind, reason, held, "
        "eligible_time, time_limit FROM jobs WHERE state='PENDING' "
        "ORDER BY COALESCE(array_job_id, id), array_task_id"
    ).fetchall()
    jobs = [dict(row) for row in rows]
    new = [job["id"] for job in jobs if job["id"] not in _PARSED]
    for start in range(0, len(new), 500):  # SQLite allows 999 parameters per statement
        chunk = new[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for job_id, req in conn.execute(f"SELECT id, req FROM jobs WHERE id IN ({marks})", chunk):
            _PARSED[job_id] = _Parsed(json.loads(req))
    for job in jobs:
        parsed = job["parsed"] = _PARSED[job["id"]]
        job["req"], job["request"] = parsed.data, parsed.request
    if len(_PARSED) > 4 * len(jobs) + 1000:
        keep = {j["id"] for j in jobs}
        for job_id in [i for i in _PARSED if i not in keep]:
            del _PARSED[job_id]
    return jobs


def _wait_reason(conn, cluster: Cluster, job: dict[str, Any], running_per_array: dict[int, int], now: float) -> str | None:
    if job["held"]:
        return "JobHeldUser" if job["held"] == 1 else "JobHeldAdmin"
    if job["eligible_time"] and job["eligible_time"] > now:
        return "BeginTime"
    if job["req"].get("dependency"):
        status = dependency_status(conn, job)
        if status != "ok":
            return "Dependency" if status == "wait" else "DependencyNeverSatisfied"
    throttle = job["array_throttle"]
    if throttle and running_per_array.get(job["array_job_id"], 0) >= throttle:
        return "JobArrayTaskLimit"
    part = cluster.partitions[job["partition"]]
    if (job["req"]["nodes_min"] or 1) > min(len(part.nodes), part.max_nodes or len(part.nodes)):
        return "PartitionNodeLimit"
    limit = part.max_time
    if limit is not None and (job["time_limit"] is None or job["time_limit"] > limit):  # None: UNLIMITED asked
        return "PartitionTimeLimit"
    parsed = job["parsed"]
    if parsed.fits_idle is None:
        idle = alloc.free_resources(cluster, [])
        parsed.fits_idle = alloc.place(parsed.request, cluster, job["partition"], idle) is not None
    if not parsed.fits_idle:
        return "PartitionConfig"  # more than the whole partition holds, even idle (as Slurm 22.05)
    return None
