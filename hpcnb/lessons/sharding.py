"""Lesson 14 (and its exercises): what DDP, ZeRO-1 and FSDP2 hold on each rank.

* :func:`tensor_bytes` and :func:`optimizer_tensors` measure, inside the job
  (``hpcnb.scripts.sharded_train``), the bytes of a rank's own tensors;
* :func:`read_records` reads back the ``SHARDING {json}`` line each rank prints, per strategy;
* :func:`quartiles` gives a rank's step times as (first quartile, median, third quartile);
* :func:`bytes_per_param` and :func:`largest_width` turn measured bytes into the widest model
  that fits a memory budget per rank.

No torch import here: the lesson's kernel reads the records, the job's ranks measure.
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

_TAG = "SHARDING "


def tensor_bytes(tensors: Iterable[Any]) -> int:
    """The bytes of the tensors' elements (``numel * element_size``): pass local shards, not DTensors."""
    return sum(t.numel() * t.element_size() for t in tensors)


def optimizer_tensors(opt: Any) -> list[Any]:
    """Every tensor of an optimizer's state on this rank. ``ZeroRedundancyOptimizer`` keeps this
    rank's state in its local optimizer (``opt.optim``); a DTensor counts by its local shard."""
    inner = getattr(opt, "optim", opt)
    out = []
    for state in inner.state.values():
        for value in state.values():
            if hasattr(value, "numel"):
                out.append(value.to_local() if hasattr(value, "to_local") else value)
    return out


def read_records(text: str) -> dict[str, dict[int, dict[str, Any]]]:
    """The ``SHARDING {json}`` lines of a job's output (``srun --label`` or not): by strategy (a
    loading run's is ``load-N``, N its ranks), then by rank."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for line in text.splitlines():
        _, tag, rest = line.partition(_TAG)
        if tag:
            record = json.loads(rest)
            found.setdefault(record["strategy"], {})[record["rank"]] = record
    return found


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of at least two values."""
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def n_params(width: int, depth: int) -> int:
    """The parameters of ``sharded_train``'s MLP: ``depth`` Linear(width, width), then Linear(width, 1)."""
    return depth * (width * width + width) + width + 1


def bytes_per_param(record: dict[str, Any]) -> float:
    """A rank's parameter + gradient + optimizer-state bytes, per parameter of the whole model."""
    return (record["param_bytes"] + record["grad_bytes"] + record["optim_bytes"]) / record["n_params"]


def largest_width(budget: float, per_param: float, depth: int) -> int:
    """The largest width whose model fits ``budget`` bytes per rank at ``per_param`` bytes a parameter."""
    width = 1
    while n_params(width + 1, depth) * per_param <= budget:
        width += 1
    return width if n_params(width, depth) * per_param <= budget else 0
