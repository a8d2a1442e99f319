"""Linux namespaces, the bricks of the local Slurm's nodes (:mod:`.apart`, :mod:`.network`): a
checked libc call, oneself mapped in a new user namespace, folders bound and covered, and mounts
locked: moved into a copy of the mount namespace owned by a further user namespace, where the kernel
refuses to undo them (mount_namespaces(7)), whatever capabilities a process there holds."""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from . import paths

CLONE_NEWNS, CLONE_NEWUTS = 0x00020000, 0x04000000
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
MS_BIND, MS_REC, MS_SLAVE = 0x1000, 0x4000, 0x80000


def check(rc: int, what: str) -> None:
    if rc != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def map_self(uid: int, gid: int) -> None:
    """In a new user namespace: the same uid and gid as outside (a task there is not root)."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def open_dir(path: str) -> int:
    """A folder held by an ``O_PATH`` descriptor (closed at exec): bound from there once its path is covered."""
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def bind(libc: Any, fd: int, target: str, flags: int) -> None:
    """Bind the folder held by ``fd`` on ``target``."""
    check(libc.mount(f"/proc/self/fd/{fd}".encode(), target.encode(), None, flags, None), f"mount on {target}")
    os.close(fd)


def bind_file(libc: Any, source: str, target: str, tries: int = 100) -> None:
    """Bind the file ``source`` on ``target``, if ``target`` exists. A file renamed over ``target``
    meanwhile (the gateway rewrites the login side's hosts file whole) makes mount(2) fail with
    ENOENT, the old file being gone: look again."""
    import ctypes
    import errno

    for _ in range(tries):
        if not os.path.isfile(target) or libc.mount(source.encode(), target.encode(), None, MS_BIND, None) == 0:
            return
        if ctypes.get_errno() != errno.ENOENT:
            break
    check(-1, f"mount {target}")


def cover(libc: Any, folder: str, shown: Iterable[str] = ()) -> None:
    """Cover ``folder`` with an empty private tmpfs, then show again those of ``shown`` below it that exist."""
    held = [(path, open_dir(path)) for path in shown if os.path.isdir(path) and below(path, folder)]
    check(libc.mount(b"tmpfs", folder.encode(), b"tmpfs", 0, b"mode=0700,size=64k"), f"mount tmpfs on {folder}")
    for path, fd in held:
        os.makedirs(path, mode=0o700, exist_ok=True)
        bind(libc, fd, path, MS_BIND | MS_REC)


def hide_node_folders(libc: Any) -> None:
    """Cover the node folders of every job (made here if missing) in a mount namespace of this
    process's own that it cannot undo: the nodes' network holders, open to the jobs through
    ``/proc/PID/root``, show none of them."""
    root = paths.node_tmp_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
    cover(libc, str(root))
    lock(libc)


def below(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder and path != folder


def lock(libc: Any) -> None:
    """Move into a copy of this mount namespace owned by a new user namespace (made by a helper child):
    the kernel locks every mount there (mount_namespaces(7)), so neither this process nor anything it
    starts can unmount them, whatever capabilities it holds. Its user namespace stays what it was."""
    import socket

    uid, gid = os.getuid(), os.getgid()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            ours.close()
            check(libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
            map_self(uid, gid)
            check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            socket.send_fds(theirs, [b"k"], [os.open("/proc/self/ns/mnt", os.O_RDONLY)])
            status = 0
        except BaseException as err:  # noqa: BLE001 - told to the parent
            theirs.sendall(str(err).encode()[:300])
        finally:
            os._exit(status)
    theirs.close()
    try:
        said, fds, _, _ = socket.recv_fds(ours, 300, 1)
    finally:
        ours.close()
        os.waitpid(pid, 0)
    if not fds:
        raise OSError(f"locking the mounts: {said.decode(errors='replace') or 'the helper died'}")
    try:
        check(libc.setns(fds[0], CLONE_NEWNS), "setns (the locked mounts)")
    finally:
        os.close(fds[0])
