"""Lesson 13: find the slow rank: per-rank step times, gathered across ranks, and a robust
outlier test.

In synchronous data parallelism every step ends with an all-reduce of the gradients, so the
*whole* job advances at the pace of its slowest process: one GPU that has become 5x slower
makes every step of a thousand-GPU run slower. Its total step time looks like everyone
else's (they all wait for it), so the place to look is the time each rank spends on its own
work *before* the all-reduce (forward + backward): that is where the slow rank stands out.

* :func:`gather_step_times` — inside the job: every rank's list of times, gathered to every
  rank with ``torch.distributed`` (with the node each rank runs on).
* :func:`step_line` / :func:`read_step_logs` — the other route: each rank prints one line per
  step (``rank=2 host=node2 step=7 compute_s=0.0301 wait_s=0.0002``) and the lines are read back
  from the job's output file(s) afterwards, with or without ``srun --label`` prefixes.
* :func:`find_stragglers` — each rank's times against the typical rank's, step by step: the
  ratio and a robust z-score (median absolute deviation); a rank is slow when both are large.
* :func:`format_report` and :func:`plot_rank_times` show the result.

``import hpcnb.lessons.stragglers`` does not import torch.
"""
from __future__ import annotations

import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "RankTiming", "find_stragglers", "format_report", "gather_step_times", "plot_rank_times",
    "read_step_logs", "step_line", "load_times", "save_times", "slowed_node",
]

@contextmanager
def slowed_node(node: str, factor: float, rank: int) -> Iterator[str]:
    """Lesson 13: a node ``factor`` times slower for the jobs started in the block; yields the
    extra arguments for ``hpcnb.scripts.straggler_train``. The local Slurm really slows its
    ``node`` (``hpcnb slurm slow-node``, back to full speed when the block ends) and the yield is
    "". A real cluster's nodes cannot be slowed by a user: there ``rank`` (the one on ``node``)
    only pretends, ``--simulate-slow-rank RANK --simulate-factor FACTOR``."""
    from hpcnb.backend import which_slurm

    if which_slurm() != "local":
        yield f"--simulate-slow-rank {rank} --simulate-factor {factor:g}"
        return
    _slow_node(node, factor)
    try:
        yield ""
    finally:
        _slow_node(node, 1)


def _slow_node(node: str, factor: float) -> None:
    subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "slow-node", node, f"{factor:g}"],
                   check=True, capture_output=True, text=True, timeout=60)


#: The modified z-score of Iglewicz and Hoaglin: 0.6745 (x - median) / MAD; > 3.5 is an outlier.
MAD_SCALE = 0.6745
DEFAULT_RATIO = 1.5
DEFAULT_Z = 3.5


@dataclass(frozen=True)
class RankTiming:
    """One rank's verdict. ``median_s`` is its median step time, ``ratio`` that over the median
    of all ranks' medians, ``z`` the robust z-score, ``slow`` whether both exceed the thresholds."""

    rank: int
    host: str
    steps: int
    median_s: float
    ratio: float
    z: float
    slow: bool


# ----------------------------------------------------------------------- the outlier test

def _clean(times: Mapping[int, Sequence[float] | float], skip: int) -> dict[int, list[float]]:
    out = {}
    for rank, values in times.items():
        if isinstance(values, (int, float)):
            vals = [float(values)]
        else:
            vals = [float(v) for v in values]
            vals = vals[skip:] or vals
        if not vals:
            raise ValueError(f"rank {rank} has no step times")
        if any(not math.isfinite(v) or v < 0 for v in vals):
            raise ValueError(f"rank {rank}: step times must be finite and >= 0")
        out[int(rank)] = vals
    return out


def find_stragglers(times: Mapping[int, Sequence[float] | float], hosts: Mapping[int, str] | None = None,
                    *, ratio: float = DEFAULT_RATIO, z: float = DEFAULT_Z, skip: int = 0) -> list[RankTiming]:
    """Flag the ranks that are clearly slower than the others.

    ``times`` maps each rank to its step times (a list per rank, step by step), or to one number
    per rank (such as a mean). ``skip`` drops warm-up steps. A rank is *slow* when

    * its time over the typical rank's is ``>= ratio`` (default 1.5: at least 50 % slower), and
    * its robust z-score ``0.6745 (x_r - M) / MAD >= z`` (default 3.5, Iglewicz and Hoaglin's
      cut-off for outliers): the difference is far larger than the noise.

    With step times (every rank the same number of steps, at least 3) the ranks are compared
    **step by step**: in synchronous training step ``i`` happens at the same moment on every rank,
    so each time is divided by that step's median over the ranks. This cancels whatever slows
    a whole step everywhere (a busy machine, a longer batch) and leaves what is particular to a
    rank. ``x_r`` is then the median of rank r's relative times, ``M`` the median of the ``x_r``,
    and ``MAD`` the median absolute deviation of every relative time from its own rank's ``x_r``
    (the step-to-step noise, pooled over the ranks). With one number per rank, ``x_r`` is that
    number and ``MAD`` the ranks' deviation from ``M``.

    Medians barely move when one rank is extreme, which is why this works where a mean and a
    standard deviation would be dragged towards the outlier. When the MAD is 0 (no noise at all),
    any rank above the ratio counts as far outside. At least three ranks are needed: with two,
    neither is "typical". Returns one :class:`RankTiming` per rank (``median_s`` is the rank's
    median of the raw times).
    """
    if ratio <= 1:
        raise ValueError(f"ratio={ratio}: a slow rank is more than 1x the typical one; use e.g. 1.5")
    data = _clean(times, skip)
    if len(data) < 3:
        raise ValueError(f"find_stragglers needs at least 3 ranks to tell which one is unusual, got "
                         f"{len(data)}: run with 3 or more tasks")
    ranks = sorted(data)
    raw_medians = {r: statistics.median(data[r]) for r in ranks}
    lengths = {len(v) for v in data.values()}
    if len(lengths) == 1 and lengths.pop() >= 3:
        steps = len(data[ranks[0]])
        step_median = [statistics.median(data[r][i] for r in ranks) for i in range(steps)]
        keep = [i for i in range(steps) if step_median[i] > 0]
        rel = {r: [data[r][i] / step_median[i] for i in keep] for r in ranks} if keep else None
    else:
        rel = None
    if rel is not None:
        x = {r: statistics.median(rel[r]) for r in ranks}
        typical = statistics.median(x.values())
        mad = statistics.median(abs(v - x[r]) for r in ranks for v in rel[r])
    else:
        x = dict(raw_medians)
        typical = statistics.median(x.values())
        mad = statistics.median(abs(v - typical) for v in x.values())
    hosts = hosts or {}
    out = []
    for rank in ranks:
        v = x[rank]
        r = v / typical if typical > 0 else (math.inf if v > 0 else 1.0)
        if mad > 0:
            score = MAD_SCALE * (v - typical) / mad
        else:
            score = math.inf if v > typical else (0.0 if v == typical else -math.inf)
        out.append(RankTiming(rank, str(hosts.get(rank, "?")), len(data[rank]), raw_medians[rank], r, score,
                              r >= ratio and score >= z))
    return out


def format_report(results: Iterable[RankTiming], unit: str = "ms") -> str:
    """A plain-text table of :func:`find_stragglers`' verdicts."""
    scale = {"s": 1.0, "ms": 1e3}[unit]
    lines = [f"{'rank':>4}  {'host':<10} {'steps':>5} {'median ' + unit:>10} {'x median':>9} {'z':>7}  verdict"]
    for t in results:
        zs = "inf" if math.isinf(t.z) else f"{t.z:.1f}"
        lines.append(f"{t.rank:>4}  {t.host:<10} {t.steps:>5} {t.median_s * scale:>10.1f} {t.ratio:>8.2f}x "
                     f"{zs:>7}  {'SLOW' if t.slow else 'ok'}")
    return "\n".join(lines)


# -------------------------------------------------------------------- gathering in the job

def gather_step_times(times: Sequence[float] | Mapping[str, Sequence[float]], host: str | None = None,
                      group: Any = None) -> dict[int, dict[str, Any]]:
    """Collective: every rank passes its own step times and gets everybody's back.

    ``times`` is one list, or several named lists (``{"compute_s": [...], "wait_s": [...]}``).
    Returns ``{rank: {"host": ..., <name>: [...]}}`` (one list is named ``"times"``) on every rank;
    torch.distributed must be initialised, and every rank of ``group`` must call it.
    """
    import torch.distributed as dist

    record = dict(times) if isinstance(times, Mapping) else {"times": list(times)}
    record = {k: [float(v) for v in vals] for k, vals in record.items()}
    record["host"] = host or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    everyone: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, record, group=group)
    return {rank: rec for rank, rec in enumerate(everyone)}


def save_times(path: str | os.PathLike[str], gathered: Mapping[int, Mapping[str, Any]], **meta: Any) -> Path:
    """Write gathered times as JSON (``{"meta": ..., "ranks": {"0": {...}}}``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"meta": meta, "ranks": {str(r): dict(rec) for r, rec in gathered.items()}}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def load_times(path: str | os.PathLike[str]) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """Read :func:`save_times`' file: ``({rank: {"host": ..., name: [...]}}, meta)``."""
    data = json.loads(Path(path).read_text())
    return {int(r): rec for r, rec in data["ranks"].items()}, data.get("meta", {})


# ------------------------------------------------------------------ per-rank log lines

_LINE = re.compile(r"(?:^|\s)rank=(?P<rank>\d+)\s+host=(?P<host>\S+)\s+step=(?P<step>\d+)(?P<rest>(?:\s+\w+=\S+)*)")
_FIELD = re.compile(r"(\w+)=(\S+)")


def step_line(rank: int, step: int, host: str | None = None, **times: float) -> str:
    """One parsable log line: ``rank=2 host=node2 step=7 compute_s=0.030100 wait_s=0.000200``."""
    host = host or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    fields = " ".join(f"{k}={v:.6f}" for k, v in times.items())
    return f"rank={rank} host={host} step={step} {fields}".rstrip()


def read_step_logs(sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                   field: str | None = None) -> dict[int, dict[str, Any]]:
    """Parse :func:`step_line` lines from job output files (or text) into per-rank lists.

    ``sources`` is a path, a list of paths (one file per rank, e.g. ``--output=log-%t.out``), or
    the text itself. Other lines and ``srun --label`` prefixes (``2: ``) are ignored. Returns
    ``{rank: {"host": ..., "steps": [...], <field>: [...]}}`` ordered by step; with ``field``
    only that one time column is kept.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    texts = []
    for src in sources:
        if isinstance(src, str) and "\n" in src:
            texts.append(src)
        else:
            texts.append(Path(src).read_text(errors="replace"))
    rows: dict[int, list[tuple[int, dict[str, float]]]] = {}
    hosts: dict[int, str] = {}
    for text in texts:
        for line in text.splitlines():
            match = _LINE.search(line)
            if not match:
                continue
            rank, step = int(match["rank"]), int(match["step"])
            values = {}
            for key, val in _FIELD.findall(match["rest"]):
                try:
                    values[key] = float(val)
                except ValueError:
                    pass
            hosts[rank] = match["host"]
            rows.setdefault(rank, []).append((step, values))
    out: dict[int, dict[str, Any]] = {}
    for rank in sorted(rows):
        entries = sorted(rows[rank], key=lambda e: e[0])
        names = [field] if field else sorted({k for _, v in entries for k in v})
        rec: dict[str, Any] = {"host": hosts[rank], "steps": [s for s, _ in entries]}
        for name in names:
            rec[name] = [v[name] for _, v in entries if name in v]
        out[rank] = rec
    return out


# ------------------------------------------------------------------------------- plotting

def plot_rank_times(gathered: Mapping[int, Mapping[str, Any]], field: str = "compute_s",
                    results: Iterable[RankTiming] | None = None, ax: Any = None, title: str | None = None) -> Any:
    """Each rank's step times (``field``) against the step, slow ranks highlighted; returns the Figure."""
    from hpcnb.lessons.scaling import _pyplot

    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3.6))
    else:
        fig = ax.figure
    slow = {t.rank for t in results or () if t.slow}
    for rank in sorted(gathered):
        rec = gathered[rank]
        vals = [v * 1e3 for v in rec[field]]
        steps = rec.get("steps") or list(range(len(vals)))
        label = f"rank {rank} on {rec.get('host', '?')}" + (" (SLOW)" if rank in slow else "")
        ax.plot(steps, vals, marker="o" if rank in slow else ".", lw=2 if rank in slow else 1, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel(f"{field} per step (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or f"Per-rank {field}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    return fig


def as_dicts(results: Iterable[RankTiming]) -> list[dict[str, Any]]:
    """The verdicts as plain dicts (for a table or JSON)."""
    return [asdict(t) for t in results]
