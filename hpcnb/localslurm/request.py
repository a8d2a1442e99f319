"""Command-line options -> a validated :class:`JobRequest`, with Slurm 22.05's error texts."""
from __future__ import annotations

import dataclasses
import re
import signal as _signal
from dataclasses import dataclass, field
from typing import Any

from hpcnb.slurm_options import OptionSpec, parse_slurm_time


class UsageError(Exception):
    """A bad option value: the command prints ``<cmd>: error: <line>`` for each line and exits 1."""

    def __init__(self, *lines: str, exit_code: int = 1) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines
        self.exit_code = exit_code


class SubmitError(Exception):
    """The controller refuses the request (sbatch: ``Batch job submission failed: <reason>``)."""

    def __init__(self, reason: str, *before: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.before = before


@dataclass
class JobRequest:
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
    pty: bool = False
    overlap: bool = False
    kill_on_bad_exit: bool = False
    given: list[str] = field(default_factory=list)  # long names of options set explicitly
    env: dict[str, str] = field(default_factory=dict)  # the environment the job starts from
    script_args: list[str] = field(default_factory=list)
    script_path: str | None = None  # absolute path of the batch script (scontrol's Command=, squeue %o)
    submit_dir: str = ""
    workdir: str = ""
    submit_host: str = ""
    rlimits: dict[str, int] = field(default_factory=dict)  # the submitting shell's soft limits
    umask: int | None = None  # the submitting shell's umask

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "JobRequest":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def parse_count(value: str, option: str) -> int:
    """Slurm's ``parse_int(name, value, positive=true)``."""
    if not re.fullmatch(r"\s*\+?\d+\s*", value) or int(value) <= 0:
        raise UsageError(f'Invalid numeric value "{value}" for {option}.')
    return int(value)


_MEM_UNITS = {"": 1, "M": 1, "K": 1 / 1024, "G": 1024, "T": 1024 * 1024}


def parse_mem(value: str, option: str) -> int:
    """Memory in MB: ``100``, ``500M``, ``2G``, ``1T``."""
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", value.strip().upper())
    if not match:
        raise UsageError(f"Invalid {option} specification")
    return max(1, int(int(match.group(1)) * _MEM_UNITS[match.group(2)])) if int(match.group(1)) else 0


def parse_nodes(value: str) -> tuple[int, int | None]:
    match = re.fullmatch(r"(\d+)(?:-(\d+))?", value.strip())
    if not match or int(match.group(1)) <= 0 or (match.group(2) and int(match.group(2)) < int(match.group(1))):
        raise UsageError(f'Invalid node count specification "{value}"' if not match else "Invalid node count specification")
    return int(match.group(1)), int(match.group(2)) if match.group(2) else None


def parse_gpus(value: str, option: str) -> tuple[int, str | None]:
    """``--gres=gpu[:type]:N`` or ``--gpus-per-node=[type:]N``."""
    parts = value.split(":")
    if option == "--gres":
        if parts[0] != "gpu":
            raise UsageError("Invalid generic resource (gres) specification")
        parts = parts[1:] or ["1"]
    try:
        count = int(parts[-1])
    except ValueError:
        raise UsageError(f"Invalid {option} specification" if option != "--gres" else "Invalid generic resource (gres) specification") from None
    if count < 0 or len(parts) > 2:
        raise UsageError(f"Invalid {option} specification")
    return count, parts[0] if len(parts) == 2 else None


def parse_signal(value: str) -> list[Any]:
    """``[{R|B}:]<sig>[@<secs>]`` -> [batch_only, signum, seconds]."""
    match = re.fullmatch(r"(?:([RB]{1,2}):)?([A-Za-z0-9]+)(?:@(\d+))?", value.strip())
    signum = _signal_number(match.group(2)) if match else None
    if not match or signum is None:
        raise UsageError("Invalid --signal specification")
    return ["B" in (match.group(1) or ""), signum, int(match.group(3) or 60)]


def _signal_number(name: str) -> int | None:
    if name.isdigit():
        return int(name) if 0 < int(name) < 65 else None
    name = name.upper()
    name = name if name.startswith("SIG") else "SIG" + name
    sig = getattr(_signal, name, None)
    return int(sig) if isinstance(sig, _signal.Signals) else None


_FLAGS = {
    "parsable": "parsable", "test-only": "test_only", "wait": "wait", "quiet": "quiet", "label": "label",
    "pty": "pty", "overlap": "overlap", "hold": "hold", "exclusive": "exclusive",
    "kill-on-invalid-dep": "kill_on_invalid_dep", "kill-on-bad-exit": "kill_on_bad_exit",
}
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
            req.kill_on_invalid_dep = value.lower() in ("yes", "y", "1")
        elif name == "exclusive" or value is None:
            setattr(req, _FLAGS[name], True)
        return
    assert value is not None or spec.arg != "required"
    if name in _STRINGS:
        if name == "job-name" and not value:
            raise UsageError("Invalid --job-name specification")
        setattr(req, _STRINGS[name], value)
    elif name == "time":
        try:
            req.time_limit = parse_slurm_time(value or "")
        except ValueError:
            raise UsageError("Invalid --time specification", exit_code=255) from None
        req.time_given = True
    elif name == "nodes":
        req.nodes_min, req.nodes_max = parse_nodes(value or "")
    elif name in ("ntasks", "ntasks-per-node", "cpus-per-task"):
        setattr(req, name.replace("-", "_"), parse_count(value or "", "--" + name))
    elif name == "mem":
        req.mem_mb, req.mem_per_cpu_mb = parse_mem(value or "", "--mem"), None
    elif name == "mem-per-cpu":
        req.mem_per_cpu_mb, req.mem_mb = parse_mem(value or "", "--mem-per-cpu"), None
    elif name in ("gres", "gpus-per-node"):
        req.gpus_per_node, req.gpu_type = parse_gpus(value or "", "--" + name)
    elif name == "signal":
        req.signal = parse_signal(value or "")
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
