"""scancel: cancel jobs (or send them a signal)."""
from __future__ import annotations

import getpass
import os
import re
import signal as _signal
import sys

from .. import db, paths, procs, transitions, wake
from ..request import _signal_number
from .common import getopt_parse, open_cluster, select_jobs


_JOB_ID = re.compile(r"\d+(?:_(?:\d+|\[[\d,\-]+\]))?(?:\.(?:\d+|batch|extern))?")
_STATES = {"PENDING": "PENDING", "PD": "PENDING", "RUNNING": "RUNNING", "R": "RUNNING",
           "SUSPENDED": "SUSPENDED", "S": "SUSPENDED"}


def main(argv: list[str]) -> int:
    """Like Slurm 22.05's scancel (captured): a job that is unknown or already over is no error
    when cancelling (``-v`` says so, exit 0); it is one when signalling. Bad ids, users, states and
    signals are refused before anything is done."""
    opts, args = getopt_parse(
        "scancel", argv, "u:s:bfn:p:t:qv",
        ["user=", "signal=", "batch", "full", "name=", "partition=", "state=", "me", "quiet", "verbose"],
    )
    users = names = partitions = states = None
    signum, batch_only, full, verbose = None, False, False, 0
    for opt, val in opts:
        if opt in ("-u", "--user"):
            users = set(val.split(","))
            for user in users:
                if not _known_user(user):
                    print(f"scancel: error: Invalid user name: {user}", file=sys.stderr)
                    return 1
        elif opt == "--me":
            users = {getpass.getuser()}
        elif opt in ("-s", "--signal"):
            signum = _signal_number(val)
            if signum is None:
                print(f"Unknown job signal: {val}", file=sys.stderr)
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
            states = set()
            for state in val.split(","):
                if state.upper() not in _STATES:
                    print(f"Invalid job state specified: {state}", file=sys.stderr)
                    print("Valid job states are PENDING, RUNNING, and SUSPENDED", file=sys.stderr)
                    return 1
                states.add(_STATES[state.upper()])
        elif opt in ("-v", "--verbose"):
            verbose += 1
    if not args and not (users or names or partitions or states):
        print("scancel: error: No job identification provided", file=sys.stderr)
        return 1
    for token in args:
        if not _JOB_ID.fullmatch(token):
            print(f"scancel: error: Invalid job id {token}", file=sys.stderr)
            return 1
    conn, _ = open_cluster()
    rc = 0
    signalling = signum is not None and signum != _signal.SIGKILL

    def refuse(token: str, why: str, step: bool = False) -> None:
        nonlocal rc
        if signalling or step or verbose:
            print(f"scancel: error: Kill job error on job {'step ' if step else ''}id {token}: {why}", file=sys.stderr)
        if signalling or step:
            rc = 1

    targets = []
    for token in args or [None]:
        if token and "." in token:
            rc = max(rc, cancel_step(conn, token, signum, refuse))
            continue
        if token and verbose:
            print(f"scancel: {'Signal ' + str(signum) + ' to' if signalling else 'Terminating'} job {token}",
                  file=sys.stderr)
        jobs = select_jobs(conn, token) if token else db.jobs_where(conn, "state IN ('PENDING','RUNNING')")
        if token and not jobs:
            refuse(token, "Invalid job id specified")
            continue
        targets += [(token, job) for job in jobs]
    for token, job in targets:
        if users and job["user"] not in users or names and job["name"] not in names:
            continue
        if partitions and job["partition"] not in partitions or states and job["state"] not in states:
            continue
        if job["state"] not in ("PENDING", "RUNNING"):
            if token:
                refuse(formats_id(job), "Job/step already completing or completed")
            continue
        if signalling:
            signal_job(job, signum, batch_only, full)
        else:
            cancel(conn, job)
    wake.poke()
    return rc


def _known_user(user: str) -> bool:
    import pwd

    try:
        pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        return True
    except KeyError:
        return False


def formats_id(job: dict) -> str:
    from ..formats import job_id_text

    return job_id_text(job)


def cancel_step(conn, token: str, signum: int | None, refuse) -> int:
    """``scancel JOB.STEP``: SIGTERM (or the signal) to that step's srun, which passes it on."""
    job_text, _, step = token.partition(".")
    jobs = select_jobs(conn, job_text)
    rows = [r for job in jobs for r in db.steps_of(conn, job["id"]) if r["step"] == step]
    running = [r for r in rows if r["state"] == "RUNNING" and r["pid"]]
    if not running:
        refuse(token, "Invalid job id specified" if not rows else "Job/step already completing or completed", True)
        return 1
    for row in running:
        try:
            os.kill(row["pid"], signum or _signal.SIGTERM)
        except ProcessLookupError:
            pass
    return 0


def cancel(conn, job: dict) -> None:
    """Pending: mark cancelled at once. Running: ask its supervisor (SIGTERM, KillWait, SIGKILL)."""
    now = db.now()
    with db.transaction(conn):
        current = db.get_job(conn, job["id"])
        if current["state"] == "PENDING":
            transitions.cancel_pending(conn, job["id"], now)
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
