"""salloc: get an allocation, run a command (default: your shell) in it, then release it."""
from __future__ import annotations

import os
import signal
import sys

from hpcnb.slurm.options import OptionError

from .. import db, envvars, procs
from ..request import SubmitError, UsageError, default_name
from .options import build_request, report
from .interactive import allocate, hand_over

# a command killed by one of these makes salloc exit 0; by any other signal, 1 (salloc.c)
USER_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGKILL)


def _nodelist(job: dict) -> str:
    import hostlist

    return hostlist.collect_hostlist([p["node"] for p in job["alloc"]])


def signal_command(sup, signum: int) -> None:
    """As Slurm's salloc: killpg, to the command's whole process group, so no child is missed."""
    for pid, status in sup.mains.items():
        if status is None:
            try:
                os.killpg(pid, signum)
            except OSError:
                pass


def main(argv: list[str]) -> int:
    try:
        req, rest = build_request("salloc", argv)
        _, job = allocate("salloc", req, default_name(req, None))
    except (OptionError, UsageError, SubmitError) as err:
        return report("salloc", err)
    print(f"salloc: Granted job allocation {job['id']}", file=sys.stderr, flush=True)
    from .common import open_cluster

    _, cluster = open_cluster()
    if cluster.since("24.11"):  # 24.11's salloc waits for the nodes to be ready, and says so
        print(f"salloc: Nodes {_nodelist(job)} are ready for job",
              file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the command, as with Slurm (kept across exec)
    hand_over("salloc", {"job": job["id"], "command": rest or [os.environ.get("SHELL", "/bin/sh")],
                         "kill_command": req.kill_command})


def granted(handoff: dict, supervise) -> int:
    """In the allocation's supervisor (:mod:`hpcnb.localslurm.allocation`): run the command, release."""
    from .common import open_cluster

    conn, cluster = open_cluster()
    job = db.get_job(conn, handoff["job"])
    command, kill_command = handoff["command"], handoff["kill_command"]
    env = {**job["req"]["env"], **envvars.job_vars(job, cluster)}

    def start(sup) -> None:
        pid = procs.spawn(command, env, os.getcwd(), (0, 1, 2), False, error_prefix="salloc", own_group=True)
        sup.mains[pid] = None
        # as Slurm's salloc (_exit_on_signal): a hangup (its terminal closed) goes on to the command's
        # group; salloc then waits for the command and gives the allocation back
        signal.signal(signal.SIGHUP, lambda *_: signal_command(sup, signal.SIGHUP))

    def revoked(sup, outcome) -> None:
        """As Slurm's salloc: say so; the command runs on unless -K/--kill-command asked for a signal."""
        if outcome.state == "TIMEOUT":
            print(f"salloc: Job {job['id']} has exceeded its time limit and its allocation has been revoked.",
                  file=sys.stderr, flush=True)
        else:
            print(f"salloc: Job allocation {job['id']} has been revoked.", file=sys.stderr, flush=True)
        if kill_command is not None:
            signal_command(sup, kill_command or (signal.SIGHUP if os.isatty(0) else signal.SIGTERM))

    outcome, sup = supervise(job, start, on_revoke=revoked)
    for pid in sup.mains:  # the terminal back to salloc's own group
        procs.hand_terminal(0, pid, os.getpgrp())
    if sup.revoked is None:
        print(f"salloc: Relinquishing job allocation {job['id']}", file=sys.stderr, flush=True)
    statuses = [s for s in sup.mains.values() if s is not None]
    status = statuses[0] if statuses else 0
    if os.WIFSIGNALED(status):  # as Slurm's salloc: most likely the user's own signal, then no error
        return 0 if os.WTERMSIG(status) in USER_SIGNALS else 1
    return os.WEXITSTATUS(status)
