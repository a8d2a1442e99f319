"""Lessons 8, 9 and 10, inside their jobs: a tiny model, a synthetic dataset and a training step
shared by the DDP, Lightning and Horovod lessons.

Everything is deterministic: the dataset and the initial weights come from fixed seeds, so two
runs with the same *global* batch give the same weights whatever the number of processes —
which is how the lessons show that data parallelism is correct.

* :func:`make_dataset` — ``SAMPLES`` points ``x`` in R^FEATURES with ``y = sin(x·w) + noise``,
  generated in memory (every rank builds the same tensors; nothing is downloaded or read).
* :func:`make_model` — a two-hidden-layer MLP, initialised from a seed.
* :func:`train_epoch` — one pass over a loader (MSE loss, any optimizer); returns the mean loss.
* :func:`full_loss` — the loss over the whole dataset (the same number on every rank).
* :func:`use_slurm_cpus` — ``torch.set_num_threads`` to the CPUs Slurm gave the task.
* :func:`save_result` / :func:`load_result` — rank 0's JSON summary plus the final weights.
* :func:`max_weight_difference` — how far apart two runs' final weights are.

``import hpcnb.lessons.training`` does not import torch; the functions do (inside the job).
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Callable

__all__ = [
    "FEATURES", "HIDDEN", "SAMPLES", "SEED", "make_dataset", "make_model", "train_epoch", "full_loss",
    "use_slurm_cpus", "threads_for_process", "save_result", "load_result", "load_weights", "max_weight_difference",
    "hosts_of_ranks",
]

FEATURES, HIDDEN, SAMPLES, SEED = 16, 512, 4096, 0


def make_dataset(samples: int = SAMPLES, features: int = FEATURES, seed: int = SEED):
    """A regression dataset (TensorDataset of x, y), the same on every process for a given seed."""
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    w = torch.randn(features, 1, generator=g) / features**0.5
    y = torch.sin(x @ w) + 0.1 * torch.randn(samples, 1, generator=g)
    return TensorDataset(x, y)


def make_model(features: int = FEATURES, hidden: int = HIDDEN, seed: int = SEED):
    """An MLP features -> hidden -> hidden -> 1 (tanh), its weights drawn from ``seed``."""
    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Linear(features, hidden), nn.Tanh(),
            nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, 1),
        )


def train_epoch(model, loader, optimizer, device: Any = "cpu", on_step: Callable[[float], None] | None = None) -> float:
    """One pass over ``loader``: MSE loss, backward, step. Returns this process's mean batch loss;
    ``on_step`` gets each batch's loss (e.g. to write it to TensorBoard)."""
    import torch.nn.functional as F

    model.train()
    total, batches = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()  # under DDP/Horovod the gradients are averaged over all processes here / in step()
        optimizer.step()
        total, batches = total + loss.item(), batches + 1
        if on_step is not None:
            on_step(loss.item())
    return total / max(batches, 1)


def full_loss(model, dataset, device: Any = "cpu") -> float:
    """MSE over the whole dataset, with the plain module (a DDP wrapper is unwrapped)."""
    import torch
    import torch.nn.functional as F

    module = getattr(model, "module", model)
    was_training = module.training
    module.eval()
    x, y = dataset.tensors
    with torch.no_grad():
        loss = F.mse_loss(module(x.to(device)), y.to(device)).item()
    module.train(was_training)
    return loss


def threads_for_process(env: dict[str, str] | None = None) -> int:
    """The CPU threads one training process should use: the CPUs Slurm gave the task
    (``SLURM_CPUS_PER_TASK``, default 1), shared among the processes a launcher such as torchrun
    started inside that task (``LOCAL_WORLD_SIZE``)."""
    env = os.environ if env is None else env
    cpus = int(env.get("SLURM_CPUS_PER_TASK") or 1)
    return max(1, cpus // int(env.get("LOCAL_WORLD_SIZE") or 1))


def use_slurm_cpus(env: dict[str, str] | None = None) -> int:
    """``torch.set_num_threads`` to :func:`threads_for_process` (never ``os.cpu_count()``, which
    counts the whole node), so that processes sharing a node do not oversubscribe its cores."""
    import torch

    threads = threads_for_process(env)
    torch.set_num_threads(threads)
    return threads


def hosts_of_ranks() -> list[str]:
    """Every rank's node name, gathered to all ranks (torch.distributed must be initialised)."""
    import torch.distributed as dist

    name = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    names: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(names, name)
    return [str(n) for n in names]


def save_result(out: str | os.PathLike[str], model, **fields: Any) -> Path:
    """Write ``<out>.json`` (the fields, plus the final loss over the whole dataset) and ``<out>.pt``
    (the final weights). Call it on rank 0 only."""
    import torch

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    module = getattr(model, "module", model)
    state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    torch.save(state, out.with_suffix(".pt"))
    path = out.with_suffix(".json")
    path.write_text(json.dumps(fields, indent=1, default=str) + "\n")
    return path


def load_result(out: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON summary written by :func:`save_result`."""
    return json.loads(Path(out).with_suffix(".json").read_text())


def load_weights(out: str | os.PathLike[str]) -> dict[str, Any]:
    """The final weights (a state dict of tensors) written by :func:`save_result`."""
    import torch

    return torch.load(Path(out).with_suffix(".pt"), map_location="cpu")


def _state(x: Any) -> dict[str, Any]:
    if isinstance(x, (str, os.PathLike)):
        return load_weights(x)
    if hasattr(x, "state_dict"):
        return getattr(x, "module", x).state_dict()
    return x


def max_weight_difference(a: Any, b: Any) -> float:
    """Largest absolute difference between two sets of weights (models, state dicts or result paths).

    Keys are matched by their position, so a Lightning module's ``net.0.weight`` meets a plain
    model's ``0.weight``."""
    sa, sb = _state(a), _state(b)
    if len(sa) != len(sb):
        raise ValueError(f"different models: {len(sa)} vs {len(sb)} tensors")
    worst = 0.0
    for (ka, ta), (kb, tb) in zip(sa.items(), sb.items()):
        if tuple(ta.shape) != tuple(tb.shape):
            raise ValueError(f"{ka} {tuple(ta.shape)} vs {kb} {tuple(tb.shape)}")
        worst = max(worst, (ta.detach().cpu().double() - tb.detach().cpu().double()).abs().max().item())
    return worst
