"""The virtual cluster: nodes and partitions taken from a site profile."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import hostlist


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

    @property
    def account_option(self) -> str | None:
        """The long option a job must set when the site requires a project ("account", "comment")."""
        if not self.account_directive:
            return None
        return self.account_directive.lstrip("-").split("=", 1)[0].split(" ", 1)[0]

    @property
    def default_partition(self) -> Partition:
        return next(p for p in self.partitions.values() if p.default)


def _seconds(text: str) -> int | None:
    from hpcnb.slurm_options import parse_slurm_time

    return parse_slurm_time(text)


@lru_cache(maxsize=8)
def load_cluster(profile_name: str = "local") -> Cluster:
    """Build the virtual cluster of a site profile (see :mod:`hpcnb.sites`)."""
    from hpcnb.sites import load_profile

    profile = load_profile(profile_name)
    nodes: dict[str, Node] = {}
    for group in profile.nodes:
        for name in hostlist.expand_hostlist(group.names):
            nodes[name] = Node(name, group.cpus, group.memory_mb, group.gpus, group.gpu_type, tuple(group.features))
    partitions = {}
    for part in profile.partitions:
        names = tuple(hostlist.expand_hostlist(part.nodes)) if part.nodes else tuple(nodes)
        partitions[part.name] = Partition(part.name, _seconds(part.max_time), part.default, names, part.preemptible)
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
    )
