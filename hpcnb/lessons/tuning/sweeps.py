"""Sweeps and comparisons, one row per setting: batch size, workers, threads, loader options,
precision, device options; the verdicts drawn from them, before/after."""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .rows import Config, _extremes, _row
from .hardware import cpus_for_job, dataloader_workers, device, precisions
from .measure import measure_loop, measure_step


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


def speedup(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[float, float, float, str]:
    """``after``'s samples/s over ``before``'s: (median ratio, lowest, highest, verdict), the range
    from the two rows' slowest and fastest runs (:func:`before_after`); a verdict only outside it."""
    from ..spread import ratio_range, verdict

    _, low, high = ratio_range(_extremes(after), _extremes(before))
    return (after["samples_per_s"] / before["samples_per_s"], low, high,
            verdict(low, high, "the tuned loop is faster", "the tuned loop is slower",
                    "the spread covers 1x: the tuning did not measurably help"))
