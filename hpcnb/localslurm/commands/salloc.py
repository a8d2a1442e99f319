"""salloc: get an allocation, run a command (default: your shell) in it, then release it."""
from __future__ import annotations

import os
import signal
import sys

from hpcnb.slurm_options import OptionError

from .. import envvars, procs
from ..request import SubmitError, UsageError, default_name
from .common import build_request, report
from .interactive import allocate, supervise


def main(argv: list[str]) -> int:
    try:
        req, rest = build_request("salloc", argv)
        conn, job = allocate("salloc", req, default_name(req, None))
    except (OptionError, UsageError, SubmitError) as err:
        return report("salloc", err)
    print(f"salloc: Granted job allocation {job['id']}", file=sys.stderr, flush=True)
    command = rest or [os.environ.get("SHELL", "/bin/sh")]
    from .common import open_cluster

    _, cluster = open_cluster()
    env = {**job["req"]["env"], **envvars.job_vars(job, cluster)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the command, as with Slurm

    def start(sup) -> None:
        sup.mains[procs.spawn(command, env, os.getcwd(), (0, 1, 2), False, error_prefix="salloc")] = None

    outcome, _ = supervise(job, start)
    if outcome.state == "TIMEOUT":
        print(f"salloc: Job {job['id']} has exceeded its time limit and its allocation has been revoked.",
              file=sys.stderr)
    print(f"salloc: Relinquishing job allocation {job['id']}", file=sys.stderr, flush=True)
    if outcome.exit_signal:
        return 128 + outcome.exit_signal
    return outcome.exit_code
