"""Site profiles: what each cluster in the course looks like, and how the local Slurm emulates it.

A profile is a TOML file in this directory (``local.toml``, ``narval.toml``, ...). It records
facts taken from the course's source guides (login hosts, storage tiers and quotas, partitions,
GPU types, how to ask for GPUs and accounts, site rules, modules, how Jupyter runs) plus a tiny
``nodes`` section: the virtual nodes the embedded local Slurm uses when it emulates that site.
Where a guide is silent the field is left out (``None``) or empty, never guessed.

Files are validated when loaded; every problem raises :class:`ProfileError` whose message names
the file, the field and the fix::

    >>> from hpcnb.sites import load_profile, compare
    >>> p = load_profile("narval")
    >>> p.tier("scratch").purged
    'regular cleanup of files older than 60 days'
    >>> rows = compare(["narval", "ulysses"], "storage")

TOML layout: top-level keys plus ``[[storage]]``, ``[[partitions]]``, ``[[nodes]]``,
``[[gpu_types]]``, ``[[rules]]`` and ``[modules]``. TOML has no null: leave an optional key out
to mean "none / not given". Quotas may be integers or strings: bytes use binary units
(``"50G"`` = 50 * 2**30; K, M, G, T, P, optionally followed by ``B`` or ``iB``), file counts use
decimal units (``"500k"`` = 500_000, ``"1M"`` = 10**6). ``slurm_version`` is the Slurm release the
site runs ("24.05"; ``guide_slurm_version`` the guide's, where it differs); :func:`emulated_version`
says which of the local Slurm's versions stands in for it.
"""
from __future__ import annotations

import difflib
import os
import re
import string
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import hostlist

from hpcnb.slurm import sizes
from hpcnb.slurm.times import TIME_FORMATS, parse_time

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "ProfileError", "StorageTier", "Partition", "NodeGroup", "GpuType", "Rule", "Profile",
    "list_profiles", "load_profile", "compare",
    "parse_time_limit", "parse_bytes", "parse_file_count", "expand_hostlist",
    "SITES_DIR", "ENV_VAR", "SLURM_VERSIONS", "SLURM_VERSION_ENV", "DEFAULT_SLURM_VERSION",
    "parse_slurm_version", "emulated_version",
]

SITES_DIR = Path(__file__).resolve().parent
ENV_VAR = "HPCNB_PROFILE"
#: The Slurm versions whose behaviour the local Slurm emulates (each proven against a real one).
SLURM_VERSIONS = ("22.05", "24.11")
#: Overrides a profile's ``slurm_version`` (read when the local Slurm's state is made).
SLURM_VERSION_ENV = "HPCNB_SLURM_VERSION"
#: A profile that does not say which Slurm its site runs gets the one most sites run today.
DEFAULT_SLURM_VERSION = "24.11"
HOME_KINDS = ("data", "venv", "cache")


_RELEASE_RE = re.compile(r"^(\d{2})\.(0[1-9]|1[0-2])$")
#: srun does not inherit --cpus-per-task from the job from this release (22.05) until that one (23.11).
_NO_CPUS_INHERITANCE = ((22, 5), (23, 11))


def parse_slurm_version(text: str) -> tuple[int, int]:
    """(year, month) of a Slurm major release written "YY.MM" ("24.05"); ValueError otherwise."""
    m = _RELEASE_RE.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r} is not a Slurm release: write its major version as YY.MM, e.g. \"24.05\"")
    return int(m.group(1)), int(m.group(2))


def emulated_version(version: str) -> str:
    """Which emulated Slurm (one of :data:`SLURM_VERSIONS`) stands in for a site's Slurm ``version``.

    The two behave most differently in what a job step gets: 22.05 to 23.02 are the only releases
    whose ``srun`` does not inherit ``--cpus-per-task`` from the job (22.05 stopped it, 23.11 brought
    it back), so those map to "22.05" and every other release, older or newer, to "24.11". The rest
    follows the chosen one: a 23.11 or 24.05 site gets 24.11's environment (``SLURM_TRES_PER_TASK``
    and ``--external-launcher`` arrived in 23.11, as the inheritance did) and 24.11's command outputs;
    a site older than 22.05 gets 24.11's step CPUs but variables and outputs newer than its own.
    ``hpcnb.localslurm`` and ``hpcnb.lint`` both decide with this function.
    """
    release = parse_slurm_version(version)
    first, after = _NO_CPUS_INHERITANCE
    return SLURM_VERSIONS[0] if first <= release < after else SLURM_VERSIONS[1]


class ProfileError(ValueError):
    """A site profile is missing, malformed, or asked for something it does not have.

    ``file``, ``field`` and ``fix`` are kept as attributes when known; the message always
    contains them in readable form.
    """

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 fix: str | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.field = field
        self.fix = fix


# --------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class StorageTier:
    """One storage area of a site (home, scratch, project, node-local disk, ...)."""

    name: str
    path: str  # may contain $HOME, $USER, $SCRATCH, $SLURM_TMPDIR; "" = the guide gives none
    quota_bytes: int | None
    quota_files: int | None
    backed_up: bool | None  # None = the guide does not say
    purged: str | None  # e.g. "files older than 60 days"; None = not purged / not stated
    node_local: bool
    use: str  # intended use, one sentence

    def expand(self, env: Mapping[str, str] | None = None) -> str:
        """The path with ``$VARS`` filled in from ``env`` (default: ``os.environ``).

        Unknown variables are left as they are (``$SLURM_TMPDIR`` outside a job).
        """
        return string.Template(self.path).safe_substitute(os.environ if env is None else env)


@dataclass(frozen=True)
class Partition:
    """A Slurm partition of the site, as the local Slurm emulates it."""

    name: str
    max_time: str  # Slurm time format "D-HH:MM:SS", "HH:MM:SS" or "INFINITE"
    default: bool = False
    nodes: str | None = None  # hostlist expression of the emulated nodes in it (None = all)
    preemptible: bool = False
    description: str = ""

    @property
    def max_seconds(self) -> int | None:
        """``max_time`` in seconds; ``None`` for INFINITE."""
        return parse_time_limit(self.max_time)


@dataclass(frozen=True)
class NodeGroup:
    """Virtual nodes the LOCAL Slurm uses when it emulates this site (scaled down to a laptop)."""

    names: str  # hostlist expression, e.g. "node[1-2]"
    cpus: int
    memory_mb: int
    gpus: int = 0
    gpu_type: str | None = None
    features: tuple[str, ...] = ()

    @property
    def hostnames(self) -> tuple[str, ...]:
        """The individual node names of ``names``."""
        return tuple(expand_hostlist(self.names))


@dataclass(frozen=True)
class GpuType:
    """A GPU model the real site offers."""

    name: str
    memory_gb: float | None
    per_node: int | None
    note: str = ""


@dataclass(frozen=True)
class Rule:
    """A site rule in our own words, why it exists, and where the guide says it."""

    text: str
    why: str = ""
    source: str = ""


@dataclass(frozen=True)
class Profile:
    """Everything the course knows about one site, plus its local emulation shape."""

    name: str
    title: str
    source: str  # which guide
    login_hosts: tuple[str, ...]
    storage: tuple[StorageTier, ...]
    partitions: tuple[Partition, ...]
    nodes: tuple[NodeGroup, ...]  # local emulation shape
    gpu_types: tuple[GpuType, ...]
    gpu_request: str  # how this site asks for GPUs; "" = the guide does not say
    account_directive: str | None
    account_required: bool
    required_directives: tuple[str, ...]
    home_forbidden_for: tuple[str, ...]  # subset of ("data", "venv", "cache")
    rules: tuple[Rule, ...]
    modules: dict[str, str] = field(hash=False)  # purpose -> module load line
    jupyter: str  # where/how Jupyter runs, one or two sentences; "" = the guide does not say
    slurm_tmpdir: bool  # site provides $SLURM_TMPDIR (Alliance does; plain Slurm does not)
    shebang: str = "#!/bin/bash"  # a job script's first line there ("#!/bin/bash -l": a login shell, for `module`)
    def_mem_per_cpu_mb: int = 500
    kill_wait_s: int = 2
    cluster_name: str = "hpcnb"
    slurm_version: str = DEFAULT_SLURM_VERSION  # the site's Slurm release today, "YY.MM" (see emulated_version)
    guide_slurm_version: str | None = None  # the release the source guide was written for, where known and different
    notes: tuple[str, ...] = ()

    def partition(self, name: str | None = None) -> Partition:
        """The partition called ``name``; the default partition when ``name`` is None."""
        if name is None:
            return self.default_partition()
        for part in self.partitions:
            if part.name == name:
                return part
        known = ", ".join(p.name for p in self.partitions)
        raise ProfileError(
            f"profile '{self.name}': field 'partitions': no partition named {name!r}. "
            f"Fix: use one of: {known}.", field="partitions", fix=f"use one of: {known}")

    def default_partition(self) -> Partition:
        """The one partition marked ``default = true``."""
        defaults = [p for p in self.partitions if p.default]
        if len(defaults) != 1:
            raise ProfileError(
                f"profile '{self.name}': field 'partitions.default': {len(defaults)} default "
                "partitions. Fix: mark exactly one partition with default = true.",
                field="partitions.default", fix="mark exactly one partition with default = true")
        return defaults[0]

    def tier(self, name: str) -> StorageTier:
        """The storage tier called ``name`` (e.g. "home", "scratch", "node-local")."""
        for tier in self.storage:
            if tier.name == name:
                return tier
        known = ", ".join(t.name for t in self.storage) or "(none: the guide gives no storage)"
        raise ProfileError(
            f"profile '{self.name}': field 'storage': no storage tier named {name!r}. "
            f"Fix: use one of: {known}.", field="storage", fix=f"use one of: {known}")


# --------------------------------------------------------------------------- value parsers

#: Seconds in a Slurm time limit (None for INFINITE/UNLIMITED): Slurm's own parser.
parse_time_limit = parse_time
_COUNT_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMG]?)$", re.IGNORECASE)
_COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}


def _quota(value: int | str, what: str, example: str) -> int | str:
    """An int quota as it is (refused if negative or a bool), or a string to parse; else ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"a {what} quota cannot be true/false")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"quota {value} is negative")
        return value
    if not isinstance(value, str):
        raise ValueError(f"a {what} quota must be an integer or a string like '{example}', "
                         f"got {type(value).__name__}")
    return value


def parse_bytes(value: int | str) -> int:
    """A byte quota: an int, or a string with a binary unit ("50G" = 50 * 2**30, "1T", "7.2T")."""
    value = _quota(value, "byte", "50G")
    return value if isinstance(value, int) else sizes.parse_bytes(value)


def parse_file_count(value: int | str) -> int:
    """A file-count quota: an int, or a string with a decimal unit ("500k" = 500_000, "1M")."""
    value = _quota(value, "file", "500k")
    if isinstance(value, int):
        return value
    m = _COUNT_RE.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a file count (write e.g. 5000, 500k, 1M)")
    count = float(m.group(1)) * _COUNT_UNITS[m.group(2).upper()]
    if count != int(count):
        raise ValueError(f"{value!r} is not a whole number of files")
    return int(count)


def expand_hostlist(expr: str) -> list[str]:
    """Node names of a Slurm hostlist expression ("node[1-2],gpu3" -> node1, node2, gpu3).

    Uses python-hostlist, the same expander the local Slurm uses. Raises ``ValueError``.
    """
    try:
        names = hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as exc:
        raise ValueError(f"{expr!r} is not a hostlist expression ({exc})") from None
    if not names or any(not n for n in names):
        raise ValueError(f"{expr!r} names no nodes")
    return names


# --------------------------------------------------------------------------- TOML -> Profile


class _Ctx:
    """Where we are while reading a file; builds ProfileErrors that name file and field."""

    def __init__(self, file: str) -> None:
        self.file = file

    def error(self, where: str, problem: str, fix: str) -> ProfileError:
        return ProfileError(f"{self.file}: field '{where}': {problem}. Fix: {fix}.",
                            file=self.file, field=where, fix=fix)


_KIND_HELP = {
    str: ("a string", 'write it in quotes, e.g. key = "text"'),
    bool: ("true or false", "write true or false (lowercase, no quotes)"),
    int: ("an integer", "write a whole number without quotes"),
    float: ("a number", "write a number without quotes"),
}


class _Table:
    """Typed access to one TOML table; rejects unknown keys and reports missing ones."""

    def __init__(self, ctx: _Ctx, data: Any, where: str, allowed: Iterable[str]) -> None:
        self.ctx, self.where = ctx, where
        allowed = list(allowed)
        if not isinstance(data, dict):
            raise ctx.error(where or "(top level)", f"expected a table, got {type(data).__name__}",
                            "see the layout described in hpcnb/sites/__init__.py")
        self.data = data
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise ctx.error(self._at(key), "unknown key",
                                f"{hint}allowed keys here: {', '.join(allowed)}")

    def _at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _check(self, key: str, value: Any, kind: type) -> Any:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            expected, fix = _KIND_HELP[kind]
            raise self.ctx.error(self._at(key), f"expected {expected}, got {value!r}", fix)
        return float(value) if kind is float else value

    def has(self, key: str) -> bool:
        return key in self.data

    def req(self, key: str, kind: type) -> Any:
        if key not in self.data:
            expected, _ = _KIND_HELP[kind]
            raise self.ctx.error(self._at(key), "required field is missing",
                                 f"add {key} = <{expected}>" + (
                                     f" to the [{self.where}] entry" if self.where else ""))
        return self._check(key, self.data[key], kind)

    def opt(self, key: str, kind: type, default: Any = None) -> Any:
        if key not in self.data:
            return default
        return self._check(key, self.data[key], kind)

    def str_list(self, key: str, *, required: bool = False) -> tuple[str, ...]:
        if key not in self.data:
            if required:
                raise self.ctx.error(self._at(key), "required field is missing",
                                     f'add {key} = ["..."] (use {key} = [] if the guide gives none)')
            return ()
        value = self.data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.ctx.error(self._at(key), f"expected a list of strings, got {value!r}",
                                 f'write {key} = ["a", "b"]')
        return tuple(value)

    def tables(self, key: str, *, required: bool = False) -> list[tuple[str, Any]]:
        if key not in self.data:
            if required:
                raise self.ctx.error(key, "required section is missing",
                                     f"add at least one [[{key}]] table")
            return []
        value = self.data[key]
        if not isinstance(value, list):
            raise self.ctx.error(key, f"expected an array of tables, got {value!r}",
                                 f"write each entry as a [[{key}]] table")
        if required and not value:
            raise self.ctx.error(key, "is empty", f"add at least one [[{key}]] table")
        return [(f"{key}[{i}]", item) for i, item in enumerate(value)]


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _non_negative(ctx: _Ctx, where: str, value: int, what: str) -> int:
    if value < 0:
        raise ctx.error(where, f"{what} must not be negative, got {value}", "use 0 or more")
    return value


def _slurm_version(ctx: _Ctx, where: str, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        parse_slurm_version(value)
    except ValueError as exc:
        raise ctx.error(where, str(exc), 'write the site\'s Slurm major release in quotes, e.g. "24.05"') from None
    return value


def _shebang(ctx: _Ctx, value: str) -> str:
    if not re.fullmatch(r"#!/\S+( -\w+)*", value):
        raise ctx.error("shebang", f"{value!r} is not a #! line with an absolute path",
                        'write e.g. shebang = "#!/bin/bash -l"')
    return value


def _positive(ctx: _Ctx, where: str, value: int, what: str) -> int:
    if value <= 0:
        raise ctx.error(where, f"{what} must be positive, got {value}", "use a number above 0")
    return value


def _read_quota(ctx: _Ctx, t: _Table, where: str, key: str, parse: Callable[[Any], int],
                example: str) -> int | None:
    """A quota key of a storage tier, parsed; None when it is left out."""
    if not t.has(key):
        return None
    try:
        return parse(t.data[key])
    except ValueError as exc:
        raise ctx.error(f"{where}.{key}", str(exc), f"write a non-negative integer or {example} "
                        "units), or leave the key out for no/unknown quota") from None


def _read_storage(ctx: _Ctx, where: str, data: Any) -> StorageTier:
    t = _Table(ctx, data, where, _names(StorageTier))
    quota_bytes = _read_quota(ctx, t, where, "quota_bytes", parse_bytes, 'a size such as "50G" or "1T" (binary')
    quota_files = _read_quota(ctx, t, where, "quota_files", parse_file_count,
                              'a count such as "500k" or "1M" (decimal')
    purged = t.opt("purged", str)
    return StorageTier(
        name=_nonempty(ctx, f"{where}.name", t.req("name", str)),
        path=t.req("path", str),
        quota_bytes=quota_bytes,
        quota_files=quota_files,
        backed_up=t.opt("backed_up", bool),
        purged=purged if purged else None,
        node_local=t.req("node_local", bool),
        use=t.req("use", str),
    )


def _read_partition(ctx: _Ctx, where: str, data: Any) -> Partition:
    t = _Table(ctx, data, where, _names(Partition))
    max_time = t.req("max_time", str)
    try:
        if parse_time_limit(max_time) == 0:
            raise ValueError(f"{max_time!r}: a partition's maximum time must be longer than zero")
    except ValueError as exc:
        raise ctx.error(f"{where}.max_time", str(exc), f"write one of {TIME_FORMATS}") from None
    nodes = t.opt("nodes", str)
    return Partition(
        name=_nonempty(ctx, f"{where}.name", t.req("name", str)),
        max_time=max_time,
        default=t.opt("default", bool, False),
        nodes=nodes,
        preemptible=t.opt("preemptible", bool, False),
        description=t.opt("description", str, ""),
    )


def _read_nodes(ctx: _Ctx, where: str, data: Any) -> NodeGroup:
    t = _Table(ctx, data, where, _names(NodeGroup))
    names = t.req("names", str)
    try:
        expand_hostlist(names)
    except ValueError as exc:
        raise ctx.error(f"{where}.names", str(exc), 'write a hostlist such as "node[1-2]"') from None
    gpus = _non_negative(ctx, f"{where}.gpus", t.opt("gpus", int, 0), "gpus")
    gpu_type = t.opt("gpu_type", str)
    if gpu_type is not None and gpus == 0:
        raise ctx.error(f"{where}.gpu_type", f"gpu_type {gpu_type!r} on nodes without GPUs",
                        "set gpus to 1 or more, or remove gpu_type")
    return NodeGroup(
        names=names,
        cpus=_positive(ctx, f"{where}.cpus", t.req("cpus", int), "cpus"),
        memory_mb=_positive(ctx, f"{where}.memory_mb", t.req("memory_mb", int), "memory_mb"),
        gpus=gpus,
        gpu_type=gpu_type,
        features=t.str_list("features"),
    )


def _read_gpu_type(ctx: _Ctx, where: str, data: Any) -> GpuType:
    t = _Table(ctx, data, where, _names(GpuType))
    memory = t.opt("memory_gb", float)
    if memory is not None and memory <= 0:
        raise ctx.error(f"{where}.memory_gb", f"must be positive, got {memory}",
                        "use the GPU memory in GB, or leave the key out if the guide does not say")
    per_node = t.opt("per_node", int)
    if per_node is not None:
        _positive(ctx, f"{where}.per_node", per_node, "per_node")
    return GpuType(name=_nonempty(ctx, f"{where}.name", t.req("name", str)),
                   memory_gb=memory, per_node=per_node, note=t.opt("note", str, ""))


def _read_rule(ctx: _Ctx, where: str, data: Any) -> Rule:
    t = _Table(ctx, data, where, _names(Rule))
    return Rule(text=_nonempty(ctx, f"{where}.text", t.req("text", str)),
                why=t.opt("why", str, ""), source=t.opt("source", str, ""))


def _nonempty(ctx: _Ctx, where: str, value: str) -> str:
    if not value.strip():
        raise ctx.error(where, "is empty", "write a non-empty value")
    return value


def _unique(ctx: _Ctx, section: str, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ctx.error(f"{section}[{i}].name", f"duplicate name {name!r}",
                            "give every entry its own name")
        seen.add(name)


_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def _build_profile(ctx: _Ctx, data: dict[str, Any], stem: str) -> Profile:
    t = _Table(ctx, data, "", _names(Profile))

    name = t.req("name", str)
    if not _NAME_RE.match(name):
        raise ctx.error("name", f"{name!r} is not a valid profile name",
                        "use lowercase letters, digits, '-' and '_'")
    if name != stem:
        raise ctx.error("name", f"name {name!r} does not match the file name {stem + '.toml'!r}",
                        f"set name = {stem!r} or rename the file to {name}.toml")

    storage = tuple(_read_storage(ctx, w, d) for w, d in t.tables("storage"))
    partitions = tuple(_read_partition(ctx, w, d) for w, d in t.tables("partitions", required=True))
    nodes = tuple(_read_nodes(ctx, w, d) for w, d in t.tables("nodes", required=True))
    gpu_types = tuple(_read_gpu_type(ctx, w, d) for w, d in t.tables("gpu_types"))
    rules = tuple(_read_rule(ctx, w, d) for w, d in t.tables("rules"))

    _unique(ctx, "storage", [s.name for s in storage])
    _unique(ctx, "partitions", [p.name for p in partitions])
    _unique(ctx, "gpu_types", [g.name for g in gpu_types])

    all_nodes: list[str] = []
    for i, group in enumerate(nodes):
        for host in group.hostnames:
            if host in all_nodes:
                raise ctx.error(f"nodes[{i}].names", f"node {host!r} is defined twice",
                                "give every node a unique name")
            all_nodes.append(host)
        if group.gpu_type is not None and group.gpu_type not in {g.name for g in gpu_types}:
            known = ", ".join(g.name for g in gpu_types) or "(none)"
            raise ctx.error(f"nodes[{i}].gpu_type", f"{group.gpu_type!r} is not a declared GPU type",
                            f"use one of {known}, or add a [[gpu_types]] entry for it")

    defaults = [i for i, p in enumerate(partitions) if p.default]
    if len(defaults) != 1:
        which = ", ".join(partitions[i].name for i in defaults) or "none"
        raise ctx.error("partitions.default",
                        f"exactly one partition must be the default, found {len(defaults)} ({which})",
                        "set default = true on exactly one [[partitions]] entry")
    for i, part in enumerate(partitions):
        if part.nodes is None:
            continue
        try:
            members = expand_hostlist(part.nodes)
        except ValueError as exc:
            raise ctx.error(f"partitions[{i}].nodes", str(exc),
                            'write a hostlist such as "node[1-2]", or leave nodes out for all nodes'
                            ) from None
        unknown = [m for m in members if m not in all_nodes]
        if unknown:
            raise ctx.error(f"partitions[{i}].nodes",
                            f"partition {part.name!r} names unknown node(s) {', '.join(unknown)}",
                            f"use nodes defined under [[nodes]]: {hostlist.collect_hostlist(all_nodes)}")

    modules_raw = t.data.get("modules", {})
    if not isinstance(modules_raw, dict):
        raise ctx.error("modules", f"expected a table, got {modules_raw!r}",
                        'write a [modules] table of purpose = "module load ..." lines')
    modules: dict[str, str] = {}
    for purpose, line in modules_raw.items():
        if not isinstance(line, str) or not line.startswith("module "):
            raise ctx.error(f"modules.{purpose}", f"expected a 'module load ...' line, got {line!r}",
                            f'write {purpose} = "module load NAME/VERSION"')
        modules[purpose] = line

    home_forbidden = t.str_list("home_forbidden_for")
    for i, kind in enumerate(home_forbidden):
        if kind not in HOME_KINDS:
            raise ctx.error(f"home_forbidden_for[{i}]", f"{kind!r} is not one of {HOME_KINDS}",
                            f"use only {', '.join(repr(k) for k in HOME_KINDS)}")

    account_directive = t.opt("account_directive", str)
    account_required = t.req("account_required", bool)
    if account_required and not account_directive:
        raise ctx.error("account_directive", "account_required is true but no directive is given",
                        'add account_directive = "--account=<project>" (the site\'s form)')

    return Profile(
        name=name,
        title=_nonempty(ctx, "title", t.req("title", str)),
        source=_nonempty(ctx, "source", t.req("source", str)),
        login_hosts=t.str_list("login_hosts", required=True),
        storage=storage,
        partitions=partitions,
        nodes=nodes,
        gpu_types=gpu_types,
        gpu_request=t.req("gpu_request", str),
        account_directive=account_directive,
        account_required=account_required,
        required_directives=t.str_list("required_directives"),
        home_forbidden_for=home_forbidden,
        rules=rules,
        modules=modules,
        jupyter=t.req("jupyter", str),
        slurm_tmpdir=t.req("slurm_tmpdir", bool),
        shebang=_shebang(ctx, t.opt("shebang", str, "#!/bin/bash")),
        def_mem_per_cpu_mb=_positive(ctx, "def_mem_per_cpu_mb",
                                     t.opt("def_mem_per_cpu_mb", int, 500), "def_mem_per_cpu_mb"),
        kill_wait_s=_non_negative(ctx, "kill_wait_s", t.opt("kill_wait_s", int, 2), "kill_wait_s"),
        cluster_name=_nonempty(ctx, "cluster_name", t.opt("cluster_name", str, "hpcnb")),
        slurm_version=_slurm_version(ctx, "slurm_version", t.opt("slurm_version", str)) or DEFAULT_SLURM_VERSION,
        guide_slurm_version=_slurm_version(ctx, "guide_slurm_version", t.opt("guide_slurm_version", str)),
        notes=t.str_list("notes"),
    )


# --------------------------------------------------------------------------- public API

_CACHE: dict[tuple[str, int, int], Profile] = {}


def list_profiles() -> list[str]:
    """Names of the profiles shipped with hpcnb, sorted."""
    return sorted(p.stem for p in SITES_DIR.glob("*.toml"))


def _resolve(name_or_path: str | os.PathLike[str]) -> Path:
    text = os.fspath(name_or_path)
    looks_like_path = (isinstance(name_or_path, os.PathLike) or text.endswith(".toml")
                       or os.sep in text or "/" in text)
    if looks_like_path:
        path = Path(text).expanduser()
        if not path.is_file():
            raise ProfileError(f"{path}: field '(file)': profile file not found. "
                               "Fix: check the path, or pass a shipped profile name: "
                               f"{', '.join(list_profiles())}.", file=str(path), field="(file)")
        return path.resolve()
    path = SITES_DIR / f"{text}.toml"
    if not path.is_file():
        known = ", ".join(list_profiles())
        raise ProfileError(f"{path}: field '(name)': no site profile named {text!r}. "
                           f"Fix: use one of: {known}, or pass a path to a .toml file.",
                           file=str(path), field="(name)", fix=f"use one of: {known}")
    return path


def load_profile(name_or_path: str | os.PathLike[str] | None = None) -> Profile:
    """Load and validate a site profile by name ("narval") or path ("my_site.toml").

    With no argument the profile named by the ``HPCNB_PROFILE`` environment variable is used,
    and ``"local"`` when that is unset. Results are cached per file and reloaded when the file
    changes.
    """
    if name_or_path is None:
        name_or_path = os.environ.get(ENV_VAR) or "local"
    path = _resolve(name_or_path)
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    ctx = _Ctx(str(path))
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ctx.error("(syntax)", f"not valid TOML: {exc}", "fix the TOML syntax at that line")
    profile = _build_profile(ctx, data, path.stem)
    for old in [k for k in _CACHE if k[0] == key[0]]:
        del _CACHE[old]
    _CACHE[key] = profile
    return profile


# --------------------------------------------------------------------------- comparison tables


def _fmt_bytes(n: int | None) -> str | None:
    if n is None:
        return None
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:.3g} {unit}"
    return f"{n} B"


def _fmt_count(n: int | None) -> str | None:
    if n is None:
        return None
    for unit, size in (("M", 10**6), ("k", 10**3)):
        if n >= size and n % (size // 10 or 1) == 0:
            return f"{n / size:g}{unit}"
    return str(n)


def _summary(item: Any) -> str:
    if isinstance(item, StorageTier):
        quota = " / ".join(x for x in (_fmt_bytes(item.quota_bytes),
                                        f"{_fmt_count(item.quota_files)} files"
                                        if item.quota_files is not None else None) if x)
        backup = {True: "backed up", False: "no backup", None: "backup not stated"}[item.backed_up]
        parts = [item.path or "(path not given)", quota or "no quota given", backup]
        if item.purged:
            parts.append(f"purged: {item.purged}")
        if item.node_local:
            parts.append("node-local")
        return "; ".join(parts)
    if isinstance(item, Partition):
        extra = [x for x in ("default" if item.default else "",
                             "preemptible" if item.preemptible else "") if x]
        return f"max {item.max_time}" + (f" ({', '.join(extra)})" if extra else "")
    if isinstance(item, NodeGroup):
        gpu = f", {item.gpus} GPU" + (f" {item.gpu_type}" if item.gpu_type else "") if item.gpus else ""
        return f"{len(item.hostnames)} x {item.cpus} CPU, {item.memory_mb} MB{gpu}"
    if isinstance(item, GpuType):
        mem = f"{item.memory_gb:g} GB" if item.memory_gb is not None else "memory not given"
        per = f", {item.per_node}/node" if item.per_node is not None else ""
        return mem + per
    if isinstance(item, Rule):
        return item.text
    return str(item)


_NAMED: dict[str, type] = {"storage": StorageTier, "partitions": Partition,
                            "gpu_types": GpuType, "nodes": NodeGroup}


def compare(profiles: Iterable[Profile | str] | None, field: str) -> list[dict[str, Any]]:
    """Side-by-side rows, one per profile, for lesson tables.

    ``field`` is a Profile attribute. Named collections (``storage``, ``partitions``,
    ``gpu_types``, ``nodes``, ``modules``) become one column per entry name holding a short
    summary; ``"storage.quota_bytes"``-style dotted fields pick one attribute of each entry
    instead. Other fields give a single column. ``profiles`` may mix names and Profile objects;
    ``None`` means every shipped profile. Every row has the same keys (missing cells are None).
    """
    attr, _, sub = field.partition(".")
    known = _names(Profile)
    if attr not in known:
        raise ValueError(f"compare: unknown field {field!r}; use one of: {', '.join(known)}")
    if sub and attr in _NAMED and sub not in _names(_NAMED[attr]):
        raise ValueError(f"compare: {attr} entries have no field {sub!r}; "
                         f"use one of: {', '.join(_names(_NAMED[attr]))}")
    if sub and attr not in _NAMED and attr != "modules":
        raise ValueError(f"compare: {attr!r} has no sub-fields")
    chosen = [load_profile(p) if isinstance(p, (str, os.PathLike)) else p
              for p in (list_profiles() if profiles is None else profiles)]
    rows: list[dict[str, Any]] = []
    for prof in chosen:
        value = getattr(prof, attr)
        row: dict[str, Any] = {"profile": prof.name}
        if attr == "modules":
            row.update({sub: value.get(sub)} if sub else value)
        elif attr in _NAMED:
            for item in value:
                label = item.names if isinstance(item, NodeGroup) else item.name
                row[label] = getattr(item, sub) if sub else _summary(item)
        elif isinstance(value, tuple):
            row[attr] = "\n".join(_summary(v) for v in value)
        else:
            row[attr] = value
        rows.append(row)
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    return [{c: row.get(c) for c in columns} for row in rows]
