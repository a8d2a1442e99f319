"""scancel: cancel jobs (or send them a signal)."""
from __future__ import annotations

import getpass
import os
import signal as _signal
import sys

from .. import controller, db, paths, procs
from ..request import _signal_number
from .common import getopt_parse, open_cluster, select_jobs


def main(argv: list[str]) -> int:
    opts, args = getopt_parse(
        "scancel", argv, "u:s:bfn:p:t:qv",
        ["user=", "signal=", "batch", "full", "name=", "partition=", "state=", "me", "quiet", "verbose"],
    )
    conn, _ = open_cluster()
    users = names = partitions = states = None
    signum, batch_only, full = None, False, False
    for opt, val in opts:
        if opt in ("-u", "--user"):
            users = set(val.split(","))
        elif opt == "--me":
            users = {getpass.getuser()}
        elif opt in ("-s", "--signal"):
            signum = _signal_number(val)
            if signum is None:
                print(f"scancel: error: Invalid job signal: {val}", file=sys.stderr)
                return 1
        elif opt in ("-b", "--batch"):
            batch_only = True
        elif opt in ("-f", "--full"):
            full = True
        elif opt in ("-n", "--name"):
            names = set(val.split(","))
        elif opt in ("-p", "--partition"):
            partitions = set(val.split(","))
        elif opt in ("-t", "--state"):
            states = {s.upper() for s in val.split(",")}
    if not args and not (users or names or partitions or states):
        print("scancel: error: No job identification provided", file=sys.stderr)
        return 1
    rc = 0
    targets = []
    for token in args or [None]:
        jobs = select_jobs(conn, token) if token else db.jobs_where(conn, "state IN ('PENDING','RUNNING')")
        if token and not jobs:
            print(f"scancel: error: Kill job error on job id {token}: Invalid job id specified", file=sys.stderr)
            rc = 1
            continue
        targets += jobs
    for job in targets:
        if users and job["user"] not in users or names and job["name"] not in names:
            continue
        if partitions and job["partition"] not in partitions or states and job["state"] not in states:
            continue
        if job["state"] not in ("PENDING", "RUNNING"):
            if args:
                print(f"scancel: error: Kill job error on job id {job['id']}: Job/step already completing or completed",
                      file=sys.stderr)
                rc = 1
            continue
        if signum is not None and signum != _signal.SIGKILL:
            signal_job(job, signum, batch_only, full)
        else:
            cancel(conn, job)
    controller.poke()
    return rc


def cancel(conn, job: dict) -> None:
    """Pending: mark cancelled at once. Running: ask its supervisor (SIGTERM, KillWait, SIGKILL)."""
    now = db.now()
    with db.transaction(conn):
        current = db.get_job(conn, job["id"])
        if current["state"] == "PENDING":
            conn.execute(
                "UPDATE jobs SET state='CANCELLED', reason='None', end_time=? WHERE id=? AND state='PENDING'",
                (now, job["id"]),
            )
            return
        if current["state"] != "RUNNING":
            return
        conn.execute("UPDATE jobs SET control='cancel' WHERE id=?", (job["id"],))
    wake_supervisor(current)


def wake_supervisor(job: dict) -> None:
    if procs.alive(job["supervisor_pid"], job["supervisor_ctime"]):
        os.kill(job["supervisor_pid"], _signal.SIGUSR2)


def signal_job(job: dict, signum: int, batch_only: bool, full: bool) -> None:
    """``scancel --signal``: to the steps (default), the batch shell (-b), or everything (-f)."""
    if job["state"] != "RUNNING":
        return
    tree = procs.descendants(job["supervisor_pid"]) if job["supervisor_pid"] else []
    if not tree and job["kind"] != "batch":
        tree = procs.job_processes(job["id"], str(paths.state_dir()))
    if full:
        targets = tree
    elif batch_only:
        targets = [p for p in tree if p.pid == job["batch_pid"]]
    else:
        targets = procs.step_processes(tree)
    procs.send(targets, signum)
