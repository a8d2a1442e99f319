"""Measured training: the model step alone and the full loop, each with its spread."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..precision import set_tf32
from .rows import Config, _row
from .hardware import device
from .data import _synthetic_batch, make_loader, make_model


class _threads:
    """Run a measurement with ``n`` intra-op threads (``None``: unchanged), then restore."""

    def __init__(self, n: int | None):
        self.n, self.saved = n, None

    def __enter__(self):
        import torch

        if self.n:
            self.saved = torch.get_num_threads()
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        import torch

        if self.saved:
            torch.set_num_threads(self.saved)
        return False


def _sync(dev: str) -> None:
    if dev == "cuda":
        import torch

        torch.cuda.synchronize()


class _Trainer:
    """Model, optimizer and one training step for a configuration."""

    def __init__(self, cfg: Config, dev: str, size: int = 32, classes: int = 10, seed: int = 0):
        import torch

        if cfg.precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"precision={cfg.precision!r}: use fp32, bf16 or fp16")
        if cfg.precision == "fp16" and dev != "cuda":
            raise ValueError("fp16 autocast is for GPUs; on a CPU compare bf16")
        if cfg.tf32 and dev != "cuda":
            raise ValueError("TF32 is a format of NVIDIA GPUs' tensor cores; a CPU has no TF32")
        if dev == "cuda":  # process-wide switches: every trainer sets them for its configuration
            set_tf32(cfg.tf32)
        torch.manual_seed(seed)
        self.dev, self.cfg = dev, cfg
        self.layout = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.model = make_model(size, classes).to(dev, memory_format=self.layout)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)
        self.scaler = torch.amp.GradScaler("cuda") if cfg.precision == "fp16" else None
        self.forward = torch.compile(self.model, dynamic=False) if cfg.compile else self.model

    def step(self, x, y):
        import contextlib

        import torch
        import torch.nn.functional as F

        amp = torch.autocast(device_type=self.dev, dtype=self.amp) if self.amp else contextlib.nullcontext()
        with amp:
            loss = F.cross_entropy(self.forward(x.contiguous(memory_format=self.layout)), y)
        self.opt.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()
        return loss

    def to_device(self, x, y):
        return x.to(self.dev, non_blocking=self.cfg.pin_memory), y.to(self.dev, non_blocking=self.cfg.pin_memory)


def _measure_step(cfg: Config, *, dev: str | None = None, seconds: float = 0.3, min_steps: int = 2,
                  warmup: int = 1, experiment: str = "step", setting: str | None = None) -> dict[str, Any]:
    import torch

    dev = dev or device()
    trainer = _Trainer(cfg, dev)
    x, y = _synthetic_batch(cfg.batch_size, dev)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        trainer.step(x, y)
    _sync(dev)
    start = time.perf_counter()
    ends = []  # the clock after each step
    while len(ends) < min_steps or ends[-1] - start < seconds:
        trainer.step(x, y)
        _sync(dev)
        ends.append(time.perf_counter())
    elapsed = ends[-1] - start
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev == "cuda" else None
    samples = len(ends) * cfg.batch_size
    thirds = sorted({len(ends) * k // 3 for k in (1, 2, 3)} - {0})  # steps at the end of each block
    return _row(experiment, setting or str(cfg.batch_size), "step", cfg, dev, samples=samples,
                seconds=elapsed, samples_per_s=samples / elapsed, peak_mem_mb=peak,
                **_block_rates(start, [(n * cfg.batch_size, ends[n - 1]) for n in thirds]))


def _measure_loop(cfg: Config, dataset, *, dev: str | None = None, epochs: int = 2, warmup: int = 1,
                  max_seconds: float | None = 2.0, experiment: str = "loop", setting: str = "",
                  trainer: _Trainer | None = None) -> dict[str, Any]:
    import torch

    dev = dev or device()
    trainer = trainer or _Trainer(cfg, dev, size=dataset.size, classes=dataset.classes)
    x, y = _synthetic_batch(cfg.batch_size, dev, dataset.size, dataset.classes)
    for _ in range(warmup):  # first calls pick kernels (and compile, with torch.compile)
        trainer.step(x, y)
    _sync(dev)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    samples, start, cut = 0, time.perf_counter(), False
    epoch_ends = []  # (samples so far, clock) at the end of each epoch
    loader = make_loader(dataset, cfg, dev=dev)
    for _ in range(epochs):
        for xb, yb in loader:
            trainer.step(*trainer.to_device(xb, yb))
            samples += len(xb)
            if max_seconds and time.perf_counter() - start > max_seconds:
                cut = True
                break
        _sync(dev)
        epoch_ends.append((samples, time.perf_counter()))
        if cut:
            break
    elapsed = epoch_ends[-1][1] - start
    del loader  # stops the workers
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev == "cuda" else None
    return _row(experiment, setting, "loop", cfg, dev, samples=samples, seconds=elapsed,
                samples_per_s=samples / elapsed, peak_mem_mb=peak, **_block_rates(start, epoch_ends),
                note=f"stopped after {max_seconds:g} s" if cut else "")


def _block_rates(start: float, ends: Sequence[tuple[int, float]]) -> dict[str, float]:
    """The slowest and fastest samples/s over the blocks that end at ``ends`` ((samples so far,
    clock) each; the first block begins at ``start``): a measurement's own spread."""
    rates = [(n - n0) / (t - t0) for (n0, t0), (n, t) in zip([(0, start), *ends], ends) if t > t0 and n > n0]
    return {"samples_per_s_min": min(rates), "samples_per_s_max": max(rates)} if rates else {}


def _with_threads(fn, cfg: Config, *args: Any, **kw: Any):
    import torch

    with _threads(cfg.threads):
        out = fn(cfg, *args, **kw)
        used = torch.get_num_threads()
    for row in out if isinstance(out, list) else [out]:
        if "threads" in row:
            row["threads"] = used
    return out


def measure_step(cfg: Config, **kw: Any) -> dict[str, Any]:
    """Samples/s of the model step alone (forward, backward, update) on a batch already in memory.

    Keywords: ``dev``, ``seconds`` (at least this long, 0.3), ``min_steps`` (2), ``warmup`` (1),
    ``experiment`` and ``setting`` (labels of the row).
    """
    return _with_threads(_measure_step, cfg, **kw)


def measure_loop(cfg: Config, dataset, **kw: Any) -> dict[str, Any]:
    """Samples/s of the whole training loop over ``epochs`` (2) epochs of ``dataset``.

    The clock runs from creating the DataLoader to the last optimizer step, so worker start-up
    (once per epoch unless ``persistent_workers``) counts, as it does in real training.
    A slow configuration stops after ``max_seconds`` (2 s; ``None``: never), with a note.
    Keywords: ``dev``, ``epochs``, ``warmup`` (steps on a synthetic batch first, 1),
    ``max_seconds``, ``experiment``, ``setting``.
    """
    return _with_threads(_measure_loop, cfg, dataset, **kw)
