"""What the exercises' hidden tests use to try a student's job script off the cluster (issue 38).

A graded test sees the job the student ran once, on the exercise's example. To see what the same
script does elsewhere (another count in its checkpoint, a site without ``$SLURM_TMPDIR``, a node
whose ``/tmp`` outlives the job), :func:`run_batch_script` runs its text with bash, as the batch shell
of a pretend job on one pretend node: Slurm's batch variables set, ``srun`` a stand-in that starts
the step's command once, there, and the stand-ins the test asks for (``sleep``, ``tar``...) first on
``PATH``. No Slurm is involved: it takes the time the script's own commands take.

:func:`flight_recorder_dumps` makes the flight-recorder dumps of other hangs (other ranks, more
ranks, other collectives, none stuck) in the layout of the ones recorded from a real hang.
"""
from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["JOB_ID", "NODE", "flight_recorder_dumps", "run_batch_script", "unpacked_into"]

JOB_ID = "987654"   # the pretend job's id: no real job of the course's has it
NODE = "node7"      # the pretend node

SRUN = f"""#!{sys.executable}
# srun's stand-in: the step's command, once, on this (pretend) node
import os, sys
from hpcnb.slurm.options import parse_args

_, command = parse_args(sys.argv[1:], "srun")
os.execvpe(command[0], command, {{**os.environ, "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0"}})
"""

TAR = """#!/bin/bash
# tar's stand-in: the real tar, after noting where it ran and with what
printf '%s\\t%s\\n' "$PWD" "$*" >> "$HPCNB_PROBE_LOG"
PATH=${PATH#*:} exec tar "$@"   # the real one: the next on PATH
"""


def _stubs(folder: Path, stubs: dict[str, str]) -> Path:
    """A folder of executable stand-ins (name -> text): srun's always, then ``stubs``."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in {"srun": SRUN, **stubs}.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return bin_dir


def run_batch_script(script: str, submit_dir: Path, *, tmp: Path | None = None, slurm_tmpdir: Path | None = None,
                     stubs: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run the job script's text with bash in ``submit_dir``, as job :data:`JOB_ID`'s batch shell on
    :data:`NODE` (one node, one task), with ``stubs`` (name -> executable text; srun's is built in)
    first on ``PATH``. ``tmp`` stands for the node's ``/tmp``: every ``/tmp`` the text names is
    replaced by it. ``slurm_tmpdir``: the site's ``$SLURM_TMPDIR`` (None: a site that sets none).
    ``$HPCNB_PROBE_LOG`` names a file the stand-ins may write to (``submit_dir/../probe.log``)."""
    probe = submit_dir.parent
    bin_dir = _stubs(probe / "stubs", stubs or {})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    env.update({"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}", "USER": "student",
                "SLURM_JOB_ID": JOB_ID, "SLURM_JOBID": JOB_ID, "SLURM_JOB_NAME": "probe", "SLURM_NNODES": "1",
                "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": NODE,
                "SLURMD_NODENAME": NODE, "SLURM_SUBMIT_DIR": str(submit_dir), "SLURM_CPUS_ON_NODE": "1",
                "HPCNB_PROBE_LOG": str(probe / "probe.log")})
    if slurm_tmpdir is not None:
        slurm_tmpdir.mkdir(parents=True, exist_ok=True)
        env["SLURM_TMPDIR"] = str(slurm_tmpdir)
    if tmp is not None:
        tmp.mkdir(parents=True, exist_ok=True)
        script = re.sub(r"/tmp\b", str(tmp), script)
    try:
        return subprocess.run(["bash", "-s"], input=script, cwd=submit_dir, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as err:   # a loop that never ends: the test says so in its own words
        return subprocess.CompletedProcess(err.cmd, 124, _text(err.stdout),
                                           _text(err.stderr) + f"\n(the script did not end within {timeout:g} s)")


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def unpacked_into(submit_dir: Path) -> list[Path]:
    """Where the ``tar`` stand-in (``stubs={"tar": probes.TAR}``) extracted: each extracting call's
    ``-C``/``--directory`` folder, else the folder it ran in."""
    log = submit_dir.parent / "probe.log"
    where = []
    for line in log.read_text().splitlines() if log.exists() else []:
        cwd, _, args = line.partition("\t")
        words = args.split()
        if not _extracts(words):
            continue
        folder = cwd
        for word, following in zip(words, words[1:] + [""]):
            if word in ("-C", "--directory") and following:
                folder = following
            elif word.startswith(("--directory=", "-C")) and word not in ("-C", "--directory="):
                folder = word.removeprefix("--directory=").removeprefix("-C")
        where.append(Path(cwd, folder))
    return where


def _extracts(words: list[str]) -> bool:
    """Whether tar's arguments ask it to extract (``-xf``, ``xf``, ``--extract``)."""
    old_style = bool(words) and re.fullmatch(r"[A-Za-z]*x[A-Za-z]*", words[0]) is not None
    return old_style or any(w in ("--extract", "--get") or re.fullmatch(r"-[A-Za-z]*x[A-Za-z]*", w) for w in words)


def _watchdog_mark(seq: int, completed: int) -> str:
    """A collective's mark in NCCL's flight recorder, when the last completed one is ``completed``
    (a flight-recorder entry's, not a Slurm job's)."""
    return "completed" if seq <= completed else "started" if seq == completed + 1 else "scheduled"


def flight_recorder_dumps(example: dict[int, dict], collectives: dict[int, list[str]], *, backend: str = "nccl",
                          completed: int | None = None) -> dict[int, dict]:
    """Per-rank flight-recorder dumps of a pretend job, in the layout of the recorded ``example``
    (rank -> dump, as :func:`hpcnb.lessons.hangs.read_flight_recorder` reads it): rank ``r`` recorded
    the collectives ``collectives[r]`` (op names: ``"all_reduce"``, ``"barrier"``...) with sequence ids
    1, 2, ... As NCCL's watchdog marks them: those up to sequence id ``completed`` (default: all but
    the last) "completed", the next "started", later ones "scheduled"."""
    template = next(iter(example.values()))
    first = template["entries"][0]
    ranks = sorted(collectives)
    dumps = {}
    for rank in collectives:   # in the order given: a folder's files come in any order
        done = len(collectives[rank]) - 1 if completed is None else completed
        entries = []
        for i, op in enumerate(collectives[rank]):
            seq = i + 1
            entry = copy.deepcopy(first)
            entry.update(record_id=i, collective_seq_id=seq, op_id=seq, profiling_name=f"{backend}:{op}",
                         time_created_ns=first["time_created_ns"] + 10_000_000 * i + 1000 * rank,
                         state=_watchdog_mark(seq, done))
            entry["frames"][0]["name"] = op
            entries.append(entry)
        dump = copy.deepcopy({k: v for k, v in template.items() if k != "entries"})
        dump["entries"] = entries
        for config in dump.get("pg_config", {}).values():
            config["ranks"] = str(ranks)
        for status in dump.get("pg_status", {}).values():
            status.update(last_enqueued_collective=len(entries), last_completed_collective=min(done, len(entries)),
                          last_started_collective=min(done + 1, len(entries)))
        dumps[rank] = dump
    return dumps
