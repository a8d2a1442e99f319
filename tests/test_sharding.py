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


def test_a_dcp_checkpoint_of_model_and_adam_goes_on_training_on_fewer_ranks(workdir) -> None:
    """Lesson 14 (issue 39 item 3): two FSDP ranks save model, Adam and step in one dcp.save; one
    rank resumes from it: the same step and held-out loss, and Adam's own state (its step count),
    which the weights alone with a fresh Adam do not have."""
    import subprocess
    import sys

    train = f"'{sys.executable}' -m hpcnb.scripts.sharded_train --width 256 --depth 2"
    saved = subprocess.run(["sbatch", "--wait", "-N2", "-n2", "-o", "save.out", "--wrap",
                            f"srun {train} --strategy fsdp --steps 6 --save ckpt"], capture_output=True, text=True,
                           timeout=300)
    assert saved.returncode == 0, (saved.stderr, (workdir / "save.out").read_text())
    resumed = subprocess.run(["sbatch", "--wait", "-n1", "-o", "resume.out", "--wrap",
                              f"srun {train} --resume ckpt --steps 3; srun {train} --resume ckpt --weights-only --steps 3"],
                             capture_output=True, text=True, timeout=300)
    out = (workdir / "resume.out").read_text()
    assert resumed.returncode == 0, (resumed.stderr, out)
    runs = [json.loads(line.removeprefix("RESUMED ")) for line in out.splitlines() if line.startswith("RESUMED ")]
    restored, fresh = sorted(runs, key=lambda r: r["weights_only"])
    assert restored["world"] == 1 and restored["step"] == 6
    assert restored["found_loss"] == restored["saved_loss"] == fresh["found_loss"]   # the model as saved
    assert (restored["adam_step"], fresh["adam_step"]) == (6, 0), runs   # Adam's state came back, or not
    assert restored["then"] != fresh["then"]   # and it changes where training goes
