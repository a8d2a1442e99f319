"""Virtual nodes that are apart: each job step's processes see their node as their own host.

On a real cluster every node has its own hostname, ``/tmp`` and ``/dev/shm`` (Slurm's
``job_container/tmpfs`` gives each job a private ``/tmp`` and ``/dev/shm`` per node, gone when the
job ends). Here all nodes are this machine, so a task started for ``node2`` enters namespaces of its
own first (``unshare(2)``: UTS and mount; a user namespace too when not root): ``hostname`` says
``node2``, and ``/tmp`` and ``/dev/shm`` are the job's private folders on that node. What stands
for the cluster's shared file systems stays shared: the top-level ``/tmp`` folders that hold the
job's working directory or a path in its submission environment (home, venv, the local Slurm's own
state), so a course run from a temporary folder keeps working.

Nothing a job mounts can be undone by it: the mounts are made in one mount namespace and the task
runs in a copy of it owned by a further user namespace (:func:`lock`), where the kernel marks them
locked (``umount2`` fails with EINVAL, as for a job under ``job_container/tmpfs``). The node folders
of the local Slurm's state (every job's ``/tmp``, ``/dev/shm`` and ``SLURM_TMPDIR``) are covered by
an empty tmpfs in a task, which shows only its own job's (its ``srun`` starts the job's tasks on its
other nodes from there). Another job of the same user reaches a job's ``/tmp`` only through
``/proc/PID/root`` of that job's own tasks, where ptrace allows it, as on a cluster.

Each node has its own network too (:mod:`.network`: ``localhost`` on node2 is node2) unless
``HPCNB_NODE_NETWORK=shared``. Where namespaces are not allowed (no unprivileged user namespaces),
or ``HPCNB_NODES=shared``, the nodes share everything, as before; :func:`mode` says which is in
force (``hpcnb slurm status``).
"""
from __future__ import annotations

import functools
import os
import string
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import network, paths
from .namespaces import (CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWUTS, MS_BIND, MS_REC,
                         MS_SLAVE, bind, bind_file, check, cover, lock, map_self, open_dir)

if TYPE_CHECKING:
    from .cluster import Cluster

CAP_SYS_CHROOT = 18  # with CAP_SYS_ADMIN: setns(2) into a locked mount namespace (a task's srun, :func:`lock`)
TMP, SHM = "/tmp", "/dev/shm"
SETTING = "HPCNB_NODES"


class NodeView:
    """What a task started on ``node`` sees: that hostname, ``tmp`` as ``/tmp``, ``keep`` (top-level
    ``/tmp`` folders standing for shared file systems) where they were, ``net``: the node's own
    network, or None for the machine's, ``shm`` as ``/dev/shm`` (None: the machine's), and
    ``hide``: the folder of every job's node folders, covered but for ``own`` (its job's)."""

    __slots__ = ("node", "tmp", "keep", "net", "shm", "hide", "own")

    def __init__(self, node: str, tmp: str, keep: tuple[str, ...] = (), net: network.NodeNet | None = None,
                 shm: str | None = None, hide: str | None = None, own: tuple[str, ...] = ()) -> None:
        self.node, self.tmp, self.keep, self.net, self.shm = node, tmp, keep, net, shm
        self.hide, self.own = hide, own


@functools.cache
def _libc() -> Any:
    """libc through ctypes, loaded once (before a fork, by :func:`mode`)."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def enter(view: NodeView) -> None:
    """In a forked child, before exec: become ``view.node``, with its private ``/tmp`` and ``/dev/shm``,
    in mounts it cannot undo."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if view.net is not None:  # the fabric's user namespace (not when already in it), then the node's network
        if view.net.user and os.readlink("/proc/self/ns/user") != os.readlink(view.net.user):
            _join(libc, view.net.user, CLONE_NEWUSER)
        _join(libc, view.net.net, CLONE_NEWNET)
        check(libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    else:
        check(libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | (CLONE_NEWUSER if uid else 0)), "unshare")
        if uid:
            map_self(uid, gid)
    check(libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
    name = view.node.encode()
    check(libc.sethostname(name, len(name)), "sethostname")
    kept = [(path, open_dir(path)) for path in view.keep if os.path.isdir(path)]
    tmp, shm = open_dir(view.tmp), open_dir(view.shm) if view.shm and os.path.isdir(SHM) else None
    if view.hide and os.path.isdir(view.hide):  # before /tmp is covered: the folder may lie under it
        cover(libc, view.hide, view.own)
    if shm is not None:
        bind(libc, shm, SHM, MS_BIND)
    bind(libc, tmp, TMP, MS_BIND | MS_REC)
    for path, fd in kept:
        os.makedirs(path, mode=0o700, exist_ok=True)  # a mount point in the node's /tmp: private whatever the umask
        bind(libc, fd, path, MS_BIND | MS_REC)
    if view.net is not None:  # the node names at the nodes' own addresses
        for hosts in ("/etc/hosts", view.net.nss_hosts):
            bind_file(libc, view.net.hosts, hosts)
    lock(libc)
    if view.net is not None and view.net.user:
        network.keep_capabilities(libc, (*network.KEPT_CAPS, CAP_SYS_CHROOT))


def _join(libc: Any, path: str, kind: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        check(libc.setns(fd, kind), f"setns {path}")
    finally:
        os.close(fd)


def shared_tops(workdir: str, env: dict[str, str], storage: Iterable[str] = ()) -> tuple[str, ...]:
    """The top-level ``/tmp`` folders that hold ``workdir``, a path named in ``env`` (a job's
    submission environment: ``HOME``, ``PATH``...), the site's shared ``storage`` or the local
    Slurm itself: its state and its Python (the commands' interpreter and hpcnb, e.g. a clone in
    ``/tmp``, which a job that exports nothing still runs). Never ``/tmp`` itself."""
    found = set()
    own = [str(paths.state_dir()), str(paths.node_tmp_root()), sys.prefix, str(Path(__file__).resolve().parents[2])]
    for value in [workdir, *env.values(), *storage, *own]:
        for part in value.split(":"):
            top = _tmp_top(part)
            if top:
                found.add(top)
    return tuple(sorted(found))


def _tmp_top(path: str) -> str | None:
    if not path.startswith(TMP + "/"):
        return None
    first = path[len(TMP) + 1:].split("/", 1)[0]
    return f"{TMP}/{first}" if first not in ("", ".", "..") else None


def private_tmp(job_id: int, node: str) -> Path:
    """The job's ``/tmp`` on ``node`` (beside its ``SLURM_TMPDIR``; removed with it at the job's end)."""
    return paths.node_tmp_root() / node / f"tmp_{job_id}"


def private_shm(job_id: int, node: str) -> Path:
    """The job's ``/dev/shm`` on ``node`` (removed with its ``/tmp`` at the job's end)."""
    return paths.node_tmp_root() / node / f"shm_{job_id}"


def private_folders(job_id: int, node: str) -> tuple[Path, Path]:
    """What :func:`view_for` mounts for the job on ``node``: its ``/tmp`` and its ``/dev/shm``."""
    return private_tmp(job_id, node), private_shm(job_id, node)


def mode() -> str:
    """``apart``, or ``shared: <why>``: whether job steps run on nodes that are apart. Probed once per
    state folder (kept in it as ``nodes-mode``); ``HPCNB_NODES=shared`` turns it off."""
    if os.environ.get(SETTING) == "shared":
        return f"shared: {SETTING}=shared"
    _libc()
    return _probed(str(paths.state_dir()))


@functools.cache
def _probed(state: str) -> str:
    record = Path(state) / "nodes-mode"
    try:
        return record.read_text().strip()
    except OSError:
        found = probe()
    try:  # private (0600) whatever the umask, as everything in the state folder
        with os.fdopen(os.open(record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            fh.write(found + "\n")
    except OSError:
        pass
    return found


def in_use() -> bool:
    """Whether the nodes have networks of their own, or will have once the controller grants a job."""
    return network.running() or (network.wanted() and not network.failure() and mode() == "apart")


def node_addresses(nodes: list[str]) -> dict[str, str]:
    """Each node's address as sinfo's ``%o`` and scontrol's ``NodeAddr`` show it: its own in the nodes'
    network; 127.0.0.1 for every node where they share this machine's."""
    own = in_use()
    return {node: network.address(index)[0] if own else "127.0.0.1" for index, node in enumerate(nodes)}


def probe() -> str:
    """Try :func:`enter` in a throw-away child: ``apart``, or ``shared: <the error>``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            state = str(paths.state_dir())  # a folder that is there, whatever the cwd
            enter(NodeView("probe", state, (), shm=state))
            os._exit(0)
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            os.write(write, str(err).encode()[:500])
            os._exit(1)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        why = fh.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return "apart"
    return f"shared: {why or 'the namespace probe failed'} (no unprivileged user namespaces?)"


def view_for(job: dict, node: str, cluster: Cluster) -> NodeView | None:
    """How a task of ``job`` starts on ``node``: apart (a :class:`NodeView`) or shared (None)."""
    if mode() != "apart":
        return None
    req = job["req"]
    env = req.get("env") or {}
    storage = [string.Template(path).safe_substitute(env) for path in cluster.shared_paths]
    tmp, shm = private_folders(job["id"], node)
    return NodeView(node, str(tmp), shared_tops(req.get("workdir") or "", env, storage), network.node_net(node),
                    str(shm), str(paths.node_tmp_root()), job_folders(job))


def job_folders(job: dict) -> tuple[str, ...]:
    """The node folders of ``job`` on each of its nodes (its ``/tmp``, ``/dev/shm``, ``SLURM_TMPDIR``):
    all that its tasks see of the state's node folders."""
    return tuple(str(folder) for part in job["alloc"]
                 for folder in (*private_folders(job["id"], part["node"]), paths.node_tmpdir(job["id"], part["node"])))

