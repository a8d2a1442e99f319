"""The supervisor of an interactive allocation: salloc's, or a stand-alone srun's.

Once the allocation is granted, the command hands it over through this entry point
(:func:`hpcnb.localslurm.commands.interactive.hand_over`): the same process execs its program
again, and the generated wrapper comes here instead of to the command. What runs from then on is
daemon code: a :class:`~hpcnb.localslurm.supervisor.Supervisor` for the allocation (its limits, its
revocation, the subreaper of the command's processes) around the command's own ``granted`` part
(salloc's command; srun's step), as ``slurmstepd`` is a program of its own beside ``srun``.
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from . import procs
from .commands import HANDOFF, run_and_exit
from .supervisor import Outcome, Supervisor


def supervise(job: dict, start: Callable[[Supervisor], None],
              on_revoke: Callable[[Supervisor, Outcome], None] | None = None) -> tuple[Outcome, Supervisor]:
    """Run ``start(supervisor)`` (which spawns the processes to wait for) under limits; record the end.
    With ``on_revoke`` (salloc), a cancel or the time limit ends the steps only (see Supervisor)."""
    procs.become_subreaper()
    signal.pthread_sigmask(signal.SIG_BLOCK, procs.SUPERVISOR_SIGNALS)
    sup = Supervisor(job["id"])
    sup.on_revoke = on_revoke
    sup.register()
    sup.err_fd = 2
    start(sup)
    outcome = sup.watch()
    if sup.revoked is None:
        sup.finish(outcome)
    return outcome, sup


def main(name: str) -> NoReturn:
    """The rest of command ``name`` (salloc, srun) after its grant, from the handoff it left."""
    try:
        with os.fdopen(int(os.environ.pop(HANDOFF)), "rb") as fh:
            handoff = json.load(fh)
    except (KeyError, ValueError, OSError, TypeError, OverflowError) as err:  # no such descriptor, or no number
        print(f"{name}: error: no allocation handed over ({HANDOFF}): {err}", file=sys.stderr)
        os._exit(1)
    module = importlib.import_module(f"{__package__}.commands.{name}")
    run_and_exit(name, [], entry=lambda _argv: module.granted(handoff, supervise))


if __name__ == "__main__":  # hand_over's way in where the command was not started by its wrapper
    main(sys.argv[1])
