"""The controller's client half: is one running, wake it, start it when jobs need it, its log.

Every command calls these, so they stay cheap: they never import :mod:`.controller` (the daemon);
the daemon and its supervisors import this module, never the other way round.
"""
from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from . import paths


@contextmanager
def socket_address() -> Iterator[str]:
    """The controller socket's address. A state directory too deep for AF_UNIX's 108 bytes is
    reached through /proc/self/fd (a descriptor of the directory), so any path works."""
    path = str(paths.socket_path())
    if len(os.fsencode(path)) < 100:
        yield path
        return
    fd = os.open(paths.state_dir(), os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{paths.socket_path().name}"
    finally:
        os.close(fd)


def poke(start: bool = True) -> bool:
    """Wake the controller; start it if it is not running (and ``start``). True if one was reached."""
    import _socket  # the C module: ``socket`` itself costs every command ~5 ms to import

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
    try:
        with socket_address() as address:
            sock.sendto(b"w", address)
        return True
    except (FileNotFoundError, ConnectionRefusedError):
        pass
    except BlockingIOError:
        return True  # its queue is full of wake-ups already
    finally:
        sock.close()
    if start:
        start_controller()
    return False


def is_running() -> bool:
    """Does a controller hold the lock? (Free after a crash or kill: flock dies with its process.)"""
    try:
        fd = os.open(paths.lock_path(), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def ensure_running() -> None:
    """Start the controller if it is not running and some job still needs it (pending or running)."""
    if is_running():
        return
    from . import db

    conn = db.connect()
    try:
        busy = conn.execute(
            "SELECT 1 FROM jobs WHERE state='RUNNING' OR (state='PENDING' AND held=0) LIMIT 1"
        ).fetchone()  # held jobs wait for `scontrol release`, which wakes a controller itself
    finally:
        conn.close()
    if busy:
        start_controller()


_PACKAGE_HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_controller() -> None:
    """Start a controller (``python -m hpcnb.localslurm.controller``), detached, logging to its log.

    It runs in the folder that holds this copy of hpcnb, which ``-m`` puts first on its path: the
    controller is the same code as the command that started it, even where another copy is installed."""
    import subprocess

    fd = os.open(paths.log_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        subprocess.Popen(
            [sys.executable, "-m", "hpcnb.localslurm.controller"], cwd=_PACKAGE_HOME,
            stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True, close_fds=True,
            env={**_outside_any_job(os.environ), "HPCNB_STATE_DIR": str(paths.state_dir())},
        )
    finally:
        os.close(fd)


def _outside_any_job(env: os._Environ | dict[str, str]) -> dict[str, str]:
    """The environment without a job's variables: a controller started by a command inside job N
    must not carry SLURM_JOB_ID=N (NODE_FAIL cleanup of job N finds processes by it), and neither
    must the supervisors it forks."""
    from hpcnb.slurm.options import JOB_VARIABLE_PREFIXES

    return {k: v for k, v in env.items() if not k.startswith(JOB_VARIABLE_PREFIXES)}


def running_pid() -> int | None:
    """The controller's pid, if one runs."""
    if not is_running():
        return None
    try:
        with open(paths.lock_path()) as fh:
            pid = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return None
    from . import procs

    return pid if procs.alive(pid, None) else None


def log(text: str) -> None:
    """One line in the controller's log (private, 0600)."""
    try:
        fd = os.open(paths.log_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {text}\n")
    except OSError:
        pass
