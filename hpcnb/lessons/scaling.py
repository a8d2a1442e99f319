"""Lesson 11: scaling curves from a tidy table of runs: speed-up, efficiency, Amdahl, batch/LR
rules.

One row per measured run (CSV columns ``tasks,nodes,seconds[,samples][,kind]``;
any extra columns such as ``job_id`` are kept). ``seconds`` is the wall time of
the measured part only. ``kind`` is ``strong`` (same global work at every task
count) or ``weak`` (same work per task); it defaults to ``strong``. An extra column
``seconds_max`` (the slowest of the run's repeats, ``seconds`` being the fastest) gives
each speed-up its range.
"""

from __future__ import annotations

import csv
import math
import os
import statistics
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from . import markdown

__all__ = [
    "Run", "ScaledRun", "AmdahlFit", "GustafsonFit", "read_runs", "write_runs", "validate_runs",
    "speedup_efficiency", "fit_amdahl", "fit_gustafson", "amdahl_speedup", "gustafson_speedup",
    "gustafson_fraction",
    "lr_scaling", "global_batch", "plot_scaling", "format_table", "shared_cores", "busy_machine_note",
]

def shared_cores() -> int | None:
    """Lesson 11: the cores that every node of the Slurm in use shares, or None. The local
    Slurm's nodes are all this machine: tasks beyond its cores share them, which says nothing
    about the code (fit only up to this count). A real cluster's nodes each have their own."""
    from hpcnb.backend import which_slurm

    return len(os.sched_getaffinity(0)) if which_slurm() == "local" else None


def busy_machine_note(load_before: float) -> str:
    """Lesson 11: a warning when other programs used the cores the local Slurm's runs share
    (load average ``load_before`` taken before the runs); "" on a real cluster or a quiet machine."""
    cores = shared_cores()
    if cores is None:
        return ""
    note = f"load average before the runs: {load_before:.1f}, now: {os.getloadavg()[0]:.1f} ({cores} cores)"
    if load_before > 1:
        note += ("\nother programs were using this machine: expect noisy times (a speed-up below 1 means "
                 "the runs did not get the cores to themselves)")
    return note


COLUMNS = ("tasks", "nodes", "seconds", "samples", "kind")
REQUIRED = ("tasks", "nodes", "seconds")
KINDS = ("strong", "weak")


@dataclass(frozen=True)
class Run:
    """One measured run; ``extra`` keeps any additional CSV columns as strings."""

    tasks: int
    nodes: int
    seconds: float
    samples: int | None = None
    kind: str = "strong"
    extra: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ScaledRun:
    """A run with speed-up and efficiency relative to the smallest task count of its kind.

    ``ideal`` is ``tasks / base_tasks``. Strong: ``speedup = T_base / T``,
    ``efficiency = speedup / ideal``. Weak: ``efficiency = T_base / T`` and
    ``speedup = efficiency * ideal`` (the scaled speed-up). ``throughput`` is
    samples per second when ``samples`` is known. ``speedup_low``/``speedup_high`` are the
    speed-up's range when both runs have ``seconds_max`` (the baseline's fastest over this
    run's slowest, and the other way round), else None.
    """

    tasks: int
    nodes: int
    seconds: float
    samples: int | None
    kind: str
    base_tasks: int
    ideal: float
    speedup: float
    efficiency: float
    throughput: float | None
    speedup_low: float | None = None
    speedup_high: float | None = None


RowLike = Union[Run, Mapping[str, Any]]


# --------------------------------------------------------------------------- table I/O

def validate_runs(rows: Iterable[RowLike], source: str = "rows") -> list[Run]:
    """Convert dicts (e.g. CSV rows) or Runs into validated :class:`Run` objects.

    Raises ``ValueError`` naming the row and column for missing columns,
    non-numeric or non-positive values, unknown ``kind``, ``nodes > tasks``, and
    ``samples`` inconsistent with the kind (strong: equal; weak: equal per task).
    """
    runs: list[Run] = []
    for i, row in enumerate(rows):
        where = f"{source} row {i + 1}"
        if isinstance(row, Run):
            row = {"tasks": row.tasks, "nodes": row.nodes, "seconds": row.seconds,
                   "samples": row.samples, "kind": row.kind, **row.extra}
        missing = [c for c in REQUIRED if c not in row]
        if missing:
            raise ValueError(f"{where}: missing column(s) {', '.join(map(repr, missing))} "
                             f"(have {', '.join(map(repr, row))}); a run needs "
                             "tasks, nodes and seconds (wall time of the measured part)")
        tasks = _positive(row["tasks"], "tasks", where, int)
        nodes = _positive(row["nodes"], "nodes", where, int)
        seconds = _positive(row["seconds"], "seconds", where, float)
        samples = None if _blank(row.get("samples")) else _positive(row["samples"], "samples", where, int)
        kind = "strong" if _blank(row.get("kind")) else str(row["kind"]).strip().lower()
        if kind not in KINDS:
            raise ValueError(f"{where}: kind={row['kind']!r}; use 'strong' (same total work) "
                             "or 'weak' (same work per task)")
        if nodes > tasks:
            raise ValueError(f"{where}: nodes={nodes} > tasks={tasks}; every node runs at "
                             "least one task - check the two columns are not swapped")
        if not _blank(row.get("seconds_max")) and \
                _positive(row["seconds_max"], "seconds_max", where, float) < seconds:
            raise ValueError(f"{where}: seconds_max={row['seconds_max']} < seconds={row['seconds']}; "
                             "seconds is the run's fastest repeat, seconds_max its slowest")
        extra = {k: "" if v is None else str(v) for k, v in row.items() if k not in COLUMNS}
        runs.append(Run(tasks, nodes, seconds, samples, kind, extra))
    if not runs:
        raise ValueError(f"{source}: no runs; add at least one row")
    _check_work(runs, source)
    return runs


def read_runs(path: str | os.PathLike) -> list[Run]:
    """Read and validate a runs CSV (header row required)."""
    path = Path(path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise ValueError(f"{path}: empty file; expected a header like 'tasks,nodes,seconds'")
        missing = [c for c in REQUIRED if c not in reader.fieldnames]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(map(repr, missing))} in header "
                             f"{reader.fieldnames}; add them (seconds = wall time of the measured part)")
        return validate_runs(list(reader), source=str(path))


def write_runs(path: str | os.PathLike, rows: Iterable[RowLike]) -> Path:
    """Validate ``rows`` and write them as CSV (standard columns first, extras after)."""
    runs = validate_runs(rows)
    extras = sorted({k for r in runs for k in r.extra})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*COLUMNS, *extras])
        writer.writeheader()
        for r in runs:
            writer.writerow({"tasks": r.tasks, "nodes": r.nodes, "seconds": repr(r.seconds),
                             "samples": "" if r.samples is None else r.samples,
                             "kind": r.kind, **r.extra})
    return path


# --------------------------------------------------------------------------- analysis

def speedup_efficiency(rows: Iterable[RowLike]) -> list[ScaledRun]:
    """Speed-up and efficiency per run, per kind, relative to that kind's smallest task count.

    With repeated runs at the base task count the baseline is their median (and their
    fastest and slowest bound the range).
    """
    runs = validate_runs(rows)
    out: list[ScaledRun] = []
    for kind in KINDS:
        group = [r for r in runs if r.kind == kind]
        if not group:
            continue
        base_n = min(r.tasks for r in group)
        base = [r for r in group if r.tasks == base_n]
        t_base = statistics.median(r.seconds for r in base)
        base_range = _seconds_range(base)
        for r in sorted(group, key=lambda r: r.tasks):
            ideal = r.tasks / base_n
            # strong: speed-up = T_base / T; weak: the same ratio is the efficiency
            ratio = t_base / r.seconds
            speedup, eff = (ratio, ratio / ideal) if kind == "strong" else (ratio * ideal, ratio)
            low = high = None
            if base_range and (own := _seconds_range([r])):
                scale = 1 if kind == "strong" else ideal
                low, high = scale * base_range[0] / own[1], scale * base_range[1] / own[0]
            thr = None if r.samples is None else r.samples / r.seconds
            out.append(ScaledRun(r.tasks, r.nodes, r.seconds, r.samples, kind, base_n,
                                 ideal, speedup, eff, thr, low, high))
    return out


def _seconds_range(runs: list[Run]) -> tuple[float, float] | None:
    """The fastest and slowest seconds of ``runs``, or None if one lacks ``seconds_max``."""
    if not all(r.extra.get("seconds_max") for r in runs):
        return None
    return min(r.seconds for r in runs), max(float(r.extra["seconds_max"]) for r in runs)


@dataclass(frozen=True)
class AmdahlFit:
    """Least-squares fit of ``T(N) = t1 * (s + (1 - s) / N)`` to strong-scaling runs.

    ``serial_fraction`` is Amdahl's ``s_A``: the serial share of the *one-task*
    run's time (not Gustafson's ``s_G``, see :func:`gustafson_fraction`).
    """

    serial_fraction: float
    t1: float
    rms_residual_s: float
    n_runs: int
    tasks: tuple[int, ...]

    @property
    def max_speedup(self) -> float:
        """Asymptotic speed-up ``1/s`` (infinite when the fit finds no serial part)."""
        return math.inf if self.serial_fraction == 0 else 1.0 / self.serial_fraction

    def seconds(self, n: float) -> float:
        """Predicted wall time at ``n`` tasks."""
        return self.t1 * (self.serial_fraction + (1 - self.serial_fraction) / n)

    def speedup(self, n: float, base: float = 1) -> float:
        """Predicted speed-up at ``n`` tasks relative to ``base`` tasks."""
        return self.seconds(base) / self.seconds(n)

    @property
    def predicted(self) -> dict[int, float]:
        """Predicted speed-up (vs 1 task) at each measured task count."""
        return {n: amdahl_speedup(self.serial_fraction, n) for n in self.tasks}

    @property
    def exact(self) -> bool:
        """True when the runs have only as many task counts as the model has parameters (2).

        The curve then passes through (the mean time at) each task count by
        construction: the residual is only the spread of repeated runs, and the
        agreement is no evidence that Amdahl's law describes the code.
        """
        return len(self.tasks) <= 2

    def __str__(self) -> str:
        cap = "unbounded" if math.isinf(self.max_speedup) else f"{self.max_speedup:.1f}x"
        text = (f"Amdahl fit over {self.n_runs} runs at {len(self.tasks)} task counts: serial fraction "
                f"of the 1-task run s_A = {self.serial_fraction:.3f}, T1 = {self.t1:.3g} s, "
                f"max speed-up 1/s_A = {cap}, rms residual {self.rms_residual_s:.3g} s")
        if self.exact:
            text += ("\n  (2 task counts for 2 parameters: the fit passes through them by construction, "
                     "so its residual is no evidence for the law; measure more task counts to test it)")
        return text


def fit_amdahl(rows: Iterable[RowLike], max_tasks: int | None = None) -> AmdahlFit:
    """Fit the serial fraction ``s`` to strong-scaling runs (closed-form least squares).

    ``T(N) = a + b/N`` is linear in ``a = t1*s`` and ``b = t1*(1-s)``; solving
    the 2x2 normal equations with ``a, b >= 0`` gives ``s = a / (a + b)``,
    which is therefore already in [0, 1]. Needs at least two task counts.
    ``max_tasks`` drops runs with more tasks (e.g. more than the machine has
    cores: oversubscription is not a serial fraction and would bias ``s``).
    """
    runs = [r for r in validate_runs(rows) if r.kind == "strong"]
    if not runs:
        raise ValueError("fit_amdahl: no strong-scaling rows; Amdahl's law describes fixed total "
                         "work - for weak scaling use gustafson_speedup()")
    if max_tasks is not None:
        runs = [r for r in runs if r.tasks <= max_tasks]
        if not runs:
            raise ValueError(f"fit_amdahl: no strong-scaling runs with tasks <= max_tasks={max_tasks}")
    tasks = sorted({r.tasks for r in runs})
    if len(tasks) < 2:
        raise ValueError(f"fit_amdahl: all runs use tasks={tasks[0]}; measure at least two "
                         "different task counts (e.g. 1, 2, 4)")
    x = [1.0 / r.tasks for r in runs]
    y = [r.seconds for r in runs]
    n = len(x)
    sx, sy = sum(x), sum(y)
    sxx = sum(v * v for v in x)
    sxy = sum(u * v for u, v in zip(x, y))
    det = n * sxx - sx * sx
    a = (sxx * sy - sx * sxy) / det
    b = (n * sxy - sx * sy) / det
    if a < 0:  # faster than ideal: best fit with no serial part
        a, b = 0.0, sxy / sxx
    elif b < 0:  # slower with more tasks: everything is serial
        a, b = sy / n, 0.0
    t1 = a + b
    rms = math.sqrt(sum((a + b * u - v) ** 2 for u, v in zip(x, y)) / n)
    return AmdahlFit(a / t1, t1, rms, n, tuple(tasks))


@dataclass(frozen=True)
class GustafsonFit:
    """Least-squares fit of Gustafson's law ``S = s + (1 - s) * k`` to weak-scaling runs.

    ``k = tasks / base_tasks`` and ``S`` is the measured scaled speed-up
    (:func:`speedup_efficiency`). ``serial_fraction`` is Gustafson's ``s_G``: the
    serial share of the time of the *N-task* (scaled) run.
    """

    serial_fraction: float
    rms_residual: float
    n_runs: int
    tasks: tuple[int, ...]
    base_tasks: int

    def speedup(self, n: float) -> float:
        """Predicted scaled speed-up at ``n`` tasks (relative to ``base_tasks``)."""
        return gustafson_speedup(self.serial_fraction, n / self.base_tasks)

    @property
    def exact(self) -> bool:
        """True when only one task count besides the baseline was fitted (one parameter)."""
        return len([n for n in self.tasks if n != self.base_tasks]) <= 1

    def __str__(self) -> str:
        text = (f"Gustafson fit over {self.n_runs} weak runs at tasks {', '.join(map(str, self.tasks))}: "
                f"serial fraction of the N-task run s_G = {self.serial_fraction:.3f}, "
                f"rms residual {self.rms_residual:.3g} (in speed-up)")
        if self.exact:
            text += ("\n  (one task count besides the baseline for 1 parameter: the fit passes through it "
                     "by construction, so it is no evidence for the law; measure more task counts to test it)")
        return text


def fit_gustafson(rows: Iterable[RowLike], max_tasks: int | None = None) -> GustafsonFit:
    """Fit Gustafson's serial fraction ``s_G`` to the scaled speed-ups of weak-scaling runs.

    Minimises ``sum (S_i - s - (1 - s) k_i)^2`` with ``k_i = tasks_i / base_tasks``
    in closed form, clipped to [0, 1]. The baseline (``k = 1``) carries no
    information (``S = 1`` for every ``s``): at least one larger task count is
    needed. ``max_tasks`` drops runs with more tasks (e.g. more than the machine
    has cores), as in :func:`fit_amdahl`.
    """
    runs = validate_runs(rows)
    if not any(r.kind == "weak" for r in runs):
        raise ValueError("fit_gustafson: no weak-scaling rows; Gustafson's law describes work that "
                         "grows with the tasks - for fixed total work use fit_amdahl()")
    scaled = [r for r in speedup_efficiency(runs) if r.kind == "weak"]
    if max_tasks is not None:
        scaled = [r for r in scaled if r.tasks <= max_tasks]
        if not scaled:
            raise ValueError(f"fit_gustafson: no weak-scaling runs with tasks <= max_tasks={max_tasks}")
    base = scaled[0].base_tasks
    informative = [r for r in scaled if r.ideal > 1]
    if not informative:
        raise ValueError(f"fit_gustafson: all runs use tasks={base}; measure at least one larger "
                         "task count (e.g. 2, 4)")
    num = sum((r.ideal - r.speedup) * (r.ideal - 1) for r in informative)
    den = sum((r.ideal - 1) ** 2 for r in informative)
    s = min(1.0, max(0.0, num / den))
    rms = math.sqrt(sum((r.speedup - (s + (1 - s) * r.ideal)) ** 2 for r in scaled) / len(scaled))
    return GustafsonFit(s, rms, len(scaled), tuple(sorted({r.tasks for r in scaled})), base)


def gustafson_fraction(s_amdahl: float, n: float) -> float:
    """Gustafson's ``s_G`` of an ``n``-task run, from Amdahl's ``s_A`` of the same fixed problem.

    Amdahl's ``s_A`` is the serial share of the one-task run's time; split over
    ``n`` tasks, the serial part keeps its time while the rest shrinks ``n``-fold,
    so the serial share of the ``n``-task run is ``s_A / (s_A + (1 - s_A) / n)``.
    With it, ``gustafson_speedup(s_G, n) == amdahl_speedup(s_A, n)``: the two laws
    describe one model from different reference runs. A weak-scaling run is a
    different (larger) problem: measure its ``s_G`` with :func:`fit_gustafson`.
    """
    _check_fraction(s_amdahl)
    _check_tasks(n)
    return s_amdahl / (s_amdahl + (1 - s_amdahl) / n)


def amdahl_speedup(s: float, n: float) -> float:
    """Amdahl's law: speed-up ``1 / (s + (1 - s)/n)`` for serial fraction ``s``."""
    _check_fraction(s)
    _check_tasks(n)
    return 1.0 / (s + (1 - s) / n)


def gustafson_speedup(s: float, n: float) -> float:
    """Gustafson's law (weak scaling): scaled speed-up ``s + (1 - s) * n``.

    ``s`` is the serial share of the *n-task* run's time (``s_G``), not Amdahl's
    ``s_A`` of the one-task run: convert with :func:`gustafson_fraction` or fit
    it to weak-scaling runs with :func:`fit_gustafson`.
    """
    _check_fraction(s)
    _check_tasks(n)
    return s + (1 - s) * n


def global_batch(per_device: int, tasks: int, accumulation: int = 1) -> int:
    """Global batch size = per-device batch x data-parallel tasks x accumulation steps."""
    for name, v in (("per_device", per_device), ("tasks", tasks), ("accumulation", accumulation)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"global_batch: {name} must be a positive integer, got {v!r}")
    return per_device * tasks * accumulation


def lr_scaling(base_lr: float, base_batch: int, global_batch: int, rule: str = "linear") -> float:
    """Learning rate for ``global_batch`` given one tuned at ``base_batch``.

    ``linear`` (Goyal et al. 2017): lr * k; ``sqrt`` (common for Adam): lr * sqrt(k),
    with ``k = global_batch / base_batch``. Use warm-up when k is large.
    """
    for name, v in (("base_lr", base_lr), ("base_batch", base_batch), ("global_batch", global_batch)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
            raise ValueError(f"lr_scaling: {name} must be a positive number, got {v!r}")
    k = global_batch / base_batch
    if rule == "linear":
        return base_lr * k
    if rule == "sqrt":
        return base_lr * math.sqrt(k)
    raise ValueError(f"lr_scaling: rule={rule!r}; use 'linear' or 'sqrt'")


# --------------------------------------------------------------------------- presentation

def format_table(rows: Iterable[RowLike]) -> str:
    """Markdown table of runs with speed-up and efficiency (and the speed-up's range, when the
    runs have ``seconds_max``)."""
    scaled = speedup_efficiency(rows)
    ranged = any(r.speedup_low is not None for r in scaled)
    head = ["kind", "tasks", "nodes", "seconds", "ideal", "speed-up", *(["range"] if ranged else []),
            "efficiency", "samples/s"]
    rows = []
    for r in scaled:
        cells = [r.kind, r.tasks, r.nodes, f"{r.seconds:.3g}", f"{r.ideal:g}x", f"{r.speedup:.2f}x"]
        if ranged:
            cells.append("-" if r.speedup_low is None else f"{r.speedup_low:.2f}-{r.speedup_high:.2f}x")
        cells += [f"{r.efficiency:.0%}", "-" if r.throughput is None else f"{r.throughput:,.1f}"]
        rows.append(cells)
    return markdown.table(head, rows)


def plot_scaling(rows: Iterable[RowLike], fit: AmdahlFit | bool | None = None, ax: Any = None,
                 cores_available: int | None = None) -> Any:
    """Plot measured speed-up against ideal (and an Amdahl fit); return the Figure.

    ``fit=True`` fits the strong-scaling rows here, using only runs with
    ``tasks <= cores_available`` when that is given. ``cores_available`` shades
    the task counts that exceed this machine's cores, where the curve must
    flatten no matter how good the code is.
    """
    runs = validate_runs(rows)
    scaled = speedup_efficiency(runs)
    if cores_available is not None and (isinstance(cores_available, bool)
                                        or not isinstance(cores_available, int) or cores_available <= 0):
        raise ValueError(f"cores_available must be a positive integer, got {cores_available!r}")
    if fit is True:
        fit = fit_amdahl(runs, max_tasks=cores_available)
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 4.2))
    else:
        fig = ax.figure
    tasks = sorted({r.tasks for r in scaled})
    base = min(r.base_tasks for r in scaled)
    x_max = max(tasks) * 1.1
    if cores_available is not None:
        x_max = max(x_max, cores_available * 1.25)
    ax.plot([base, x_max], [1, x_max / base], "--", color="grey", label="ideal (linear)")
    for kind, marker in (("strong", "o"), ("weak", "s")):
        pts = [r for r in scaled if r.kind == kind]
        if not pts:
            continue
        med = {n: statistics.median(r.speedup for r in pts if r.tasks == n)
               for n in sorted({r.tasks for r in pts})}
        label = "measured" if kind == "strong" else "measured, weak (scaled speed-up)"
        line, = ax.plot(list(med), list(med.values()), marker=marker, label=label)
        if len(pts) > len(med):  # repeats: show every run, the line joins medians
            ax.scatter([r.tasks for r in pts], [r.speedup for r in pts], s=12, alpha=0.5,
                       color=line.get_color())
    if isinstance(fit, AmdahlFit):
        xs = [base + (x_max - base) * i / 200 for i in range(201)]
        cap = "" if math.isinf(fit.max_speedup) else f", max {fit.max_speedup:.1f}x"
        if max(fit.tasks) < max(tasks):
            cap += f"; fit on tasks <= {max(fit.tasks)}"
        ax.plot(xs, [fit.speedup(x, base) for x in xs], "-", color="tab:red", alpha=0.8,
                label=f"Amdahl fit, s = {fit.serial_fraction:.2f}{cap}")
    if cores_available is not None:
        ax.axvspan(cores_available, x_max, color="tab:orange", alpha=0.12, lw=0)
        ax.axvline(cores_available, color="tab:orange", lw=1.5,
                   label=f"beyond this machine's {cores_available} cores")
    ax.set_xlim(base * 0.9 if base > 1 else 0.8, x_max)
    ax.set_ylim(bottom=0)
    ax.set_xticks(tasks)
    ax.set_xlabel("tasks")
    ax.set_ylabel(f"speed-up vs {base} task{'s' if base > 1 else ''}")
    ax.set_title("Scaling: measured vs ideal")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- helpers

def _pyplot() -> Any:
    """Import pyplot, choosing Agg when there is no display and no notebook backend."""
    import matplotlib

    headless = sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if headless and "MPLBACKEND" not in os.environ and "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _check_work(runs: list[Run], source: str) -> None:
    for kind in KINDS:
        with_samples = [r for r in runs if r.kind == kind and r.samples is not None]
        if len(with_samples) < 2:
            continue
        ref = with_samples[0]
        for r in with_samples[1:]:
            if kind == "strong" and r.samples != ref.samples:
                raise ValueError(f"{source}: strong-scaling runs do different total work "
                                 f"(samples={ref.samples} at tasks={ref.tasks}, {r.samples} at "
                                 f"tasks={r.tasks}); keep samples fixed or mark the rows kind=weak")
            if kind == "weak" and r.samples * ref.tasks != ref.samples * r.tasks:
                raise ValueError(f"{source}: weak-scaling runs do different work per task "
                                 f"({ref.samples}/{ref.tasks} vs {r.samples}/{r.tasks}); "
                                 "scale samples with tasks or mark the rows kind=strong")


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def _positive(value: Any, name: str, where: str, typ: type) -> Any:
    if isinstance(value, bool) or _blank(value):
        raise ValueError(f"{where}: {name!r} is empty; give a positive {typ.__name__}")
    try:
        num = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {name!r}={value!r} is not a number") from None
    if not math.isfinite(num) or num <= 0:
        raise ValueError(f"{where}: {name!r} must be > 0, got {value!r}")
    if typ is int:
        if num != int(num):
            raise ValueError(f"{where}: {name!r} must be a whole number, got {value!r}")
        return int(num)
    return num


def _check_fraction(s: float) -> None:
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s <= 1:
        raise ValueError(f"serial fraction s must be a number in [0, 1], got {s!r}")


def _check_tasks(n: float) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not n >= 1:
        raise ValueError(f"number of tasks n must be >= 1, got {n!r}")
