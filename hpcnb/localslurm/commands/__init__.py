"""The local Slurm's commands. Each module has ``main(argv) -> int``; errors print like Slurm's."""
from __future__ import annotations

import importlib
import os
import sqlite3
import sys
from collections.abc import Callable
from typing import NoReturn

from .. import settings
from ..db import StateError, state_error
from ..wake import ensure_running

COMMANDS = ("sbatch", "srun", "salloc", "squeue", "sacct", "scancel", "scontrol", "sinfo")
# set while salloc or a stand-alone srun hands its granted allocation to its supervisor
# (interactive.hand_over): the wrapper then enters hpcnb.localslurm.allocation, not the command
HANDOFF = "HPCNB_ALLOCATION_HANDOFF"


def run(name: str, argv: list[str], entry: Callable[[list[str]], int] | None = None) -> int:
    """Run one command (its module's ``main``, or ``entry``); a damaged state file or an interrupt
    gives a clear message, never a traceback."""
    for stream in (sys.stdout, sys.stderr):
        # names and paths may hold bytes that are not UTF-8: print them back as they came; and
        # one write per line, as Slurm's own logging does: an unbuffered print() (PYTHONUNBUFFERED)
        # writes the text and its newline apart, and another process writing into the same job
        # output file between the two splits the line (an extra empty line, a merged line)
        try:
            stream.reconfigure(errors="surrogateescape", line_buffering=True, write_through=False)
        except (AttributeError, ValueError):
            pass
    from ..procs import own_file_limits

    own_file_limits()
    if HANDOFF in os.environ:  # a wrapper written before the handover existed would allocate again
        print(f"{name}: error: the local Slurm's commands are out of date: run `hpcnb slurm-path`", file=sys.stderr)
        return 1
    try:
        settings.check()
        code = (entry or importlib.import_module(f"{__name__}.{name}").main)(argv)
        sys.stdout.flush()  # here, not at exit: a reader that left is a broken pipe caught below
        _restart_controller_if_needed()
        return code
    except (StateError, settings.SettingError) as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 1
    except sqlite3.Error as err:
        print(f"{name}: error: {state_error(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return end_on_broken_pipe()
    except OSError as err:  # a full or read-only disk, say: one clear line, never a traceback
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        print(f"{name}: error: {err.strerror or err}{where}", file=sys.stderr)
        return 1
    except Exception as err:
        if not _profile_error(err):
            raise
        print(f"{name}: error: {err}", file=sys.stderr)  # a bad HPCNB_PROFILE or HPCNB_SLURM_VERSION
        return 1


def run_and_exit(name: str, argv: list[str], entry: Callable[[list[str]], int] | None = None) -> NoReturn:
    """A command's process from start to end (the generated wrappers call this): :func:`run`, then
    leave at once, as a C program does. Python's own shutdown (tearing down every module) would
    cost each command another ~5 ms; nothing is lost, since every file is closed by then and the
    only threads left are daemons."""
    code = run(name, argv, entry)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        end_on_broken_pipe()
    os._exit(code if isinstance(code, int) else 1)


def end_on_broken_pipe() -> int:
    """The reader of our output left (``scontrol show hostnames | head -n 1``): end as Slurm's C
    commands do, killed by SIGPIPE without a word (141 in a shell), not with Python's complaint."""
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush at exit
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    return 141  # not reached


def _profile_error(err: Exception) -> bool:
    """Is ``err`` a :class:`hpcnb.sites.ProfileError`? Only a command that read a profile can raise
    one, so a command that did not (a cached cluster) never imports hpcnb.sites for the question."""
    sites = sys.modules.get("hpcnb.sites")
    return sites is not None and isinstance(err, sites.ProfileError)


def _restart_controller_if_needed() -> None:
    """Any command brings a killed controller back when jobs still need it (pending or running)."""
    try:
        ensure_running()
    except (StateError, sqlite3.Error, OSError):
        pass  # the command itself succeeded; the next one will try again


def error(command: str, *lines: str) -> None:
    for line in lines:
        print(f"{command}: error: {line}", file=sys.stderr)
