"""How commands reach the controller: is one running, wake it, start it when jobs need it.

Every command calls these, so they stay cheap: only starting a controller imports :mod:`.controller`
(which re-exports them).
"""
from __future__ import annotations

import fcntl
import os
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
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
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
        from .controller import start_controller

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
        from .controller import start_controller

        start_controller()
