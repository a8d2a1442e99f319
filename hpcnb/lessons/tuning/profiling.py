"""Where the time goes: data loading vs the model step vs the loop, ``torch.profiler``'s top
operators, and TensorBoard scalars of the rows."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .rows import Config, _extremes, _row
from .hardware import device
from .data import make_loader
from .measure import _Trainer, _block_rates, _sync, _with_threads


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
    from ..spread import ratio_range, verdict

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
