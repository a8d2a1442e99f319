"""The tuning lesson's results as tidy rows: the columns, :class:`Config` (the knobs turned), and
the rows stored as CSV, shown as a table and drawn."""
from __future__ import annotations

import csv
import dataclasses
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import markdown


COLUMNS = (
    "experiment", "setting", "measure", "device", "batch_size", "num_workers", "threads", "pin_memory",
    "persistent_workers", "prefetch_factor", "data_on_device", "precision", "tf32", "channels_last",
    "compile", "samples", "seconds",
    "samples_per_s", "samples_per_s_min", "samples_per_s_max", "peak_mem_mb", "status", "note",
)


_INT = {"batch_size", "num_workers", "threads", "prefetch_factor", "samples"}


_FLOAT = {"seconds", "samples_per_s", "samples_per_s_min", "samples_per_s_max", "peak_mem_mb"}


_BOOL = {"pin_memory", "persistent_workers", "data_on_device", "tf32", "channels_last", "compile"}


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


def _extremes(row: Mapping[str, Any]) -> list[float]:
    """A row's slowest and fastest samples/s (one run only: its median is both)."""
    return [row.get(f"samples_per_s_{end}") or row["samples_per_s"] for end in ("min", "max")]


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
