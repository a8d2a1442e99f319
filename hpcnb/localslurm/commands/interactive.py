"""What salloc and a stand-alone srun share: getting an allocation and supervising it."""
from __future__ import annotations

import os
import signal
import sys
import time

from .. import db, procs, submit, transitions, wake
from ..request import JobRequest
from ..supervisor import WATCHED, Outcome, Supervisor


def allocate(command: str, req: JobRequest, name: str) -> tuple[object, dict]:
    """Queue an interactive allocation owned by this process and wait until it is granted."""
    from .common import open_cluster

    conn, cluster = open_cluster()
    submit.base_request_fields(req, dict(os.environ), cluster)
    (job_id,) = submit.queue_jobs(conn, req, cluster, "alloc", None, name, owner_pid=os.getpid())
    wake.poke()
    announced = False
    delay = 0.002
    try:
        while True:
            job = db.get_job(conn, job_id)
            if job["state"] == "RUNNING":
                break
            if job["state"] != "PENDING":
                print(f"{command}: error: Job allocation {job_id} has been revoked.", file=sys.stderr)
                raise SystemExit(1)
            if not announced and job["reason"] != "None":  # the controller says it must wait (as Slurm)
                if job["reason"].startswith("Partition"):
                    print(f"{command}: Requested partition configuration not available now", file=sys.stderr)
                if command == "salloc":
                    print(f"salloc: Pending job allocation {job_id}", file=sys.stderr)
                print(f"{command}: job {job_id} queued and waiting for resources", file=sys.stderr)
                announced = True
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
    except KeyboardInterrupt:
        with db.transaction(conn):
            transitions.cancel_pending(conn, job_id, time.time())
        if command == "srun":  # Slurm 22.05's srun words it so
            print(f"srun: Job allocation {job_id} has been revoked", file=sys.stderr)
            print(f"srun: Force Terminated JobId={job_id}", file=sys.stderr)
        else:
            print(f"{command}: Job allocation {job_id} has been revoked.", file=sys.stderr)
        raise SystemExit(1) from None
    if announced:
        print(f"{command}: job {job_id} has been allocated resources", file=sys.stderr)
    return conn, job


def supervise(job: dict, start, on_revoke=None) -> tuple[Outcome, Supervisor]:
    """Run ``start(supervisor)`` (which spawns the processes to wait for) under limits; record the end.
    With ``on_revoke`` (salloc), a cancel or the time limit ends the steps only (see Supervisor)."""
    procs.become_subreaper()
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    sup = Supervisor(job["id"])
    sup.on_revoke = on_revoke
    sup.register()
    sup.err_fd = 2
    start(sup)
    outcome = sup.watch()
    if sup.revoked is None:
        sup.finish(outcome)
    return outcome, sup
