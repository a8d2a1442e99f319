"""Where the local Slurm keeps its state: one private directory per user (0700)."""
from __future__ import annotations

import os
from pathlib import Path

_create = True  # False in the controller: a state directory removed under it is never made again


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
    if not path.is_dir():
        if not _create:
            raise FileNotFoundError(f"the state directory {path} was removed")
        old = os.umask(0o077)
        try:
            path.mkdir(parents=True, exist_ok=True)
        finally:
            os.umask(old)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def db_path() -> Path:
    return state_dir() / "slurm.db"


def socket_path() -> Path:
    return state_dir() / "controller.sock"


def lock_path() -> Path:
    return state_dir() / "controller.lock"


def log_path() -> Path:
    return state_dir() / "controller.log"


def job_dir(job_id: int) -> Path:
    """Private per-job folder holding the stored batch script."""
    root = state_dir() / "jobs"
    if not root.is_dir():
        root.mkdir(mode=0o700, exist_ok=True)
    elif root.stat().st_mode & 0o077:
        root.chmod(0o700)  # made by an older version with the umask's mode
    path = root / str(job_id)
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def node_tmp_root() -> Path:
    """Root of the virtual nodes' local disks (SLURM_TMPDIR lives below it)."""
    base = os.environ.get("HPCNB_NODE_TMP") or str(state_dir() / "nodes")
    return Path(base)
