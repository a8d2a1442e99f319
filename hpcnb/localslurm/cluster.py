"""The virtual cluster: nodes and partitions taken from a site profile.

Named tuples, not dataclasses: every command loads this module, and ``dataclasses`` (with the
``inspect`` it imports) would be a third of a query command's imports."""
from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any, NamedTuple

import hostlist

from hpcnb.slurm.times import parse_time


class Node(NamedTuple):
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    gpu_type: str | None
    features: tuple[str, ...]

    @property
    def gres(self) -> str:
        """The node's GPUs as ``scontrol show node`` (Gres=) and ``sinfo %G`` write them: ``gpu:v100:2``."""
        if not self.gpus:
            return "(null)"
        return f"gpu:{self.gpu_type}:{self.gpus}" if self.gpu_type else f"gpu:{self.gpus}"


class Partition(NamedTuple):
    name: str
    max_time: int | None  # seconds; None = INFINITE
    default: bool
    nodes: tuple[str, ...]
    preemptible: bool
    default_time: int | None = None  # seconds a job without --time gets; None = max_time
    max_nodes: int | None = None  # None = UNLIMITED


class Cluster(NamedTuple):
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
    shared_paths: tuple[str, ...] = ()  # the profile's shared storage ("/tmp/hpcnb-$USER/scratch"): on every node
    accounts: tuple[str, ...] = ()  # enforced accounts, the first the default; () = any account, none checked

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
    def default_account(self) -> str | None:
        """The account a job without --account runs under where accounts are enforced."""
        return self.accounts[0] if self.accounts else None

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
        default_time = parse_time(part.default_time) if part.default_time else None
        partitions[part.name] = Partition(part.name, parse_time(part.max_time), part.default, names, part.preemptible,
                                          default_time, part.max_nodes)
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
        shared_paths=tuple(tier.path for tier in profile.storage if tier.path and not tier.node_local),
        accounts=profile.accounts,
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
    return cached_cluster(profile, version)


_SEEN: dict[tuple[str, str], Cluster] = {}  # this process's, as load_cluster's lru_cache
CACHE_FORMAT = 3  # bump when Cluster, Node or Partition change


def cached_cluster(profile: str, version: str) -> Cluster:
    """:func:`load_cluster` through a copy in the state directory (``cluster.json``), valid while the
    profile's file keeps its size and mtime: a command then neither imports :mod:`hpcnb.sites` nor
    parses TOML. A profile given as a relative path (its file depends on the cwd) is never cached."""
    from . import paths

    if (profile, version) in _SEEN:
        return _SEEN[(profile, version)]
    if not os.path.isabs(profile) and (os.sep in profile or profile.endswith(".toml")):
        return load_cluster(profile, version)
    cache = paths.state_dir() / "cluster.json"
    key = {"format": CACHE_FORMAT, "profile": profile, "version": version}
    cluster = _read_cache(cache, key)
    if cluster is None:
        from hpcnb.sites import _resolve  # the file load_profile reads for this name or path

        file = str(_resolve(profile))
        file_key = _file_key(file)  # before reading it: a change while we read makes the next miss
        cluster = load_cluster(profile, version)
        _write_cache(cache, {"key": key, "file": file, "file_key": file_key}, cluster)
    _SEEN[(profile, version)] = cluster
    return cluster


def _file_key(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def _read_cache(cache: os.PathLike[str], key: dict[str, Any]) -> Cluster | None:
    """The cached cluster, if it was made for ``key`` from the profile file as it is now."""
    try:
        with open(cache, encoding="utf-8") as fh:
            data = json.load(fh)
        if data["key"] != key or data["file_key"] != _file_key(data["file"]):
            return None
        fields = data["cluster"]
        nodes = {n["name"]: Node(**{**n, "features": tuple(n["features"])}) for n in fields.pop("nodes")}
        parts = {p["name"]: Partition(**{**p, "nodes": tuple(p["nodes"])}) for p in fields.pop("partitions")}
        return Cluster(**{**fields, "shared_paths": tuple(fields["shared_paths"]), "accounts": tuple(fields["accounts"])},
                       nodes=nodes, partitions=parts)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # absent, damaged or from another release: rebuilt from the profile


def _write_cache(cache: os.PathLike[str], header: dict[str, Any], cluster: Cluster) -> None:
    fields = cluster._asdict()
    fields["nodes"] = [n._asdict() for n in cluster.nodes.values()]
    fields["partitions"] = [p._asdict() for p in cluster.partitions.values()]
    data = {**header, "cluster": fields}
    tmp = f"{cache}.{os.getpid()}.tmp"  # concurrent writers never share it
    try:  # private (0600) whatever the umask, as everything in the state dir
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, cache)
    except OSError:
        pass  # a full disk, say: the next command builds it again
