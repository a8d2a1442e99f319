"""Where the local Slurm keeps its state: one private directory per user (0700)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

_create = True  # False in the controller: a state directory removed under it is never made again
_trusted: set[Path] = set()  # state directories this process has checked (see _check_trusted)


class StateDirError(PermissionError):
    """The state directory cannot be used: another user owns or can write it (or a folder above
    it), or it cannot be read. The message says which folder and what to do."""


def never_create() -> None:
    """From now on a missing state directory raises FileNotFoundError instead of being created
    (the controller and its supervisors: they serve one state, and leave when it is removed)."""
    global _create
    _create = False


def state_dir() -> Path:
    """The state directory, created private on first use (override: ``HPCNB_STATE_DIR``)."""
    env = os.environ.get("HPCNB_STATE_DIR")
    if env:
        path = Path(env)
    else:
        import platformdirs

        path = Path(platformdirs.user_state_dir("hpcnb")) / "slurm"
    try:
        if not path.is_dir():
            if not _create:
                raise FileNotFoundError(f"the state directory {path} was removed")
            old = os.umask(0o077)
            try:
                path.mkdir(parents=True, exist_ok=True)
            finally:
                os.umask(old)
        _check_trusted(path)
        if path.stat().st_mode & 0o077:
            path.chmod(0o700)
    except (StateDirError, FileNotFoundError):
        raise
    except OSError as err:  # a folder on the way that this user cannot enter, say
        raise StateDirError(f"cannot use the local Slurm's state directory {path}: "
                            f"{err.strerror or err} ({err.filename or path})") from err
    return path


MAX_LINKS = 40  # as the kernel's path walk (ELOOP past it)


def _check_trusted(path: Path) -> None:
    """Refuse a state directory that another user owns or can write, or below a folder that another
    user (not root) owns or can write without the sticky bit, or reached through a symbolic link
    another user owns: they could swap in a job script that this user (root, even) would then run.
    The path is walked as the kernel walks it, link by link (as OpenSSH's ``safe_path``), each
    folder and each link judged where it is met; checked once per process."""
    given = Path(os.path.abspath(path))
    if given in _trusted:
        return
    me = os.getuid()
    trusted = {me, 0, *_unnamed_owner()}
    here, pending, links = Path("/"), list(given.parts[1:]), 0
    _judge(path, here, os.lstat(here), not pending, me, trusted)
    while pending:
        part = pending.pop(0)
        if part in (".", ".."):
            here = here.parent if part == ".." else here  # ``here`` holds no link: its parent is physical
            continue
        step = here / part
        info = os.lstat(step)
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if info.st_uid not in trusted or links > MAX_LINKS:
                why = (f"is owned by uid {info.st_uid}, neither you (uid {me}) nor root" if info.st_uid not in trusted
                       else f"is one of more than {MAX_LINKS} links in a row")
                raise _refusal(path, f"the symbolic link {step} on its way", why)
            target = Path(os.readlink(step))
            here = Path("/") if target.is_absolute() else here
            pending = [*target.parts[1 if target.is_absolute() else 0:], *pending]
            continue
        _judge(path, step, info, not pending, me, trusted)
        here = step
    _trusted.add(given)


def _judge(path: Path, folder: Path, info: os.stat_result, last: bool, me: int, trusted: set[int]) -> None:
    """One folder on the state directory's way (``last``: the state directory itself)."""
    if last and info.st_uid != me:
        why = f"is owned by uid {info.st_uid}, not by you (uid {me})"
    elif info.st_uid not in trusted:
        why = f"is owned by uid {info.st_uid}, neither you (uid {me}) nor root"
    elif info.st_mode & 0o022 and (last or not info.st_mode & stat.S_ISVTX):
        why = f"can be written by {'every user' if info.st_mode & 0o002 else 'its group'}"
    else:
        return
    raise _refusal(path, "the state directory" if last else f"its parent folder {folder}", why)


def _refusal(path: Path, where: str, why: str) -> StateDirError:
    return StateDirError(
        f"the local Slurm refuses its state directory {path}: {where} {why}, so another user could "
        "change your jobs. Use a folder of your own (HPCNB_STATE_DIR), or fix the owner and mode.")


def _unnamed_owner() -> tuple[int, ...]:
    """Inside a user namespace that maps only this user (a job's task on a virtual node that is apart,
    :mod:`.apart`), root and every other owner show as the overflow uid: the folders above the state
    were checked outside, where the job was submitted, so that uid is taken as root here."""
    try:
        with open("/proc/self/uid_map") as fh:
            if fh.read().split() == ["0", "0", "4294967295"]:
                return ()  # the initial namespace: every owner is named
        with open("/proc/sys/kernel/overflowuid") as fh:
            return (int(fh.read()),)
    except (OSError, ValueError):
        return ()


def db_path() -> Path:
    return state_dir() / "slurm.db"


def socket_path() -> Path:
    return state_dir() / "controller.sock"


CONTROLLER_LOCK = "controller.lock"  # held by the running controller (flock)


def lock_path() -> Path:
    return state_dir() / CONTROLLER_LOCK


def log_path() -> Path:
    return state_dir() / "controller.log"


def job_dir(job_id: int) -> Path:
    """Private per-job folder holding the stored batch script."""
    root = state_dir() / "jobs"
    if not root.is_dir():
        root.mkdir(mode=0o700, exist_ok=True)
    elif root.stat().st_uid != os.getuid():
        raise StateDirError(f"the local Slurm refuses {root}: it is owned by uid {root.stat().st_uid}, not by you")
    elif root.stat().st_mode & 0o077:
        root.chmod(0o700)  # made by an older version with the umask's mode
    path = root / str(job_id)
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def node_tmp_root() -> Path:
    """Root of the virtual nodes' local disks (SLURM_TMPDIR lives below it)."""
    base = os.environ.get("HPCNB_NODE_TMP") or str(state_dir() / "nodes")
    return Path(base)


def node_tmpdir(job_id: int, node: str) -> Path:
    """A job's ``SLURM_TMPDIR`` on ``node`` (made by its supervisor, removed at the job's end)."""
    return node_tmp_root() / node / f"job_{job_id}"


def hosts_path(state: Path | None = None) -> Path:
    """The hosts file naming the virtual nodes for nss_wrapper (:mod:`.names`), as the login node
    resolves them (in a task of the nodes' own network, their hosts file is mounted over it)."""
    return (state or state_dir()) / "hosts"


def write_private(path: Path, text: str) -> None:
    """Write a file of the state directory whole (rename), private under any umask; commands
    writing it together each rename their own."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
        fh.write(text)
    tmp.chmod(0o600)  # one left by an older version, under a loose umask
    try:
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
