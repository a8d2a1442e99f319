"""Lesson 15 (and its exercises): reading what a hung or dead distributed job leaves behind.

* :func:`stack_dumps` reads the Python stack dumps that ``faulthandler`` prints (on
  ``scancel --signal=USR1``, or on a crash) out of a job's output, per rank (``srun --label``);
* :func:`where_stuck` gives, for each rank, the innermost line of a given script in its last
  dump: where that rank's own code is waiting;
* :func:`wait_for_silence` waits until a running job's output has stopped growing: it hangs;
* :func:`planted` says which rank ``hpcnb.scripts.faulty_ddp --fault mystery`` makes hang;
* :func:`dump_flight_recorder` (in a rank) writes PyTorch's flight recorder, the rank's last
  collectives, where ``torchfrtrace`` reads it: what NCCL's watchdog does by itself on a timeout
  with ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``, done by hand for gloo;
* :func:`read_flight_recorder` reads such dumps back, per rank (the exercises read
  :data:`FLIGHT_RECORDER_EXAMPLE`, dumps recorded from a real hang of ``faulty_ddp --fault skip``).

No torch at import: the lesson's kernel reads the dumps, the job's ranks write them.
"""
from __future__ import annotations

import os
import pickle
import re
import time
from dataclasses import dataclass
from pathlib import Path

NOWHERE = "192.0.2.1"   # TEST-NET-1 (RFC 5737): documentation only, no network routes it

_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str


def labelled_lines(text: str) -> dict[int, list[str]]:
    """``srun --label`` output (``1: text``) split per rank; unlabelled lines are left out."""
    ranks: dict[int, list[str]] = {}
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            ranks.setdefault(int(m[1]), []).append(m[2])
    return ranks


def stack_dumps(text: str) -> dict[int, list[list[Frame]]]:
    """Each rank's **last** faulthandler dump in a ``srun --label`` job output: a list of threads,
    each a list of frames, most recent call first (as faulthandler prints them). Ranks that
    printed no dump are left out."""
    found: dict[int, list[list[Frame]]] = {}
    for rank, lines in labelled_lines(text).items():
        dump: list[list[Frame]] | None = None
        has_current = False
        for line in lines:
            if m := _THREAD.match(line):
                if dump is None or (m[1] == "Current thread" and has_current):   # a new dump begins
                    dump, has_current = [], False
                    found[rank] = dump
                has_current |= m[1] == "Current thread"
                dump.append([])
            elif dump is not None and (m := _FRAME.match(line)):
                dump[-1].append(Frame(m[1], int(m[2]), m[3]))
            elif line.strip() not in ("", "<no Python frame>", "...") and not line.startswith("Fatal Python"):
                dump = None                                  # the program's own output: the dump has ended
    return found


def where_stuck(text: str, script: str) -> dict[int, Frame]:
    """For each rank with a dump: the innermost frame of ``script`` (a file name such as
    ``faulty_ddp.py``) in any of its threads: the line of the rank's own code it is waiting in."""
    out = {}
    for rank, threads in stack_dumps(text).items():
        for frames in threads:
            mine = [f for f in frames if Path(f.file).name == script]
            if mine:
                out[rank] = mine[0]
                break
    return out


def dumped_ranks(path: str | Path) -> set[int]:
    """The ranks whose stack dump is in the job output ``path`` (missing file: none yet)."""
    try:
        return set(stack_dumps(Path(path).read_text(errors="replace")))
    except FileNotFoundError:
        return set()


def wait_for_silence(job, quiet: float = 3.0, after: str = "step=", timeout: float = 90.0) -> float:
    """Wait until ``job`` (a :class:`hpcnb.jobs.Job`) runs, its output holds ``after``, and the output
    has not grown for ``quiet`` seconds: the job hangs. Returns the seconds waited. Raises
    RuntimeError if the job ends first, TimeoutError after ``timeout`` seconds."""
    from hpcnb.jobs import until

    start = time.monotonic()
    seen = {"size": -1, "since": start}

    def silent() -> bool:
        if job.done:
            raise RuntimeError(f"job {job.id} ended ({job.state}) before it hung")
        path = job.output_path
        text = path.read_text(errors="replace") if path.exists() else ""
        if len(text) != seen["size"]:
            seen.update(size=len(text), since=time.monotonic())
            return False
        return after in text and time.monotonic() - seen["since"] >= quiet

    until(silent, timeout=timeout, poll=0.25, what=f"job {job.id}'s output to stop growing for {quiet:g} s",
          job=job.id)
    return time.monotonic() - start


def planted(job_id: int, world_size: int) -> int:
    """The rank that ``faulty_ddp --fault mystery`` makes hang in job ``job_id``: never rank 0 (so
    that "rank 0, where the errors appear" is no answer by luck), else chosen by the job id. Its
    read of a batch never returns, while the other ranks wait in the all-reduce."""
    return 1 + job_id % (world_size - 1) if world_size > 1 else 0


FLIGHT_RECORDER_SIZE = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")   # the new name, then the old
FLIGHT_RECORDER_FILE = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DEFAULT_DUMP_PREFIX = "/tmp/nccl_trace_rank_"   # PyTorch's default: /tmp is the node's own, so set one


def flight_recorder_on() -> bool:
    """Whether this process keeps a flight recorder (a ring buffer of its last collectives)."""
    return any(int(os.environ.get(name) or 0) > 0 for name in FLIGHT_RECORDER_SIZE)


def dump_flight_recorder(rank: int) -> Path | None:
    """Write this rank's flight recorder to ``<prefix><rank>`` (the prefix from
    ``TORCH_FR_DUMP_TEMP_FILE``, as PyTorch's own dumps); None when no recorder is kept.

    The default process group of gloo is recorded under the name ``0`` but listed under ``""`` in
    the dump's configuration (PyTorch 2.13): the two are made to agree, or ``torchfrtrace`` fails
    with a KeyError."""
    if not flight_recorder_on():
        return None
    from torch._C._distributed_c10d import _dump_fr_trace

    trace = pickle.loads(_dump_fr_trace())
    names = {entry["process_group"] for entry in trace.get("entries", [])}
    config = trace.get("pg_config", {})
    if "" in config and len(names) == 1:
        (name, desc), = names
        config[name] = {**config.pop(""), "name": name, "desc": desc}
    prefix = next((os.environ[n] for n in FLIGHT_RECORDER_FILE if os.environ.get(n)), DEFAULT_DUMP_PREFIX)
    path = Path(f"{prefix}{rank}")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.part")
    partial.write_bytes(pickle.dumps(trace))
    partial.replace(path)   # whole or not at all: srun may end this rank at any moment now
    return path


# Recorded on the local Slurm (gloo, torch 2.13): ``faulty_ddp --fault skip --rank 1 --at-step 3 --timeout 5``,
# 3 tasks on 2 nodes, TORCH_FR_BUFFER_SIZE=2000: rank 1 went to the final barrier, ranks 0 and 2 waited
# in the 4th all-reduce. A dump of NCCL's process group has the same layout.
FLIGHT_RECORDER_EXAMPLE = Path(__file__).parent / "data" / "flight-recorder"


def read_flight_recorder(folder: str | Path, prefix: str = "rank_") -> dict[int, dict]:
    """The flight-recorder dumps ``<folder>/<prefix><rank>`` (what ``TORCH_FR_DUMP_TEMP_FILE`` named),
    unpickled, by rank. Raises FileNotFoundError when there are none, ValueError for a file that is
    not a dump. Only read dumps you trust: they are pickles."""
    folder = Path(folder)
    paths = {int(p.name[len(prefix):]): p for p in folder.glob(f"{prefix}*") if p.name[len(prefix):].isdigit()}
    if not paths:
        raise FileNotFoundError(f"no flight-recorder dump {folder / prefix}<rank>")
    dumps = {}
    for rank, path in sorted(paths.items()):
        try:
            dumps[rank] = pickle.loads(path.read_bytes())
        except Exception as e:   # a pickle's errors are many (UnpicklingError, EOFError, KeyError...)
            raise ValueError(f"{path}: not a flight-recorder dump ({e})") from None
        if not isinstance(dumps[rank], dict) or "entries" not in dumps[rank]:
            raise ValueError(f"{path}: not a flight-recorder dump (no 'entries')")
    return dumps
