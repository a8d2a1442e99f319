"""Job dependencies (``--dependency=afterok:7,singleton``): their grammar and their status, read
from the state. Read by the scheduler (may a job start?), by sbatch (does the job it names exist?)
and by squeue/scontrol (what is outstanding); it writes nothing."""
from __future__ import annotations

import re
import sqlite3
from typing import Any

from hpcnb.slurm.states import FINAL

from .commands.common import job_ref

_DEP_TYPES = ("after", "afterok", "afternotok", "afterany", "aftercorr", "singleton")


def parse_dependency(spec: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """``afterok:1:2,afterany:3`` -> ("all", [("afterok", ["1", "2"]), ...]); ``?`` means any."""
    joiner = "any" if "?" in spec else "all"
    terms = []
    for term in re.split(r"[,?]", spec):
        kind, _, ids = term.partition(":")
        if kind not in _DEP_TYPES or (kind == "singleton") != (ids == ""):
            raise ValueError(term)
        ids_list = [i.split("+")[0] for i in ids.split(":")] if ids else []
        if any(not re.fullmatch(r"\d+(_\d+)?", i) for i in ids_list):
            raise ValueError(term)
        terms.append((kind, ids_list))
    return joiner, terms


def targets(conn: sqlite3.Connection, ref: str) -> list[sqlite3.Row]:
    """The jobs a dependency's reference (``7``: the job or its whole array, ``7_3``: one task) names."""
    ids = job_ref(ref)
    if ids is None:
        return []  # beyond Slurm's uint32 ids: no such job
    base, task = ids
    if task is not None:
        return conn.execute(
            "SELECT state, start_time FROM jobs WHERE array_job_id=? AND array_task_id=?", (base, task)
        ).fetchall()
    return conn.execute("SELECT state, start_time FROM jobs WHERE id=? OR array_job_id=?", (base, base)).fetchall()


def known_job(conn: sqlite3.Connection, ref: str) -> bool:
    """A dependency's job (``7`` or ``7_3``) exists."""
    return bool(targets(conn, ref))


def singleton_busy(conn: sqlite3.Connection, job: dict[str, Any]) -> bool:
    """``singleton``: an earlier job of the same name and user has not ended."""
    return bool(conn.execute(
        "SELECT 1 FROM jobs WHERE name=? AND uid=? AND id<? AND state IN ('PENDING','RUNNING','COMPLETING')",
        (job["name"], job["uid"], job["id"]),
    ).fetchone())


def ref_status(kind: str, rows: list[sqlite3.Row]) -> str:
    """'ok', 'wait' or 'never' for one job of an ``after*`` term, from the rows of :func:`targets`."""
    states = [r["state"] for r in rows]
    final = all(s in FINAL for s in states)
    if kind == "after":
        return "ok" if all(r["start_time"] for r in rows) else "wait"
    if kind == "afterany":
        return "ok" if final else "wait"
    if kind == "afterok":
        bad = any(s in FINAL and s != "COMPLETED" for s in states)
        return "never" if bad else "ok" if final else "wait"
    good = all(s == "COMPLETED" for s in states)  # afternotok / aftercorr
    return "never" if final and good else "ok" if final else "wait"


def dependency_status(conn: sqlite3.Connection, job: dict[str, Any]) -> str:
    """'ok', 'wait' or 'never' for the job's dependency."""
    joiner, terms = parse_dependency(job["req"]["dependency"])
    results = []
    for kind, refs in terms:
        if kind == "singleton":
            results.append("wait" if singleton_busy(conn, job) else "ok")
            continue
        results += [ref_status(kind, targets(conn, ref)) for ref in refs]
    if joiner == "any":
        return "ok" if "ok" in results else "wait" if "wait" in results else "never"
    return "never" if "never" in results else "wait" if "wait" in results else "ok"
