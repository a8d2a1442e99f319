"""Comparison tables: one row per site profile, for the lessons' side-by-side tables."""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from hpcnb.sites.model import GpuType, NodeGroup, Partition, Profile, Rule, StorageTier, _names


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
    from hpcnb.sites import list_profiles, load_profile  # the public API, which imports this module
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
