"""What salloc and a stand-alone srun share: getting an allocation, then handing it to its supervisor.

The supervisor (limits, revocation, the subreaper of the command's processes) is daemon code, in
:mod:`hpcnb.localslurm.allocation`; the command reaches it only through its entry point
(:func:`hand_over`), never by an import.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import NoReturn

from .. import db, procs, submit, transitions, wake
from ..request import JobRequest
from . import HANDOFF, error
from .options import SUBMIT_FAILED


# why an ``--immediate`` request is given up: slurm_errno.c's texts (strerror's for ETIMEDOUT)
NODES_BUSY = "Requested nodes are busy"
NOT_TOP_PRIORITY = "Immediate execution impossible, insufficient priority"
DEPENDENCY = "Job dependency problem"
TIMED_OUT = "Connection timed out"
_NOT_INDEPENDENT = ("BeginTime", "Dependency")  # job_independent() is false: ESLURM_DEPENDENCY


def allocate(command: str, req: JobRequest, name: str) -> tuple[object, dict]:
    """Queue an interactive allocation owned by this process and wait until it is granted (with
    ``--immediate``, give up as Slurm does: at once, or after its seconds)."""
    from .common import open_cluster

    conn, cluster = open_cluster()
    submit.base_request_fields(req, dict(os.environ), cluster)
    (job_id,) = submit.queue_jobs(conn, req, cluster, "alloc", None, name, owner_pid=os.getpid())
    wake.poke()
    deadline = time.monotonic() + req.immediate if req.immediate > 1 else None
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
            if req.immediate == 1 and job["reason"] != "None":  # the controller could not start it now
                _give_up_at_once(conn, command, job)
                continue
            if deadline is not None and time.monotonic() >= deadline:
                with db.transaction(conn):
                    if transitions.cancel_pending(conn, job_id, time.time()):  # as slurm_complete_job()
                        _give_up(command, TIMED_OUT)
                continue
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


def _give_up_at_once(conn, command: str, job: dict) -> None:
    """``--immediate`` (=1) and the job must wait: FAILED, and why (job_mgr.c's job_allocate());
    returns only when the job started meanwhile."""
    with db.transaction(conn):
        refused = transitions.refuse_immediate(conn, job["id"], time.time())
    if refused:
        reason = job["reason"]
        _give_up(command, DEPENDENCY if reason in _NOT_INDEPENDENT else
                 NOT_TOP_PRIORITY if reason == "Priority" else NODES_BUSY)


def _give_up(command: str, why: str) -> NoReturn:
    """As salloc.c and srun's allocate.c end a refused ``--immediate`` request, exit 1: srun says
    "nodes are busy" for a timeout too; salloc calls a dependency problem a failed submission."""
    if command == "srun" and why == TIMED_OUT:
        why = NODES_BUSY
    immediate = command == "srun" or why in (TIMED_OUT, NODES_BUSY, NOT_TOP_PRIORITY)
    error(command, f"Unable to allocate resources: {why}" if immediate else SUBMIT_FAILED[command].format(why))
    raise SystemExit(1)


def hand_over(name: str, handoff: dict) -> NoReturn:
    """Give the granted allocation to its supervisor, in this same process (its pid, terminal and
    process group, the allocation's owner): exec this command's program again, same argv, so
    ``ps`` still shows it, with ``HPCNB_ALLOCATION_HANDOFF`` naming a descriptor that holds
    ``handoff``; the generated wrapper then enters :func:`hpcnb.localslurm.allocation.main`, which
    runs the command's ``granted(handoff, supervise)``. The supervisor's signals are blocked first
    (a blocked signal stays blocked, and pending, across exec): none sent meanwhile is lost."""
    signal.pthread_sigmask(signal.SIG_BLOCK, procs.SUPERVISOR_SIGNALS)
    fd = os.memfd_create("hpcnb-allocation", 0)  # inherited by the new program, no file anywhere
    with os.fdopen(os.dup(fd), "wb") as fh:
        fh.write(json.dumps(handoff).encode())
    os.lseek(fd, 0, os.SEEK_SET)
    os.environ[HANDOFF] = str(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    program = sys.argv[0]
    if os.path.basename(program) == name and os.access(program, os.X_OK):  # the wrapper (the usual case)
        os.execv(program, sys.argv)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    os.execv(sys.executable, [sys.executable, "-m", "hpcnb.localslurm.allocation", name])
