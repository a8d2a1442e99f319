"""Lesson 6 (and 7): single-device tuning: measure what makes one training process faster, on
CPU or on a GPU.

Everything here is measured, nothing is assumed. A tiny CNN trains on a synthetic image
dataset generated on the fly (no downloads): each sample is drawn from a class prototype
plus noise and then run through a small augmentation pipeline (shifts, flips, blur,
normalisation), so loading a sample costs real CPU time the way decoding a JPEG does.

The helpers return **tidy rows** (one dict per measured configuration, columns
:data:`COLUMNS`) that :func:`write_rows` / :func:`read_rows` store as CSV, that
:func:`markdown_table` formats and :func:`plot_tuning` draws.

* :func:`device` — ``"cuda"`` when PyTorch sees a GPU, else ``"cpu"``.
* :func:`cpus_for_job` / :func:`dataloader_workers` — the CPUs Slurm gave this task
  (``SLURM_CPUS_PER_TASK``), never ``os.cpu_count()`` (that counts the whole node).
* :func:`sweep_batch_size` — model-step throughput vs batch size; it doubles the batch until
  the throughput stops growing beyond its spread (:func:`stopped_growing`) or, on a GPU, its
  memory runs out (the OOM is caught and reported).
* :func:`profile_split` / :func:`profile_ops` — where the time goes: data loading alone vs
  the model step alone vs the training loop, and the top operators from ``torch.profiler``;
  :func:`bottleneck` names the part that holds the loop back.
* :class:`DeviceBatches` — batches made on the device itself (``data_on_device``): the fix when
  CPU workers cannot feed a GPU.
* :func:`sweep_workers`, :func:`sweep_threads` (intra-op threads of the training process),
  :func:`compare_loader_options` (``persistent_workers``,
  ``prefetch_factor``, ``pin_memory`` and ``data_on_device`` on a GPU), :func:`compare_precision`
  (bf16 autocast on CPU; fp16 and bf16 on a GPU), :func:`compare_device_options` (TF32,
  ``channels_last``) — full training loops, one row per setting.
* :func:`measure_compile` — ``torch.compile`` in a separate process under a time budget
  (:func:`compile_budget`: longer on a GPU), skipped with a note when it is unavailable, too
  slow to compile, or not faster.
* :func:`before_after` — the untuned and the tuned configuration, measured alternately.

``import hpcnb.lessons.tuning`` does not import torch; the functions do.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import markdown
from .precision import set_tf32

__all__ = [
    "COLUMNS", "Config", "SyntheticImages", "device", "cpus_for_job", "dataloader_workers",
    "set_threads", "make_model", "make_loader", "measure_step", "measure_loop",
    "sweep_batch_size", "stopped_growing", "pick_batch", "profile_split", "profile_ops", "bottleneck",
    "DeviceBatches", "sweep_workers", "sweep_threads", "compare_loader_options", "compare_precision",
    "compare_device_options", "precisions", "compile_available", "compile_budget", "measure_compile",
    "before_after", "speedup", "best_config", "sweep_verdict", "write_rows", "read_rows",
    "markdown_table", "plot_tuning",
]

COLUMNS = (
    "experiment", "setting", "measure", "device", "batch_size", "num_workers", "threads", "pin_memory",
    "persistent_workers", "prefetch_factor", "data_on_device", "precision", "tf32", "channels_last",
    "compile", "samples", "seconds",
    "samples_per_s", "samples_per_s_min", "samples_per_s_max", "peak_mem_mb", "status", "note",
)
_INT = {"batch_size", "num_workers", "threads", "prefetch_factor", "samples"}
_FLOAT = {"seconds", "samples_per_s", "samples_per_s_min", "samples_per_s_max", "peak_mem_mb"}
_BOOL = {"pin_memory", "persistent_workers", "data_on_device", "tf32", "channels_last", "compile"}


# --------------------------------------------------------------------------- configuration

@dataclasses.dataclass(frozen=True)
class Config:
    """One training configuration: the knobs this lesson turns.

    ``threads`` is the size of PyTorch's intra-op thread pool in the training process
    (``None``: leave it as it is, see :func:`set_threads`); DataLoader workers use one thread
    each, so ``threads + num_workers`` above the task's CPUs oversubscribes them.
    ``precision`` is ``"fp32"``, ``"bf16"`` or ``"fp16"`` (autocast; fp16 only on a GPU, with
    a gradient scaler). ``prefetch_factor`` ``None`` means PyTorch's default (2 batches per
    worker). ``persistent_workers``/``prefetch_factor`` only matter with ``num_workers > 0``,
    ``pin_memory`` only when batches are copied to a GPU (then the copy is ``non_blocking``).
    ``data_on_device`` makes the batches on the device instead (:class:`DeviceBatches`; no
    DataLoader). ``tf32`` lets a GPU's matrix products and convolutions use TF32 (``False``:
    strict float32, also for cuDNN); ``channels_last`` stores images as NHWC.
    """

    batch_size: int = 32
    num_workers: int = 0
    threads: int | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    data_on_device: bool = False
    precision: str = "fp32"
    tf32: bool = False
    channels_last: bool = False
    compile: bool = False

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    def fields(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Config:
        """The configuration a result row was measured with."""
        names = [f.name for f in dataclasses.fields(cls)]
        values = {k: _parse(k, row[k]) for k in names if k in row and row[k] not in (None, "")}
        return cls(**values)


def _row(experiment: str, setting: str, measure: str, cfg: Config, dev: str, **values: Any) -> dict[str, Any]:
    row = dict.fromkeys(COLUMNS)
    row.update(experiment=experiment, setting=setting, measure=measure, device=dev, **cfg.fields())
    row.update(status="ok", note="")
    row.update(values)
    return row


# --------------------------------------------------------------------------- hardware

def device() -> str:
    """``"cuda"`` when PyTorch can use a GPU here, otherwise ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def gpu_note(dev: str, env: Mapping[str, str] | None = None) -> str:
    """What the GPU Slurm gave is, in words: ``"GPU 0: NVIDIA H200"``; on a machine with no GPU
    (the local Slurm on a laptop) ``"GPU slot 0, no device: runs on the CPU"``; ``"no GPU"`` when the
    job asked for none. (``CUDA_VISIBLE_DEVICES=0`` is an index, not a count.)"""
    env = os.environ if env is None else env
    given = (env.get("CUDA_VISIBLE_DEVICES") or "").strip()
    if not given:
        return "no GPU"
    if dev == "cuda":
        import torch

        return f"GPU {given}: {torch.cuda.get_device_name(0)}"
    return f"GPU slot {given}, no device: runs on the CPU"


def cpus_for_job(env: Mapping[str, str] | None = None) -> int:
    """The CPUs this task may use: ``SLURM_CPUS_PER_TASK`` inside a job (what ``-c`` asked for).

    Outside a job (or when the job did not ask with ``--cpus-per-task``) it is the CPUs this
    process may run on (``os.sched_getaffinity``). Never ``os.cpu_count()``: on a compute node
    that counts every core of the node, including the ones other people's jobs are using.
    """
    env = os.environ if env is None else env
    value = (env.get("SLURM_CPUS_PER_TASK") or "").strip()
    if value:
        try:
            cpus = int(value)
        except ValueError:
            raise ValueError(f"SLURM_CPUS_PER_TASK={value!r} is not a whole number") from None
        if cpus > 0:
            return cpus
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)  # macOS/Windows have no affinity call


def dataloader_workers(env: Mapping[str, str] | None = None, reserve: int = 0) -> int:
    """DataLoader workers for this task: one per CPU Slurm gave it, minus ``reserve``.

    The Alliance guide's rule: as many workers as ``--cpus-per-task``. Pass ``reserve=1`` to
    keep a CPU for the training process itself (useful when it computes on the CPU).
    """
    return max(0, cpus_for_job(env) - reserve)


def set_threads(env: Mapping[str, str] | None = None) -> int:
    """Let PyTorch's intra-op thread pool use exactly the CPUs of this task; returns that count."""
    import torch

    cpus = cpus_for_job(env)
    torch.set_num_threads(cpus)
    return cpus


def precisions(dev: str | None = None) -> list[str]:
    """The precisions worth comparing on this device (bf16 only where it is supported)."""
    import torch

    dev = dev or device()
    if dev == "cuda":
        return ["fp32", "fp16"] + (["bf16"] if torch.cuda.is_bf16_supported() else [])
    return ["fp32", "bf16"]


# --------------------------------------------------------------------------- data and model

class SyntheticImages:
    """A map-style dataset of ``n`` labelled images generated on demand (nothing downloaded).

    Sample ``i`` is always the same image: class prototype + noise, then ``work`` rounds of
    augmentation (random shift, random flip, 3x3 blur) and normalisation. ``work`` sets how
    much CPU a sample costs, standing in for decoding and augmenting a real image.
    """

    def __init__(self, n: int = 512, size: int = 32, classes: int = 10, work: int = 6, seed: int = 0):
        if n < 1 or size < 4 or classes < 2 or work < 0:
            raise ValueError("need n >= 1, size >= 4, classes >= 2, work >= 0")
        self.n, self.size, self.classes, self.work, self.seed = n, size, classes, work, seed
        self._protos = None

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return (f"SyntheticImages(n={self.n}, size={self.size}, classes={self.classes}, "
                f"work={self.work}, seed={self.seed})")

    def spec(self) -> dict[str, int]:
        return {"n": self.n, "size": self.size, "classes": self.classes, "work": self.work, "seed": self.seed}

    def _prototypes(self):
        import torch

        if self._protos is None:
            g = torch.Generator().manual_seed(self.seed)
            self._protos = torch.randn(self.classes, 3, self.size, self.size, generator=g)
        return self._protos

    def __getitem__(self, i: int):
        import torch
        if not 0 <= i < self.n:
            raise IndexError(i)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i + 1)
        label = int(torch.randint(self.classes, (), generator=g))
        img = self._prototypes()[label] + 0.8 * torch.randn(3, self.size, self.size, generator=g)
        for _ in range(self.work):
            dx, dy = torch.randint(-2, 3, (2,), generator=g).tolist()
            img = torch.roll(img, shifts=(dy, dx), dims=(1, 2))
            if float(torch.rand((), generator=g)) < 0.5:
                img = img.flip(2)
            img = 0.5 * img + 0.25 * (img.roll(1, 1) + img.roll(1, 2))  # a cheap blur
        img = (img - img.mean()) / (img.std() + 1e-6)
        return img, label


def make_model(size: int = 32, classes: int = 10, width: int = 16):
    """A small CNN: two conv blocks and a linear classifier (about 25k parameters at width 16)."""
    from torch import nn

    if size % 4:
        raise ValueError("size must be a multiple of 4 (two 2x2 poolings)")
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * (size // 4) ** 2, classes),
    )


class DeviceBatches:
    """Batches of ``dataset``'s kind made on ``dev`` itself: one epoch of ``len(dataset) // batch``.

    The same recipe as :class:`SyntheticImages` (class prototype + noise, ``work`` rounds of
    shift, flip and blur, then normalisation), vectorised over the batch on the device (one shift
    per batch, a flip per sample), so no CPU worker stands between the data and a GPU. For real
    data the same fix is to keep the decoded dataset on the GPU and augment it there.
    """

    def __init__(self, dataset, batch_size: int, dev: str, seed: int = 0):
        if len(dataset) < batch_size:
            raise ValueError(f"dataset has {len(dataset)} samples, fewer than one batch of {batch_size}")
        import torch

        self.data, self.batch_size, self.dev = dataset, batch_size, dev
        self.protos = dataset._prototypes().to(dev)
        self.gen = torch.Generator(device=dev).manual_seed(seed)
        self.shifts = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return len(self.data) // self.batch_size

    def __iter__(self):
        for _ in range(len(self)):
            yield self._batch()

    def _batch(self):
        import torch

        n, size, g = self.batch_size, self.data.size, self.gen
        labels = torch.randint(self.data.classes, (n,), device=self.dev, generator=g)
        img = self.protos[labels] + 0.8 * torch.randn(n, 3, size, size, device=self.dev, generator=g)
        for _ in range(self.data.work):
            dx, dy = torch.randint(-2, 3, (2,), generator=self.shifts).tolist()  # on the CPU: no sync
            img = torch.roll(img, shifts=(dy, dx), dims=(2, 3))
            flip = torch.rand(n, 1, 1, 1, device=self.dev, generator=g) < 0.5
            img = torch.where(flip, img.flip(3), img)
            img = 0.5 * img + 0.25 * (img.roll(1, 2) + img.roll(1, 3))
        mean = img.mean(dim=(1, 2, 3), keepdim=True)
        return (img - mean) / (img.std(dim=(1, 2, 3), keepdim=True) + 1e-6), labels


def make_loader(dataset, cfg: Config, shuffle: bool = True, seed: int = 0, dev: str | None = None):
    """A DataLoader for ``cfg`` (options that need workers are left out when there are none),
    or :class:`DeviceBatches` on ``dev`` when ``cfg.data_on_device``."""
    import torch
    from torch.utils.data import DataLoader

    if cfg.data_on_device:
        return DeviceBatches(dataset, cfg.batch_size, dev or device(), seed)

    kwargs: dict[str, Any] = {"batch_size": cfg.batch_size, "shuffle": shuffle, "drop_last": True,
                              "num_workers": cfg.num_workers, "pin_memory": cfg.pin_memory,
                              "generator": torch.Generator().manual_seed(seed)}
    if cfg.num_workers > 0:
        kwargs["persistent_workers"] = cfg.persistent_workers
        if cfg.prefetch_factor is not None:
            kwargs["prefetch_factor"] = cfg.prefetch_factor
    if len(dataset) < cfg.batch_size:
        raise ValueError(f"dataset has {len(dataset)} samples, fewer than one batch of {cfg.batch_size}")
    return DataLoader(dataset, **kwargs)


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


def _synthetic_batch(batch: int, dev: str, size: int = 32, classes: int = 10):
    import torch

    g = torch.Generator(device=dev).manual_seed(batch)
    x = torch.randn(batch, 3, size, size, device=dev, generator=g)
    y = torch.randint(classes, (batch,), device=dev, generator=g)
    return x, y


# --------------------------------------------------------------------------- measurements

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


def profile_split(cfg: Config, dataset, **kw: Any) -> list[dict[str, Any]]:
    """Where a training step's time goes: data loading alone, the model step alone, both together.

    Rows (experiment ``profile``): ``data loading only`` iterates the DataLoader without
    training; ``model step only`` trains on one batch already on the device; ``training loop``
    does both, as training does. ``seconds`` is per batch. With ``num_workers=0`` the loop
    takes about the sum of the two; with workers, loading overlaps the step.
    Keywords: ``dev``, ``batches`` (6), ``max_seconds`` (1.5: a part stops after this long).
    """
    return _with_threads(_profile_split, cfg, dataset, **kw)


def profile_ops(cfg: Config, dataset, **kw: Any) -> list[dict[str, Any]]:
    """The operators that take the most time in a few training steps, from ``torch.profiler``.

    Returns ``{"name", "calls", "self_ms", "share"}`` rows sorted by self time (CPU time, or
    GPU time on a GPU), after the two labelled ranges ``[data]`` (loading a batch) and
    ``[step]`` (the model step). Keywords: ``dev``, ``steps`` (3), ``top`` (8), ``max_batch``
    (16): the profiler keeps every operator call (kilobytes of memory and tens of microseconds
    of Python each to summarise) and the dataset makes hundreds of calls per sample, so larger
    batches are profiled at this size. ``trace``: also save every call on a timeline there
    (Chrome's trace format, read by Perfetto and ``chrome://tracing``; :func:`trace_summary`).
    """
    return _with_threads(_profile_ops, cfg, dataset, **kw)


def trace_summary(path: str | os.PathLike) -> str:
    """What a profiler trace holds: its size, events, the span it covers, the ``[data]``/``[step]`` ranges."""
    trace = Path(path)
    events = json.loads(trace.read_text())["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and "dur" in e]
    span_ms = (max(e["ts"] + e["dur"] for e in timed) - min(e["ts"] for e in timed)) / 1e3
    ranges = {}
    for e in timed:
        if e.get("name") in ("data", "step"):
            ranges.setdefault(e["name"], []).append(e["dur"] / 1e3)
    lines = [f"{trace.name}: {trace.stat().st_size / 1e6:.1f} MB, {len(timed):,} timed events over {span_ms:.1f} ms"]
    lines += [f"  [{name}] x{len(d)}: " + ", ".join(f"{ms:.1f} ms" for ms in d) for name, d in sorted(ranges.items())]
    return "\n".join(lines)


def write_tensorboard(logdir: str | os.PathLike, rows: Sequence[Mapping[str, Any]]) -> bool:
    """The batch-size sweep and the untuned-vs-tuned loop as TensorBoard scalars (samples/s; the
    step is the batch size, and 0/1 for before/after). False where ``tensorboard`` is missing."""
    from hpcnb.lessons import tensorboard

    board = tensorboard.writer(logdir)
    if board is None:
        return False
    for r in rows:
        if r.get("status", "ok") != "ok" or not r.get("samples_per_s"):
            continue
        if r["experiment"] == "batch_size":
            board.add_scalar("batch_size/samples_per_s", float(r["samples_per_s"]), int(r["batch_size"]))
    for i, r in enumerate(x for x in rows if x["experiment"] == "before_after"):
        board.add_scalar("before_after/samples_per_s", float(r["samples_per_s"]), i)
    board.close()
    return True


def _is_oom(exc: BaseException) -> bool:
    import torch

    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, (MemoryError, *((oom,) if oom else ()))) or "out of memory" in str(exc).lower()


def stopped_growing(rows: Sequence[Mapping[str, Any]], patience: int = 2) -> bool:
    """Whether the last ``patience`` successful rows all failed to beat the best row before them
    beyond the spread (their slowest block no faster than its fastest): the throughput has levelled off."""
    ok = [r for r in rows if r.get("status", "ok") == "ok" and r.get("samples_per_s")]
    if len(ok) <= patience:
        return False
    best = max(ok[:-patience], key=lambda r: float(r["samples_per_s"]))
    return all(_extremes(r)[0] <= _extremes(best)[1] for r in ok[-patience:])


def sweep_batch_size(cfg: Config, *, sizes: Sequence[int] | None = None, dev: str | None = None,
                     seconds: float = 0.4, max_batch: int | None = None,
                     patience: int | None = 2) -> list[dict[str, Any]]:
    """Model-step throughput for growing batch sizes (experiment ``batch_size``).

    Default sizes: 16 ... 256 on a CPU (time, not memory, is the limit there); on a GPU the
    batch doubles from 64 up to ``max_batch`` (default 2**20). The sweep ends once the throughput
    has stopped growing for ``patience`` sizes (:func:`stopped_growing`; ``None``: never), the
    last row's note saying so: on a big GPU that comes long before its memory runs out.
    An out-of-memory error is caught, reported as a row with status ``OOM``, and ends the sweep.
    Another error at a size after one that worked (e.g. a kernel that cannot index more than
    2**31 elements) ends it too, as a ``failed`` row with the message; at the first size it is raised.
    """
    import gc

    import torch

    dev = dev or device()
    if sizes is None:
        top = max_batch or (2**20 if dev == "cuda" else 256)
        start = 64 if dev == "cuda" else 16
        sizes = [start * 2**k for k in range(40) if start * 2**k <= top]
    rows: list[dict[str, Any]] = []
    for size in sizes:
        c = cfg.replace(batch_size=int(size))
        failed: BaseException | None = None
        try:
            rows.append(measure_step(c, dev=dev, seconds=seconds, experiment="batch_size"))
        except (RuntimeError, MemoryError) as exc:  # torch.cuda.OutOfMemoryError is a RuntimeError
            if not _is_oom(exc) and not rows:
                raise
            failed = exc
        if failed is None and patience and stopped_growing(rows, patience):
            rows[-1]["note"] = f"throughput stopped growing for {patience} sizes: the sweep ends here"
            break
        if failed is not None:
            oom, message = _is_oom(failed), str(failed).splitlines()[0][:160]
            failed = None
            gc.collect()
            if dev == "cuda":
                torch.cuda.empty_cache()
            rows.append(_row("batch_size", str(size), "step", c, dev, status="OOM" if oom else "failed",
                             note=f"{'out of memory' if oom else 'failed'} at batch {size}: {message}"))
            break
    return rows


def pick_batch(rows: Iterable[Mapping[str, Any]], tolerance: float = 0.10, cap: int | None = 1024) -> int:
    """The smallest batch whose step throughput is within ``tolerance`` of the best one (<= ``cap``).

    Past that knee a bigger batch buys little speed but changes training (learning rate,
    generalisation) and costs memory.
    """
    ok = [r for r in rows if r.get("status", "ok") == "ok" and r.get("samples_per_s")
          and (cap is None or int(r["batch_size"]) <= cap)]
    if not ok:
        raise ValueError("no successful batch-size measurement to pick from")
    best = max(float(r["samples_per_s"]) for r in ok)
    good = [int(r["batch_size"]) for r in ok if float(r["samples_per_s"]) >= (1 - tolerance) * best]
    return min(good)


def best_config(rows: Iterable[Mapping[str, Any]], min_gain: float = 0.05) -> Config:
    """The configuration of the fastest row, unless it is not clearly faster than the *first* row.

    The first row is the current setting: a change is adopted only when it is at least
    ``min_gain`` (5 %) faster *and*, where the rows carry their spread (``samples_per_s_min`` and
    ``_max``), its slowest block beats the current setting's fastest: never because it won by a
    hair or by luck. :func:`sweep_verdict` says which, in words.
    """
    first, best, why = _judge_sweep(rows, min_gain)
    return Config.from_row(first if why else best)


def sweep_verdict(rows: Iterable[Mapping[str, Any]], min_gain: float = 0.05) -> str:
    """Which setting :func:`best_config` keeps, and why, with the speed-up's range."""
    first, best, why = _judge_sweep(rows, min_gain)
    if why:
        return f"kept the current setting ({first['setting']}): {why}"
    ratio, low, high, _ = speedup(first, best)
    return f"kept {best['setting']}: {ratio:.2f}x ({low:.2f}-{high:.2f}x) the samples/s of {first['setting']}"


Row = Mapping[str, Any]


def _judge_sweep(rows: Iterable[Row], min_gain: float) -> tuple[Row, Row, str]:
    """(the current row, the fastest row, why the fastest is not kept: "" when it is)."""
    ok = [r for r in rows if r.get("status", "ok") == "ok" and r.get("samples_per_s")]
    if not ok:
        raise ValueError("no successful measurement to pick from")
    first, best = ok[0], max(ok, key=lambda r: float(r["samples_per_s"]))
    if best is first:
        return first, best, "it was the fastest"
    ratio, low, high, _ = speedup(first, best)
    if ratio < 1 + min_gain:
        return first, best, f"{best['setting']} was {ratio:.2f}x, not {min_gain:.0%} faster"
    if low <= 1:
        return first, best, f"{best['setting']} was {ratio:.2f}x, but its range {low:.2f}-{high:.2f}x covers 1x"
    return first, best, ""


def _profile_split(cfg: Config, dataset, *, dev: str | None = None, batches: int = 6,
                   max_seconds: float = 1.5, experiment: str = "profile") -> list[dict[str, Any]]:
    dev = dev or device()
    trainer = _Trainer(cfg, dev, size=dataset.size, classes=dataset.classes)
    n = min(batches, len(dataset) // cfg.batch_size)
    if n < 1:
        raise ValueError("dataset smaller than one batch")

    def timed(batches_of) -> tuple[float, int, dict[str, float]]:
        """Seconds per batch over up to ``n`` batches (fewer once ``max_seconds`` have passed),
        the batches done, and the spread over the batches (:func:`_block_rates`)."""
        _sync(dev)
        start, ends = time.perf_counter(), []
        for _ in batches_of():
            _sync(dev)
            ends.append(((len(ends) + 1) * cfg.batch_size, time.perf_counter()))
            if len(ends) == n or ends[-1][1] - start > max_seconds:
                break
        return (ends[-1][1] - start) / len(ends), len(ends), _block_rates(start, ends)

    x, y = trainer.to_device(*next(iter(make_loader(dataset, cfg.replace(num_workers=0), dev=dev))))
    for _ in range(2):
        trainer.step(x, y)

    def load_only():
        yield from make_loader(dataset, cfg, dev=dev)

    def step_only():
        while True:
            yield trainer.step(x, y)

    def loop():
        for xb, yb in make_loader(dataset, cfg, dev=dev):
            yield trainer.step(*trainer.to_device(xb, yb))

    parts = {"data loading only": timed(load_only), "model step only": timed(step_only),
             "training loop": timed(loop)}
    total = parts["training loop"][0]
    return [_row(experiment, name, "profile", cfg, dev, samples=done * cfg.batch_size, seconds=sec,
                 samples_per_s=cfg.batch_size / sec, note=f"{100 * sec / total:.0f}% of a loop step", **spread)
            for name, (sec, done, spread) in parts.items()]


def bottleneck(rows: Iterable[Mapping[str, Any]]) -> tuple[str, str]:
    """Which part of :func:`profile_split`'s rows holds the training loop back, and a sentence.

    The slower of *data loading only* and *model step only* is the bottleneck: ``"data
    loading"`` or ``"the device"`` when one's fastest batch is slower than the other's slowest,
    ``"no conclusion"`` when their spreads overlap. The sentence adds the loop's rate as a
    share of the model step alone: what a perfect loader would reach.
    """
    from .spread import ratio_range, verdict

    parts = {r["setting"]: r for r in rows}
    try:
        load, step, loop = (parts[k] for k in ("data loading only", "model step only", "training loop"))
    except KeyError as missing:
        raise ValueError(f"not profile_split rows: no {missing} row") from None
    _, low, high = ratio_range(_extremes(step), _extremes(load))  # > 1: the step is faster than loading
    name = verdict(low, high, "data loading", "the device", "no conclusion")
    rate = float(step["samples_per_s"])
    return name, (f"bottleneck: {name} (data loading alone {load['samples_per_s']:,.0f} samples/s, "
                  f"model step alone {rate:,.0f}); the training loop runs {loop['samples_per_s']:,.0f} "
                  f"samples/s, {loop['samples_per_s'] / rate:.1%} of the model step alone")


def _profile_ops(cfg: Config, dataset, *, dev: str | None = None, steps: int = 3, top: int = 8,
                 max_batch: int | None = 16, trace: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    if max_batch and cfg.batch_size > max_batch:
        cfg = cfg.replace(batch_size=max_batch)
    from torch.profiler import ProfilerActivity, profile, record_function

    dev = dev or device()
    trainer = _Trainer(cfg, dev, size=dataset.size, classes=dataset.classes)
    loader = make_loader(dataset, cfg, dev=dev)
    x, y = trainer.to_device(*next(iter(make_loader(dataset, cfg.replace(num_workers=0), dev=dev))))
    trainer.step(x, y)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    with profile(activities=activities) as prof:
        it = iter(loader)
        for _ in range(min(steps, len(loader))):
            with record_function("data"):
                xb, yb = next(it)
            with record_function("step"):
                trainer.step(*trainer.to_device(xb, yb))
        _sync(dev)
    del it, loader
    if trace:
        Path(trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    gpu = dev == "cuda"
    events = prof.key_averages()

    def self_us(e) -> float:
        if gpu:
            return float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)))
        return float(e.self_cpu_time_total)

    ranges = {e.key: float(e.cpu_time_total) for e in events if e.key in ("data", "step")}
    total = sum(ranges.values()) or sum(self_us(e) for e in events) or 1.0
    ops = sorted((e for e in events if e.key not in ("data", "step") and not e.key.startswith("ProfilerStep")),
                 key=self_us, reverse=True)[:top]
    del prof
    rows = [{"name": f"[{k}] (whole range)", "calls": steps, "self_ms": v / 1e3, "share": v / total,
             "batch_size": cfg.batch_size} for k, v in sorted(ranges.items())]
    rows += [{"name": e.key, "calls": int(e.count), "self_ms": self_us(e) / 1e3, "share": self_us(e) / total,
              "batch_size": cfg.batch_size} for e in ops]
    return rows


def sweep_workers(cfg: Config, dataset, *, workers: Sequence[int] | None = None, dev: str | None = None,
                  epochs: int = 2, share_cpus: bool = True) -> list[dict[str, Any]]:
    """The training loop with 0 ... :func:`dataloader_workers` DataLoader workers (experiment ``num_workers``).

    The current setting (``cfg.num_workers``) is measured first. With ``share_cpus`` (default)
    the training process keeps ``max(1, CPUs - workers)`` threads, so that workers and compute
    threads together do not ask for more CPUs than the task has.
    """
    dev = dev or device()
    cpus = cpus_for_job()
    if workers is None:
        workers = range(0, dataloader_workers() + 1)
    order = [cfg.num_workers] + [w for w in workers if w != cfg.num_workers]
    rows = []
    for w in order:
        c = cfg.replace(num_workers=w)
        if share_cpus:
            c = c.replace(threads=max(1, cpus - w))
        rows.append(measure_loop(c, dataset, dev=dev, epochs=epochs, experiment="num_workers", setting=str(w)))
    return rows


def sweep_threads(cfg: Config, dataset, *, threads: Sequence[int] | None = None, dev: str | None = None,
                  epochs: int = 2) -> list[dict[str, Any]]:
    """The training loop with 1 ... CPUs intra-op threads in the training process (experiment ``threads``).

    The current setting is measured first. More threads than free CPUs makes PyTorch's threads
    wait for each other (oversubscription): then fewer threads are faster.
    """
    dev = dev or device()
    if threads is None:
        threads = range(1, cpus_for_job() + 1)
    import torch

    current = cfg.threads or torch.get_num_threads()
    order = [current] + [t for t in threads if t != current]
    return [measure_loop(cfg.replace(threads=t), dataset, dev=dev, epochs=epochs, experiment="threads",
                         setting=str(t)) for t in order]


def compare_loader_options(cfg: Config, dataset, *, dev: str | None = None, epochs: int = 3,
                           prefetch: int = 4) -> list[dict[str, Any]]:
    """The DataLoader's other knobs, each tried on top of ``cfg`` (experiment ``loader``).

    ``persistent_workers=True`` keeps the workers alive between epochs; ``prefetch_factor``
    batches each worker prepares ahead (default 2); ``pin_memory=True`` puts batches in
    page-locked memory so the copy to a GPU can be asynchronous; ``data_on_device=True`` (GPU
    only) makes the batches on the GPU (:class:`DeviceBatches`), with no CPU worker in between.
    Options that cannot apply here are reported as ``skipped`` rows with the reason.
    """
    dev = dev or device()
    rows = [measure_loop(cfg, dataset, dev=dev, epochs=epochs, experiment="loader", setting="current")]
    trials: list[tuple[str, Config, str]] = []
    if cfg.num_workers > 0:
        if not cfg.persistent_workers:
            trials.append(("persistent_workers=True", cfg.replace(persistent_workers=True), ""))
        trials.append((f"prefetch_factor={prefetch}", cfg.replace(prefetch_factor=prefetch), ""))
    else:
        for name in ("persistent_workers=True", f"prefetch_factor={prefetch}"):
            rows.append(_row("loader", name, "loop", cfg, dev, status="skipped",
                             note="needs DataLoader workers (num_workers > 0); the best setting here was 0"))
    if dev == "cuda":
        if not cfg.pin_memory:
            trials.append(("pin_memory=True", cfg.replace(pin_memory=True), ""))
        if not cfg.data_on_device:
            trials.append(("data_on_device=True", cfg.replace(data_on_device=True), ""))
    else:
        rows.append(_row("loader", "pin_memory=True", "loop", cfg, dev, status="skipped",
                         note="pinned memory only speeds up host-to-GPU copies; no GPU here"))
        rows.append(_row("loader", "data_on_device=True", "loop", cfg, dev, status="skipped",
                         note="no GPU here: the CPU that computes also makes the data"))
    for name, c, _ in trials:
        rows.append(measure_loop(c, dataset, dev=dev, epochs=epochs, experiment="loader", setting=name))
    return rows


def compare_precision(cfg: Config, dataset, *, dev: str | None = None, epochs: int = 2,
                      candidates: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The training loop in each precision of :func:`precisions` (experiment ``precision``).

    fp32 is plain float32; bf16/fp16 run the forward pass under ``torch.autocast`` (weights
    stay float32); fp16 also scales the loss (``GradScaler``) so small gradients survive.
    """
    dev = dev or device()
    names = list(candidates or precisions(dev))
    order = [cfg.precision] + [p for p in names if p != cfg.precision]
    return [measure_loop(cfg.replace(precision=p), dataset, dev=dev, epochs=epochs,
                         experiment="precision", setting=p) for p in order]


def compare_device_options(cfg: Config, dataset, *, dev: str | None = None,
                           epochs: int = 2) -> list[dict[str, Any]]:
    """TF32 (GPU only: a ``skipped`` row on a CPU) and ``channels_last``, each on top of ``cfg``
    (experiment ``device``; the current setting first)."""
    dev = dev or device()
    rows = [measure_loop(cfg, dataset, dev=dev, epochs=epochs, experiment="device", setting="current")]
    if dev != "cuda":
        rows.append(_row("device", "tf32=True", "loop", cfg, dev, status="skipped",
                         note="TF32 is a format of NVIDIA GPUs' tensor cores (A100 and later); no GPU here"))
    for name in ("tf32", "channels_last"):
        if not getattr(cfg, name) and (name != "tf32" or dev == "cuda"):
            rows.append(measure_loop(cfg.replace(**{name: True}), dataset, dev=dev, epochs=epochs,
                                     experiment="device", setting=f"{name}=True"))
    return rows


# --------------------------------------------------------------------------- torch.compile

def compile_available() -> tuple[bool, str]:
    """Whether ``torch.compile`` can work here, and why not when it cannot."""
    import torch

    if not hasattr(torch, "compile"):
        return False, f"torch {torch.__version__} has no torch.compile (needs 2.0 or newer)"
    if sys.platform == "win32":
        return False, "torch.compile's default backend does not support Windows here"
    if not torch.cuda.is_available():
        cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
        if not cxx:
            return False, "no C++ compiler (g++) found: inductor compiles CPU kernels with one"
    return True, ""


def compile_budget(dev: str | None = None) -> float:
    """Seconds for compiling and measuring ``torch.compile``: 120 on a GPU (compiling the training
    step alone took 16.7 s on an H200, and the GPU's kernels are tuned too), 30 on a CPU."""
    return 120.0 if (dev or device()) == "cuda" else 30.0


def measure_compile(cfg: Config, dataset, *, dev: str | None = None, epochs: int = 2,
                    budget_s: float | None = None) -> list[dict[str, Any]]:
    """``torch.compile`` vs eager on the training loop, in a separate process limited to ``budget_s``
    (``None``: :func:`compile_budget` of the device).

    Compiling takes seconds to minutes (much less the second time: inductor caches its
    kernels), so it runs in a child process that is stopped when the budget runs out. Rows
    (experiment ``compile``): ``eager`` and ``compiled`` (with the compile time in the note),
    or one ``skipped``/``failed`` row saying why. Whether compiling *helps* is for the caller
    to judge from the rows (:func:`best_config`).
    """
    dev = dev or device()
    budget_s = compile_budget(dev) if budget_s is None else budget_s
    ok, why = compile_available()
    if not ok:
        return [_row("compile", "compiled", "loop", cfg.replace(compile=True), dev, status="skipped",
                     note=f"torch.compile unavailable: {why}")]
    env = dict(os.environ)
    if cpus_for_job() <= 4:  # a pool of compile workers costs more than it saves on few CPUs
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    args = [sys.executable, "-m", "hpcnb.lessons.tuning", "compile-probe", json.dumps(cfg.fields()),
            json.dumps(dataset.spec()), str(epochs), dev]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return [_row("compile", "compiled", "loop", cfg.replace(compile=True), dev, status="skipped",
                     note=(f"compiling and measuring took longer than the {budget_s:g} s budget on {dev}; "
                           "inductor caches compiled kernels, so a second run is faster"))]
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1][:200]
        return [_row("compile", "compiled", "loop", cfg.replace(compile=True), dev, status="failed",
                     note=f"torch.compile failed: {tail}")]
    return json.loads(lines[-1])["rows"]


def _compile_probe(cfg_json: str, data_json: str, epochs: str, dev: str) -> None:
    cfg = Config(**json.loads(cfg_json))
    dataset = SyntheticImages(**json.loads(data_json))
    set_threads()
    eager = measure_loop(cfg.replace(compile=False), dataset, dev=dev, epochs=int(epochs),
                         experiment="compile", setting="eager")
    start = time.perf_counter()
    trainer = _Trainer(cfg.replace(compile=True), dev, size=dataset.size, classes=dataset.classes)
    trainer.step(*_synthetic_batch(cfg.batch_size, dev, dataset.size, dataset.classes))
    _sync(dev)
    compile_s = time.perf_counter() - start
    compiled = measure_loop(cfg.replace(compile=True), dataset, dev=dev, epochs=int(epochs),
                            experiment="compile", setting="compiled", trainer=trainer)
    compiled["note"] = f"compiling took {compile_s:.1f} s (not counted in samples/s)"
    eager["note"] = "same process as the compiled run"
    print(json.dumps({"rows": [eager, compiled], "compile_s": compile_s}), flush=True)


# --------------------------------------------------------------------------- before / after

def before_after(before: Config, after: Config, dataset, *, dev: str | None = None, epochs: int = 2,
                 repeats: int = 3) -> list[dict[str, Any]]:
    """Both configurations measured ``repeats`` times, alternately; rows carry the median, and the
    slowest and fastest run (``samples_per_s_min``/``_max``: :func:`speedup` judges with them).

    Alternating spreads slow moments (other processes, a CPU clocking down) over both.
    ``note`` gives the range of the repeats. A ``compile=True`` configuration is measured
    eager here; use :func:`measure_compile` for the compiled figure.
    """
    dev = dev or device()
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(repeats):
        for name, cfg in (("before", before), ("after", after)):
            runs[name].append(measure_loop(cfg.replace(compile=False), dataset, dev=dev, epochs=epochs,
                                           experiment="before_after", setting=name))
    rows = []
    for name, got in runs.items():
        rates = sorted(r["samples_per_s"] for r in got)
        row = dict(got[0])
        row["samples_per_s"] = statistics.median(rates)
        row["samples_per_s_min"], row["samples_per_s_max"] = rates[0], rates[-1]
        row["seconds"] = statistics.median(r["seconds"] for r in got)
        row["note"] = f"median of {repeats}; range {rates[0]:.0f}-{rates[-1]:.0f} samples/s"
        rows.append(row)
    return rows


def _extremes(row: Mapping[str, Any]) -> list[float]:
    """A row's slowest and fastest samples/s (one run only: its median is both)."""
    return [row.get(f"samples_per_s_{end}") or row["samples_per_s"] for end in ("min", "max")]


def speedup(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[float, float, float, str]:
    """``after``'s samples/s over ``before``'s: (median ratio, lowest, highest, verdict), the range
    from the two rows' slowest and fastest runs (:func:`before_after`); a verdict only outside it."""
    from .spread import ratio_range, verdict

    _, low, high = ratio_range(_extremes(after), _extremes(before))
    return (after["samples_per_s"] / before["samples_per_s"], low, high,
            verdict(low, high, "the tuned loop is faster", "the tuned loop is slower",
                    "the spread covers 1x: the tuning did not measurably help"))


# --------------------------------------------------------------------------- rows: CSV, tables, plot

def _parse(column: str, value: Any) -> Any:
    if value is None or value == "":
        return None
    if column in _BOOL:
        return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes")
    if column in _INT:
        return int(float(value))
    if column in _FLOAT:
        return float(value)
    return value


def write_rows(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write result rows as CSV (columns :data:`COLUMNS`; extra keys are dropped)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in COLUMNS})
    return path


def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read rows written by :func:`write_rows`, with numbers and booleans typed again."""
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("experiment", "setting", "samples_per_s") if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not a tuning results file (missing {', '.join(missing)})")
        return [{k: _parse(k, v) for k, v in row.items()} for row in reader]


def _fmt(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def markdown_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None,
                   headers: Mapping[str, str] | None = None) -> str:
    """Rows as a Markdown table (``display(Markdown(...))`` in a notebook)."""
    rows = list(rows)
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0])
    headers = headers or {}
    return markdown.table([headers.get(c, c) for c in columns], ([_fmt(r.get(c)) for c in columns] for r in rows))


def plot_tuning(rows: Iterable[Mapping[str, Any]], title: str = ""):
    """One figure: step throughput vs batch size, each loop experiment as bars, before vs after."""
    import matplotlib.pyplot as plt

    rows = list(rows)
    bs = [r for r in rows if r["experiment"] == "batch_size"]
    groups = [g for g in ("num_workers", "threads", "loader", "precision", "device", "compile")
              if any(r["experiment"] == g and r["status"] == "ok" for r in rows)]
    ba = [r for r in rows if r["experiment"] == "before_after"]
    panels = 1 + len(groups) + (1 if ba else 0)
    fig, axes = plt.subplots(1, panels, figsize=(3.6 * panels, 3.6), squeeze=False)
    axes = axes[0]
    ok = [r for r in bs if r["status"] == "ok"]
    ax = axes[0]
    if ok:
        ax.plot([r["batch_size"] for r in ok], [r["samples_per_s"] for r in ok], "o-")
        ax.set_xscale("log", base=2)
    for r in bs:
        if r["status"] == "OOM":
            ax.axvline(r["batch_size"], color="red", ls="--", label=f"OOM at {r['batch_size']}")
            ax.legend(fontsize=8)
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples/s")
    ax.set_title("model step only", fontsize=10)
    for ax, group in zip(axes[1:], groups):
        got = [r for r in rows if r["experiment"] == group and r["status"] == "ok"]
        ax.bar(range(len(got)), [r["samples_per_s"] for r in got], color="#6fa8dc")
        ax.set_xticks(range(len(got)), [str(r["setting"]) for r in got], rotation=20, ha="right", fontsize=8)
        ax.set_title(f"training loop: {group}", fontsize=10)
    if ba:
        ax = axes[-1]
        ax.bar([r["setting"] for r in ba], [r["samples_per_s"] for r in ba], color=["#999999", "#38761d"][:len(ba)])
        if len(ba) == 2 and ba[0]["samples_per_s"]:
            ax.set_title(f"before vs after: {ba[1]['samples_per_s'] / ba[0]['samples_per_s']:.2f}x", fontsize=10)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "compile-probe":
        _compile_probe(*sys.argv[2:])
    else:
        print("usage: python -m hpcnb.lessons.tuning compile-probe CONFIG_JSON DATASET_JSON EPOCHS DEVICE",
              file=sys.stderr)
        sys.exit(2)
