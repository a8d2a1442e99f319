"""The virtual cluster: nodes and partitions taken from a site profile."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import hostlist

from hpcnb.slurm.times import parse_time


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    gpu_type: str | None
    features: tuple[str, ...]


@dataclass(frozen=True)
class Partition:
    name: str
    max_time: int | None  # seconds; None = INFINITE
    default: bool
    nodes: tuple[str, ...]
    preemptible: bool


@dataclass(frozen=True)
class Cluster:
    profile: str
    name: str
    nodes: dict[str, Node]
    partitions: dict[str, Partition]
    def_mem_per_cpu_mb: int
    kill_wait_s: int
    slurm_tmpdir: bool
    account_required: bool
    account_directive: str | None  # e.g. "--account=def-<PI>" or "--comment=<project>"
    slurm_version: str = "22.05"  # whose behaviour this cluster emulates (hpcnb.sites.SLURM_VERSIONS)

    @property
    def release(self) -> str:
        """The release the emulated version was measured on (``Version=`` of scontrol, sinfo %v)."""
        return RELEASES[self.slurm_version]

    def since(self, version: str) -> bool:
        """This cluster behaves as Slurm ``version`` or later (``cluster.since("23.11")``)."""
        return _version_key(self.slurm_version) >= _version_key(version)

    @property
    def account_option(self) -> str | None:
        """The long option a job must set when the site requires a project ("account", "comment")."""
        if not self.account_directive:
            return None
        return self.account_directive.lstrip("-").split("=", 1)[0].split(" ", 1)[0]

    @property
    def default_partition(self) -> Partition:
        return next(p for p in self.partitions.values() if p.default)


# the real release each emulated version was measured on (ci/real-slurm.sh's lanes)
RELEASES = {"22.05": "22.05.8", "24.11": "24.11.5"}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@lru_cache(maxsize=8)
def load_cluster(profile_name: str = "local", slurm_version: str | None = None) -> Cluster:
    """Build the virtual cluster of a site profile (see :mod:`hpcnb.sites`), behaving as the emulated
    Slurm nearest ``slurm_version`` (default: the profile's; :func:`hpcnb.sites.emulated_version`)."""
    from hpcnb.sites import emulated_version, load_profile

    profile = load_profile(profile_name)
    nodes: dict[str, Node] = {}
    for group in profile.nodes:
        for name in hostlist.expand_hostlist(group.names):
            nodes[name] = Node(name, group.cpus, group.memory_mb, group.gpus, group.gpu_type, tuple(group.features))
    partitions = {}
    for part in profile.partitions:
        names = tuple(hostlist.expand_hostlist(part.nodes)) if part.nodes else tuple(nodes)
        partitions[part.name] = Partition(part.name, parse_time(part.max_time), part.default, names, part.preemptible)
    return Cluster(
        profile=profile.name,
        name=profile.cluster_name,
        nodes=nodes,
        partitions=partitions,
        def_mem_per_cpu_mb=profile.def_mem_per_cpu_mb,
        kill_wait_s=profile.kill_wait_s,
        slurm_tmpdir=profile.slurm_tmpdir,
        account_required=profile.account_required,
        account_directive=profile.account_directive,
        slurm_version=emulated_version(slurm_version or profile.slurm_version),
    )


def wanted_version(profile_name: str) -> str:
    """The emulated Slurm a fresh state takes, for ``HPCNB_SLURM_VERSION`` (any release, "23.11"),
    else for the profile's ``slurm_version`` (:func:`hpcnb.sites.emulated_version`)."""
    from hpcnb.sites import SLURM_VERSION_ENV, SLURM_VERSIONS, ProfileError, emulated_version, load_profile

    wanted = os.environ.get(SLURM_VERSION_ENV)
    if not wanted:
        return emulated_version(load_profile(profile_name).slurm_version)
    try:
        return emulated_version(wanted)
    except ValueError as err:
        known = ", ".join(SLURM_VERSIONS)
        raise ProfileError(f"{SLURM_VERSION_ENV}={wanted!r}: {err} (the local Slurm emulates Slurm {known}). "
                           f"Fix: set it to a Slurm release such as 24.11, or unset it (the profile's slurm_version).",
                           field=SLURM_VERSION_ENV, fix="set it to a Slurm release such as 24.11") from None


def state_cluster(conn: Any) -> Cluster:
    """The cluster a local Slurm state is for. Its profile (``HPCNB_PROFILE``, else "local") and
    Slurm version (:func:`wanted_version`) are fixed the first time the state is used, so every
    command, the controller and the jobs agree; ``hpcnb slurm reset`` starts afresh."""
    from . import db

    profile, version = db.get_meta(conn, "profile"), db.get_meta(conn, "slurm_version")
    if profile is None or version is None:
        with db.transaction(conn):
            if db.get_meta(conn, "profile") is None:
                db.set_meta(conn, "profile", os.environ.get("HPCNB_PROFILE") or "local")
            profile = db.get_meta(conn, "profile") or "local"
            if db.get_meta(conn, "slurm_version") is None:
                db.set_meta(conn, "slurm_version", wanted_version(profile))
            version = db.get_meta(conn, "slurm_version")
    return load_cluster(profile, version)
