"""What Slurm's commands print about jobs, as records: sacct lines (:class:`AccountingRow`, and a
seff-like :class:`Efficiency`), squeue lines (:class:`QueueRow`) and a job's state at one poll
(:class:`JobSnapshot`). Parsing only: :mod:`hpcnb.jobs` runs the commands and re-exports these."""
from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from hpcnb.job_errors import JobNotFound, SlurmError
from hpcnb.slurm.gpus import parse_gpu_usage, parse_tres
from hpcnb.slurm.sizes import format_rounded_size, parse_printed_size
from hpcnb.slurm.states import FINAL, base_state as _base_state
from hpcnb.slurm.times import format_elapsed, parse_printed, parse_printed_seconds, parse_stamp

#: Slurm's terminal job states (``CANCELLED by 1000`` counts as CANCELLED).
FINISHED_STATES = FINAL
ACCOUNTING_FORMAT = "JobID,JobName,State,ExitCode,Elapsed,MaxRSS,NNodes,NCPUS,Start,End,AllocTRES"
EFFICIENCY_FORMAT = "JobID,State,ExitCode,Elapsed,NNodes,NCPUS,TotalCPU,ReqMem,MaxRSS,AllocTRES,TRESUsageInAve,TRESUsageInMax"
_EFFICIENCY_COLUMNS = EFFICIENCY_FORMAT.count(",") + 1


#: Public names of the parsers of what Slurm's commands print (:mod:`hpcnb.slurm`).
parse_elapsed = parse_printed
parse_size = parse_printed_size


def _expand_ids(text: str) -> list[str]:
    """``7_[1-3,5%2]`` -> ``7_1 7_2 7_3 7_5`` (sacct/squeue pending array lines); others unchanged."""
    match = re.fullmatch(r"(\d+)_\[([\d,\-]+)(?:%\d+)?\]", text)
    if not match:
        return [text]
    base, out = match.group(1), []
    for part in match.group(2).split(","):
        first, _, last = part.partition("-")
        out += [f"{base}_{i}" for i in range(int(first), int(last or first) + 1)]
    return out


def _task_key(job_id: str) -> tuple[int, int]:
    base, _, task = job_id.partition("_")
    return int(base) if base.isdigit() else 0, int(task) if task.isdigit() else -1


_ACTIVE_FIRST = ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "PENDING")


def _summarize(states: Iterable[str]) -> str:
    """One state for a job or a whole array: the most active one, else the first that did not complete."""
    states = list(states)
    if not states:
        return "UNKNOWN"
    active = [s for s in states if s not in FINISHED_STATES]
    if active:
        return next((s for s in _ACTIVE_FIRST if s in active), active[0])
    return next((s for s in states if s != "COMPLETED"), "COMPLETED")



@dataclass(frozen=True)
class AccountingRow:
    """One sacct line: the job (``step`` None), or a step such as ``batch``, ``extern`` or ``0``."""

    job_id: str
    name: str
    state: str  # CANCELLED for "CANCELLED by 1000"; the full text is in state_text
    exit_code: int
    signal: int
    elapsed: int | None  # seconds
    max_rss: int | None  # bytes; None where sacct has none (the job line, running steps)
    nnodes: int
    ncpus: int
    start: datetime | None
    end: datetime | None
    alloc_tres: dict[str, str] = field(default_factory=dict)
    state_text: str = ""

    @property
    def step(self) -> str | None:
        return self.job_id.split(".", 1)[1] if "." in self.job_id else None

    @classmethod
    def parse(cls, line: str, sep: str = "|") -> AccountingRow:
        """A ``sacct -P --format`` :data:`ACCOUNTING_FORMAT` line (a ``|`` in JobName is fine)."""
        job_id, _, rest = line.partition(sep)
        parts = rest.rsplit(sep, 9)
        if len(parts) != 10:
            raise SlurmError(f"sacct printed an unexpected line: {line!r}")
        name, state, exit_code, elapsed, max_rss, nnodes, ncpus, start, end, tres = parts
        code, _, sig = exit_code.partition(":")
        return cls(
            job_id=job_id, name=name, state=_base_state(state), exit_code=int(code or 0), signal=int(sig or 0),
            elapsed=parse_elapsed(elapsed), max_rss=parse_size(max_rss), nnodes=int(nnodes or 0),
            ncpus=int(ncpus or 0), start=parse_stamp(start), end=parse_stamp(end),
            alloc_tres=dict(kv.split("=", 1) for kv in tres.split(",") if "=" in kv), state_text=state,
        )


def _accounted_whole(text: str) -> bool:
    """Do these sacct lines (:data:`EFFICIENCY_FORMAT`: the job, then its steps) show a running job,
    or a finished one that slurmdbd has recorded whole: its request (ReqMem) and every step's end?"""
    rows = [line.split("|") for line in text.splitlines() if line.count("|") == _EFFICIENCY_COLUMNS - 1]
    if not rows or _base_state(rows[0][1]) not in FINISHED_STATES:
        return True
    return parse_size(rows[0][7]) is not None and all(_base_state(r[1]) in FINISHED_STATES for r in rows)


@dataclass(frozen=True)
class Efficiency:
    """A seff-like summary of one job from sacct: the CPU time and memory it used against what it had.

    ``peak_rss`` is the largest MaxRSS of its steps (the peak of one task; sacct has none while a
    step runs, nor where the site gathers no accounting); ``req_mem`` is ReqMem, the whole job's
    request; ``total_cpu`` is TotalCPU (user + system seconds of every step; None where sacct
    leaves it empty). ``gpus`` is the job's GPU count (AllocTRES); ``gpu_util`` the highest mean
    utilisation (%) and ``gpu_mem`` the highest peak GPU memory of its steps (TRESUsageInAve's
    ``gres/gpuutil``, TRESUsageInMax's ``gres/gpumem``; None where the site records neither, or
    no GPU could be read). Sizes are bytes, times seconds.
    """

    job_id: str
    state: str
    exit_code: str  # "0:125": exit status and signal, as sacct prints them
    elapsed: int | None
    nnodes: int
    ncpus: int
    total_cpu: float | None
    req_mem: int | None
    peak_rss: int | None
    gpus: int = 0
    gpu_util: float | None = None
    gpu_mem: int | None = None

    @classmethod
    def from_sacct(cls, text: str) -> Efficiency:
        """From ``sacct -n -P -o`` :data:`EFFICIENCY_FORMAT` lines of one job: its line, then its steps'."""
        rows = [line.split("|") for line in text.splitlines() if line.strip()]
        if not rows:
            raise JobNotFound("sacct has no such job (not yet recorded, or older than its window)")
        odd = [r for r in rows if len(r) != _EFFICIENCY_COLUMNS]
        if odd:
            raise SlurmError(f"sacct printed an unexpected line: {odd[0]!r}")
        jobs = [r for r in rows if "." not in r[0]]
        if len(jobs) != 1:
            raise ValueError(f"sacct has {len(jobs)} job lines ({', '.join(r[0] for r in jobs) or 'none'}): "
                             "a summary is of one job (for an array, one per task: job.array_tasks())")
        job_id, state, code, elapsed, nnodes, ncpus, total_cpu, req_mem, _, alloc, _, _ = jobs[0]
        peaks = [size for r in rows if (size := parse_size(r[8])) is not None]
        utils = [util for r in rows if (util := parse_gpu_usage(r[10])[1]) is not None]
        gpu_mems = [mem for r in rows if (mem := parse_gpu_usage(r[11])[0]) is not None]
        gpus = parse_tres(alloc).get("gres/gpu", "0")
        return cls(job_id, _base_state(state), code, parse_elapsed(elapsed), int(nnodes or 0), int(ncpus or 0),
                   parse_printed_seconds(total_cpu), parse_size(req_mem), max(peaks) if peaks else None,
                   int(gpus) if gpus.isdigit() else 0, max(utils) if utils else None, max(gpu_mems) if gpu_mems else None)

    @property
    def req_mem_per_node(self) -> int | None:
        return None if self.req_mem is None else self.req_mem // max(self.nnodes, 1)

    @property
    def cpu_efficiency(self) -> float | None:
        """TotalCPU / (Elapsed x NCPUS): 1.0 keeps every allocated CPU busy all the time."""
        if self.total_cpu is None or not self.elapsed or not self.ncpus:
            return None
        return self.total_cpu / (self.elapsed * self.ncpus)

    @property
    def mem_efficiency(self) -> float | None:
        """The peak against the request per node; 1.0 or more: it reached its limit."""
        if self.peak_rss is None or not self.req_mem_per_node:
            return None
        return self.peak_rss / self.req_mem_per_node

    @property
    def hit_memory_limit(self) -> bool:
        """Did it end for lack of memory (OUT_OF_MEMORY, or a peak at its request)?"""
        return self.state == "OUT_OF_MEMORY" or (self.mem_efficiency or 0) >= 1.0

    def suggest_mem(self, margin: float = 0.2) -> str:
        """An sbatch ``--mem`` for a rerun: the peak plus ``margin`` (0.2 = 20 %), in whole MiB (``315M``).
        Refused for a job stopped at its limit: its peak is then only a lower bound of what it needs."""
        if margin < 0:
            raise ValueError(f"suggest_mem(margin={margin}): a margin is 0 or more (0.2 = 20 %)")
        if self.peak_rss is None:
            raise ValueError(f"job {self.job_id} has no MaxRSS in sacct (still running, or no accounting)")
        if self.hit_memory_limit:
            raise ValueError(f"job {self.job_id} was stopped at its memory limit: its peak says only that it "
                             "needed more. Run it once with a generous --mem, then size from that run's peak")
        return f"{-(-int(self.peak_rss * (1 + margin)) // 1024**2)}M"

    def __str__(self) -> str:
        cpu, mem = self.cpu_efficiency, self.mem_efficiency
        used = "not recorded (sacct's TotalCPU is empty)" if self.total_cpu is None else f"{self.total_cpu:.2f} s"
        lines = [
            f"Job ID: {self.job_id}",
            f"State: {self.state} (exit code {self.exit_code})",
            f"Nodes: {self.nnodes}, cores: {self.ncpus}, elapsed: "
            + ("unknown" if self.elapsed is None else format_elapsed(self.elapsed)),
            f"CPU utilized: {used}",
            "CPU efficiency: " + ("n/a" if cpu is None else
                                  f"{cpu:.1%} of {(self.elapsed or 0) * self.ncpus} s core-walltime"),
            "Memory utilized (peak): " + ("not recorded" if self.peak_rss is None else format_rounded_size(self.peak_rss)),
            "Memory efficiency: " + ("n/a" if mem is None else
                                     f"{mem:.1%} of {format_rounded_size(self.req_mem_per_node or 0)} per node"),
        ]
        if self.hit_memory_limit:
            lines.append("  (stopped at its memory limit: it needed more than it asked for)")
        lines += self.gpu_lines()
        return "\n".join(lines)

    def gpu_lines(self) -> list[str]:
        """What the job's GPUs did, or what would be read and why it is not there (none without GPUs)."""
        if not self.gpus:
            return []
        if self.gpu_util is None:
            return [f"GPUs: {self.gpus}, utilisation and memory not recorded: sacct's TRESUsageInAve has no "
                    "gres/gpuutil (Slurm records it with AccountingStorageTRES=gres/gpumem,gres/gpuutil, read "
                    "from NVML where a GPU is visible; none on a CPU machine)"]
        return [f"GPUs: {self.gpus}", f"GPU utilisation (mean): {self.gpu_util:.0f}%",
                "GPU memory (peak): " + ("not recorded" if self.gpu_mem is None else format_rounded_size(self.gpu_mem))]


@dataclass(frozen=True)
class QueueRow:
    """One squeue line (a pending array's tasks share one line, e.g. ``7_[3-8%2]``), or the same
    columns from sacct for a job that has left the queue (then with its ``exit_code``)."""

    job_id: str
    partition: str
    user: str
    state: str
    time: int | None  # seconds run so far
    time_limit: str
    nodes: int
    nodelist: str
    reason: str
    name: str
    raw_id: str = ""  # Slurm's own number for an array task (``7_3`` may be job 9)
    exit_code: str = ""  # ``0:0``; sacct only

    @classmethod
    def parse(cls, line: str, accounted: bool = False, sep: str = "|") -> QueueRow | None:
        """A line of squeue ``-o`` :data:`QUEUE_FORMAT`, or (``accounted``) of sacct ``-P --format``
        :data:`STATE_FORMAT`, fields split at ``sep``; None for anything else."""
        parts = line.split(sep, 11 if accounted else 10)
        if len(parts) != (12 if accounted else 11):
            return None
        job_id, raw_id, partition, user, state, used, limit, nodes, nodelist, reason, *rest = parts
        return cls(job_id.strip(), partition, user, _base_state(state), parse_elapsed(used), limit.strip(),
                   int(nodes) if nodes.strip().isdigit() else 0,
                   "" if nodelist.strip() in ("None assigned", "(null)") else nodelist.strip(),
                   reason.strip(), rest[-1], raw_id=raw_id.strip(), exit_code=rest[0].strip() if accounted else "")


#: squeue's columns for :class:`QueueRow`, and sacct's same columns (plus the exit code); the name,
#: free text, goes last. Each call puts a :func:`_separator` in place of ``|``.
QUEUE_FORMAT = "%i|%A|%P|%u|%T|%M|%l|%D|%N|%r|%j"
STATE_FORMAT = "JobID,JobIDRaw,Partition,User,State,Elapsed,Timelimit,NNodes,NodeList,Reason,ExitCode,JobName"


@dataclass(frozen=True)
class JobSnapshot:
    """What Slurm says about a job at one poll (squeue, or sacct once it has left the queue)."""

    job_id: str
    state: str = "UNKNOWN"
    states: dict[str, str] = field(default_factory=dict)  # per array task (one entry for a plain job)
    elapsed: int | None = None  # seconds
    time_limit: int | None = None  # seconds; None: unlimited or unknown
    nodes: str = ""  # Slurm's node list text, e.g. node[1-2]
    reason: str = ""  # why it waits ("" for None)
    exit_code: str = ""  # "0:0" once finished (several, comma-joined, for an array whose tasks differ)
    name: str = ""
    taken: float = field(default_factory=time.monotonic)

    @classmethod
    def from_tasks(cls, job_id: str, tasks: Mapping[str, QueueRow]) -> JobSnapshot:
        """The snapshot of ``job_id`` from its rows, by task id (a collapsed pending line serves several)."""
        rows = list({id(row): row for row in tasks.values()}.values())
        codes = [row.exit_code for row in rows if row.exit_code]
        times = [row.time for row in rows if row.time is not None]
        states = {task: row.state for task, row in tasks.items()}
        return cls(
            job_id, _summarize(states.values()), states, max(times) if times else None,
            parse_printed(rows[-1].time_limit), ",".join(dict.fromkeys(r.nodelist for r in rows if r.nodelist)),
            ",".join(dict.fromkeys(r.reason for r in rows if r.reason not in ("", "None"))),
            codes[0] if len(set(codes)) == 1 else ",".join(codes), rows[-1].name,
        )

    @property
    def done(self) -> bool:
        return bool(self.states) and all(s in FINISHED_STATES for s in self.states.values())

    @property
    def is_array(self) -> bool:
        return "_" not in self.job_id and any("_" in k for k in self.states)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.states.values():
            out[s] = out.get(s, 0) + 1
        return out


def _tasks_of(job_id: str, rows: Iterable[QueueRow]) -> dict[str, QueueRow]:
    """The rows that are ``job_id`` (a job, an array task, or every task of an array), by task id."""
    out: dict[str, QueueRow] = {}
    for row in rows:
        for task in _expand_ids(row.job_id):
            if (task == job_id or ("_" not in job_id and task.startswith(job_id + "_"))
                    or (row.raw_id == job_id and "[" not in row.job_id)):
                out[task] = row
    return dict(sorted(out.items(), key=lambda kv: _task_key(kv[0])))
