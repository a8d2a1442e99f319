"""Command-line options -> a validated :class:`JobRequest`, with Slurm 22.05's error texts."""
from __future__ import annotations

import re
import signal as _signal
import time
from typing import Any

from hpcnb.slurm import gpus
from hpcnb.slurm.bounds import INT_MAX, LONG_MAX, c_int, saturated, strtol
from hpcnb.slurm.options import OptionSpec
from hpcnb.slurm.record import Record
from hpcnb.slurm.sizes import SizeError, parse_mem as _parse_mb
from hpcnb.slurm.times import CalendarTimeError, TimeSpecError, parse_calendar, parse_time


class UsageError(Exception):
    """A bad option value: the command prints ``<cmd>: error: <line>`` for each line and exits 1
    (``raw`` lines first, printed as they are: Slurm's parsers print some without the prefix)."""

    def __init__(self, *lines: str, exit_code: int = 1, raw: tuple[str, ...] = ()) -> None:
        super().__init__("\n".join((*raw, *lines)))
        self.lines = lines
        self.exit_code = exit_code
        self.raw = raw


class SubmitError(Exception):
    """The controller refuses the request (sbatch: ``Batch job submission failed: <reason>``)."""

    def __init__(self, reason: str, *before: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.before = before


class JobRequest(Record):
    """What a job or step asks for, as sbatch/salloc/srun options and the submitting shell give it."""

    command: str = "sbatch"
    name: str | None = None
    partition: str | None = None
    account: str | None = None
    comment: str | None = None
    constraint: str | None = None
    time_limit: int | None = None  # seconds
    time_given: bool = False
    nodes_min: int | None = None
    nodes_max: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    mem_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    gpus_per_node: int = 0
    gpu_type: str | None = None
    exclusive: bool = False
    output: str | None = None
    error: str | None = None
    input: str | None = None
    open_mode: str | None = None
    array: str | None = None
    dependency: str | None = None
    kill_on_invalid_dep: bool = False
    requeue: bool | None = None
    signal: list[Any] | None = None  # [batch_only, signum, seconds_before_end]
    hold: bool = False
    chdir: str | None = None
    export: str | None = None
    nodelist: str | None = None
    exclude: str | None = None
    wrap: str | None = None
    parsable: bool = False
    test_only: bool = False
    wait: bool = False
    quiet: bool = False
    label: bool = False
    unbuffered: bool = False  # srun -u: tasks write straight to srun's output, partial lines and all
    pty: bool = False
    overlap: bool = False
    jobid: int | None = None  # srun --jobid: a step in that running job
    jobid_text: str | None = None  # --jobid as given (its parsing depends on the Slurm version)
    kill_on_bad_exit: int | None = None  # srun -K[N]: None = the site's KillOnBadExit (0)
    kill_command: int | None = None  # salloc -K[sig]: signal its command when the allocation is revoked (0: default)
    immediate: int = 0  # salloc/srun -I[secs]: 1 = start now or fail, N = give up after N seconds
    given: list[str] = []  # long names of options set explicitly
    env: dict[str, str] = {}  # the environment the job starts from
    script_args: list[str] = []
    script_path: str | None = None  # absolute path of the batch script (scontrol's Command=, squeue %o)
    submit_dir: str = ""
    workdir: str = ""
    submit_host: str = ""
    begin: float | None = None  # --begin: not eligible before this time (epoch seconds)
    deadline: float | None = None
    rlimits: dict[str, int] = {}  # the submitting shell's soft limits
    umask: int | None = None  # the submitting shell's umask
    nice: int = 0  # the submitting process's nice value (SLURM_PRIO_PROCESS)


def parse_count(value: str, option: str, positive: bool = True) -> int:
    """Slurm's ``parse_int(name, value, positive)``: 0 is refused only when ``positive``. 22.05
    refuses only ``strtol`` saturating, and a value past INT_MAX wraps as C's ``(int)`` does
    (measured: ``-n 4294967297`` is one task, ``-n 2147483648`` is ``-2147483648``); 24.11 refuses
    INT_MAX and more (``too large``; proc_args.c, measured)."""
    match = re.fullmatch(r"\s*([+-]?)([0-9]+)\s*", value)
    number = saturated(match[2]) if match else 0
    if not match or (match[1] == "-" and number) or (positive and not number):
        raise UsageError(f'Invalid numeric value "{value}" for {option}.')
    if number >= INT_MAX and _state_since("24.11"):
        raise UsageError(f"Numeric argument ({number}) too large for {option}.")
    if number == LONG_MAX:
        raise UsageError(f"Numeric argument ({LONG_MAX}) to big for {option}.")
    return c_int(number)


def _state_since(version: str) -> bool:
    """Whether the local Slurm's state behaves as ``version`` or later (read only where the
    versions part: options are parsed before a command opens the state)."""
    from . import db
    from .cluster import state_cluster

    return state_cluster(db.connect()).since(version)


def parse_mem(value: str, option: str) -> int:
    """Memory in MB as Slurm reads it (:func:`hpcnb.slurm.sizes.parse_mem`; ``0``: all of the node's)."""
    try:
        return _parse_mb(value, option)
    except SizeError:
        raise UsageError(f"Invalid {option} specification", exit_code=255) from None


def parse_nodes(value: str) -> tuple[int | None, int | None]:
    """``-N min[-max]`` as Slurm 22.05 takes it (captured): ``0`` is refused by the controller,
    a negative count is quietly ignored, a max below the min and anything not a number are fatal."""
    match = re.fullmatch(r"(-?\d+)(?:-(\d+))?", value.strip())
    if not match:
        raise UsageError(f'"{value}" is not a valid node count', exit_code=255)
    # strtol, then C's (int): a count past INT_MAX wraps (_str_to_nodes in proc_args.c)
    low, high = c_int(strtol(match.group(1))), c_int(strtol(match.group(2))) if match.group(2) else None
    if low == 0 and high is None:
        raise SubmitError("Node count specification invalid")
    if high and low > 0 and high < low:  # (max 0 = no max) checked live against a real 22.05 (tests/parity)
        raise UsageError(f"Maximum node count {high} is less than minimum node count {low}", exit_code=255)
    if high is not None and high < max(low, 1):
        high = None
    return (low if low > 0 else None), high


def parse_gpus(value: str, option: str) -> tuple[int, str | None]:
    """``--gres=gpu[:type]:N`` or ``--gpus-per-node=[type:]N`` (:func:`hpcnb.slurm.gpus.parse_gpus`)."""
    try:
        return gpus.parse_gpus(value, option)
    except gpus.NotAGpu:
        raise UsageError("Invalid generic resource (gres) specification") from None
    except ValueError:  # Slurm 22.05's controller refuses the job (captured)
        raise SubmitError("Requested node configuration is not available") from None


def parse_signal(value: str) -> list[Any]:
    """``[{R|B}:]<sig>[@<secs>]`` -> [batch_only, signum, seconds]."""
    match = re.fullmatch(r"(?:([RB]{1,2}):)?([A-Za-z0-9]+)(?:@(\d+))?", value.strip())
    signum = _signal_number(match.group(2)) if match else None
    if not match or signum is None:
        raise UsageError("Invalid --signal specification", exit_code=255)
    return ["B" in (match.group(1) or ""), signum, int(match.group(3) or 60)]


def parse_begin(text: str, option: str, now: float | None = None) -> float:
    """A ``--begin``/``--deadline`` time (:func:`~hpcnb.slurm.times.parse_calendar`); a bad one gets
    Slurm's two lines (position included)."""
    try:
        return parse_calendar(text, time.time() if now is None else now)
    except CalendarTimeError as err:
        raise UsageError(f"Invalid {option} specification", exit_code=255, raw=(str(err),)) from None


def _signal_number(name: str) -> int | None:
    if re.fullmatch("[0-9]+", name):
        return int(name) if 0 < saturated(name) < 65 else None
    name = name.upper()
    name = name if name.startswith("SIG") else "SIG" + name
    sig = getattr(_signal, name, None)
    return int(sig) if isinstance(sig, _signal.Signals) else None


_WRAPPED_COUNT = {"ntasks": "invalid number of tasks (-n {})", "cpus-per-task": "invalid number of cpus per task (-c {})"}
_FLAGS = {
    "parsable": "parsable", "test-only": "test_only", "wait": "wait", "quiet": "quiet", "label": "label",
    "pty": "pty", "overlap": "overlap", "hold": "hold", "unbuffered": "unbuffered", "exclusive": "exclusive",
    "kill-on-invalid-dep": "kill_on_invalid_dep",
}
_EXCLUSIVE = ("exclusive", "oversubscribe", "user", "mcs")
_STRINGS = {
    "job-name": "name", "partition": "partition", "account": "account", "comment": "comment",
    "constraint": "constraint", "output": "output", "error": "error", "input": "input",
    "open-mode": "open_mode", "array": "array", "dependency": "dependency", "chdir": "chdir",
    "export": "export", "nodelist": "nodelist", "exclude": "exclude", "wrap": "wrap",
}


def apply_option(req: JobRequest, spec: OptionSpec, value: str | None) -> None:
    """Set one parsed option on the request; later calls win (command line after #SBATCH)."""
    name = spec.long
    req.given.append(name)
    if name in _FLAGS:
        if name == "kill-on-invalid-dep" and value is not None:
            if value.lower() not in ("yes", "no"):
                raise UsageError("Invalid --kill-on-invalid-dep specification", exit_code=255)
            req.kill_on_invalid_dep = value.lower() == "yes"
        elif name == "exclusive":
            if value is not None and value.lower() not in _EXCLUSIVE:
                raise UsageError("Invalid --exclusive specification", exit_code=255)
            req.exclusive = True
        elif value is None:
            setattr(req, _FLAGS[name], True)
        return
    assert value is not None or spec.arg != "required"
    if name in _STRINGS:
        if name == "open-mode":
            if not value or value[0].lower() not in "at":
                raise UsageError("Invalid --open-mode specification", exit_code=255)
            value = "append" if value[0].lower() == "a" else "truncate"
        if name == "job-name" and not value:
            value = "allocation"  # what Slurm 22.05 names a job given an empty --job-name (captured)
        if name == "array" and not value:
            value = None  # an empty --array submits an ordinary job, as Slurm does
        setattr(req, _STRINGS[name], value)
    elif name == "time":
        try:
            req.time_limit = parse_time(value or "") or None  # 0: no limit (Slurm's documented meaning)
        except TimeSpecError:
            raise UsageError("Invalid --time specification", exit_code=255) from None
        req.time_given = True
    elif name == "nodes":
        req.nodes_min, req.nodes_max = parse_nodes(value or "")
    elif name in ("ntasks", "ntasks-per-node", "cpus-per-task"):
        count = parse_count(value or "", "--" + name)
        if count < 1 and name in _WRAPPED_COUNT:  # past INT_MAX, wrapped (measured on 22.05)
            raise UsageError(_WRAPPED_COUNT[name].format(count))
        setattr(req, name.replace("-", "_"), count if count > 0 else None)
    elif name == "mincpus":
        parse_count(value or "", "--mincpus")
    elif name in ("begin", "deadline"):
        setattr(req, name, parse_begin(value or "", "--" + name))
    elif name in ("gpus", "gpus-per-task", "gpus-per-socket"):  # their counts are not modelled, their type is
        req.gpu_type = parse_gpus(value or "", "--" + name)[1] or req.gpu_type
    elif name == "mem":
        req.mem_mb, req.mem_per_cpu_mb = parse_mem(value or "", "--mem"), None
    elif name == "mem-per-cpu":
        req.mem_per_cpu_mb, req.mem_mb = parse_mem(value or "", "--mem-per-cpu"), None
    elif name in ("gres", "gpus-per-node"):
        req.gpus_per_node, req.gpu_type = parse_gpus(value or "", "--" + name)
    elif name == "signal":
        req.signal = parse_signal(value or "")
    elif name == "jobid":
        req.jobid_text = value or ""
    elif name == "kill-on-bad-exit":
        req.kill_on_bad_exit = 1 if value is None else parse_count(value, "--kill-on-bad-exit", positive=False)
    elif name == "kill-command":
        signum = _signal_number(value) if value else 0
        if signum is None:
            raise UsageError("Invalid --kill-command specification", exit_code=255)
        req.kill_command = signum
    elif name == "immediate":  # slurm_opt.c: parse_int("immediate", arg, false), else DEFAULT_IMMEDIATE
        req.immediate = 1 if value is None else parse_count(value, "immediate", positive=False)
    elif name == "requeue":
        req.requeue = True
    elif name == "no-requeue":
        req.requeue = False
    # every other option of Slurm 22.05 is accepted and has no effect on the local Slurm


def default_name(req: JobRequest, script: str | None) -> str:
    """Slurm's default job names: ``wrap``, the script's file name, ``interactive``, the executable."""
    if req.name:
        return req.name
    if req.command == "salloc":
        return "interactive"
    if req.wrap is not None:
        return "wrap"
    if script:
        return script.rsplit("/", 1)[-1]
    return "sbatch"
