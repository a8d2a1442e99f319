"""TOML -> Profile: reading and validating one site profile file (layout: ``hpcnb/sites/__init__.py``).

Every problem raises :class:`ProfileError` naming the file, the field and the fix.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import Any

import hostlist

from hpcnb.sites.model import (
    DEFAULT_SLURM_VERSION, HOME_KINDS, GpuType, NodeGroup, Partition, Profile, ProfileError, Rule,
    StorageTier, _names, parse_slurm_version,
)
from hpcnb.sites.values import expand_hostlist, parse_bytes, parse_file_count, parse_time_limit
from hpcnb.slurm.times import TIME_FORMATS


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
    max_nodes = t.opt("max_nodes", int)
    return Partition(
        name=_nonempty(ctx, f"{where}.name", t.req("name", str)),
        max_time=max_time,
        default=t.opt("default", bool, False),
        nodes=nodes,
        preemptible=t.opt("preemptible", bool, False),
        description=t.opt("description", str, ""),
        default_time=_default_time(ctx, f"{where}.default_time", t.opt("default_time", str), max_time),
        max_nodes=None if max_nodes is None else _positive(ctx, f"{where}.max_nodes", max_nodes, "max_nodes"),
    )


def _default_time(ctx: _Ctx, where: str, value: str | None, max_time: str) -> str | None:
    """A partition's DefaultTime: a time limit above zero and within its MaxTime."""
    if value is None:
        return None
    try:
        seconds, most = parse_time_limit(value), parse_time_limit(max_time)
    except ValueError as exc:
        raise ctx.error(where, str(exc), f"write one of {TIME_FORMATS}") from None
    if seconds == 0 or (most is not None and (seconds is None or seconds > most)):
        raise ctx.error(where, f"{value!r} is not within the partition's max_time {max_time!r}",
                        "give a time above zero and at most max_time, or leave default_time out")
    return value


def _accounts(ctx: _Ctx, names: tuple[str, ...]) -> tuple[str, ...]:
    """The enforced accounts: names without blanks or commas, each once."""
    for i, name in enumerate(names):
        if not re.fullmatch(r"[^\s,]+", name):
            raise ctx.error(f"accounts[{i}]", f"{name!r} is not an account name",
                            "write each account as sacctmgr shows it, e.g. \"course\"")
        if name in names[:i]:
            raise ctx.error(f"accounts[{i}]", f"account {name!r} is listed twice", "list each account once")
    return names


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
        accounts=_accounts(ctx, t.str_list("accounts")),
    )
