"""A limit on a whole sandbox's memory and processes: a cgroup of its own, where one can be made.

:func:`enter` moves the calling process (the sandbox's launcher, before it becomes bwrap) into a new
cgroup below its own, with ``memory_bytes`` of memory (its tmpfs pages included: they are charged
to the cgroup that wrote them; no swap) and ``processes`` processes for all its descendants together.
It uses cgroup v2 when the ``memory`` and ``pids`` controllers are delegated to the caller's cgroup,
else the v1 ``memory`` and ``pids`` hierarchies when writable (as root). Where neither works it
returns False, and the sandbox keeps only its per-process limits (:class:`hpcnb.course.sandbox.Limits`).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

MOUNT = Path("/sys/fs/cgroup")
PREFIX = "hpcnb-sandbox-"

__all__ = ["PREFIX", "available", "enter", "remove"]


def _own_paths() -> dict[str, str]:
    """{controller name, or "" for cgroup v2: this process's cgroup path}."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else [""]:
            paths[name] = path.lstrip("/")
    return paths


def _v2_folder(own: dict[str, str]) -> Path | None:
    mount = MOUNT if (MOUNT / "cgroup.controllers").exists() else MOUNT / "unified"
    folder = mount / own.get("", "-")
    try:
        if {"memory", "pids"} - set((folder / "cgroup.subtree_control").read_text().split()):
            return None
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def _plan(memory_bytes: int, processes: int) -> list[tuple[Path, dict[str, int]]]:
    """[(parent folder, {limit file: value})]: where the sandbox's cgroups go; [] if nowhere."""
    own = _own_paths()
    v2 = _v2_folder(own)
    if v2 is not None:
        return [(v2, {"memory.max": memory_bytes, "memory.swap.max": 0, "pids.max": processes})]
    if "memory" not in own or "pids" not in own:
        return []
    plan = [(MOUNT / "memory" / own["memory"], {"memory.limit_in_bytes": memory_bytes,
                                                "memory.memsw.limit_in_bytes": memory_bytes}),
            (MOUNT / "pids" / own["pids"], {"pids.max": processes})]
    return plan if all(os.access(folder, os.W_OK) for folder, _ in plan) else []


def available() -> bool:
    """Can a sandbox's cgroup be made here (else its limits are per process only)?"""
    try:
        return bool(_plan(1, 1))
    except OSError:
        return False


def enter(name: str, memory_bytes: int, processes: int) -> bool:
    """Move this process into new cgroup(s) ``name`` with these limits; False where none can be made."""
    plan = _plan(memory_bytes, processes)
    made: list[Path] = []
    try:
        for parent, limits in plan:
            _sweep(parent)
            folder = parent / name
            folder.mkdir()
            made.append(folder)
            for file, value in limits.items():
                if (folder / file).exists():  # memsw / swap accounting may be off
                    (folder / file).write_text(str(value))
        for folder in made:
            (folder / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        for parent, _ in plan:  # back where it was, then undo
            try:
                (parent / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                pass
        for folder in made:
            _rmdir(folder)
        return False
    return bool(plan)


def _rmdir(folder: Path) -> bool:
    try:
        folder.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:  # still in use
        return False


def _sweep(parent: Path) -> None:
    """Remove cgroups of sandboxes that ended (those in use refuse)."""
    for folder in parent.glob(f"{PREFIX}*"):
        _rmdir(folder)


def remove(name: str, within: float = 5.0) -> None:
    """Remove the cgroup(s) ``name`` once their processes have gone (waits up to ``within`` s)."""
    try:
        folders = [parent / name for parent, _ in _plan(0, 0)]
    except OSError:
        return
    deadline = time.monotonic() + within
    while not all(_rmdir(folder) for folder in folders) and time.monotonic() < deadline:
        time.sleep(0.05)
