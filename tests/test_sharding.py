"""hpcnb.lessons.sharding (lesson 14): bytes per rank, read back from the ranks' records."""
from __future__ import annotations

import json

import pytest

from hpcnb.lessons.sharding import (
    bytes_per_param, largest_width, n_params, optimizer_tensors, quartiles, read_records, tensor_bytes)


class Tensor:
    def __init__(self, n: int, size: int = 4, shard: "Tensor | None" = None) -> None:
        self.n, self.size, self.shard = n, size, shard

    def numel(self) -> int:
        return self.n

    def element_size(self) -> int:
        return self.size


class DTensor(Tensor):
    def to_local(self) -> Tensor:
        return self.shard


class Opt:
    def __init__(self, state: dict) -> None:
        self.state = state


def test_tensor_bytes_are_elements_times_their_size() -> None:
    assert tensor_bytes([Tensor(10), Tensor(3, size=2)]) == 46
    assert tensor_bytes([]) == 0


def test_optimizer_tensors_take_local_shards_and_zeros_inner_optimizer() -> None:
    half = Tensor(5)
    opt = Opt({"w": {"step": Tensor(1), "exp_avg": DTensor(10, shard=half), "lr": 0.1}})
    assert tensor_bytes(optimizer_tensors(opt)) == 4 + 20
    zero = Opt({})
    zero.optim = opt   # ZeroRedundancyOptimizer keeps this rank's state in .optim
    assert optimizer_tensors(zero) == optimizer_tensors(opt)


def test_read_records_per_rank_labelled_or_not() -> None:
    rec = {"rank": 1, "strategy": "fsdp", "param_bytes": 8}
    load = {"rank": 0, "strategy": "load-1"}
    text = f"0: noise\n1: SHARDING {json.dumps(rec)}\nSHARDING {json.dumps(load)}\n"
    assert read_records(text) == {"fsdp": {1: rec}, "load-1": {0: load}}


def test_quartiles_bracket_the_median() -> None:
    assert quartiles([1, 2, 3, 4, 5]) == (2, 3, 4)
    with pytest.raises(Exception):
        quartiles([1.0])


def test_n_params_matches_the_scripts_mlp() -> None:
    assert n_params(4, 2) == 2 * (16 + 4) + 4 + 1


def test_largest_width_fits_the_budget_and_the_next_does_not() -> None:
    per = bytes_per_param({"param_bytes": 4, "grad_bytes": 4, "optim_bytes": 8, "n_params": 1})
    assert per == 16
    budget = 16 * n_params(300, 4) + 1
    assert largest_width(budget, per, 4) == 300
    assert largest_width(budget, per / 2, 4) > 300   # half the bytes a parameter: a wider model fits
    assert largest_width(1, per, 4) == 0
