"""What the exercises' hidden tests use to try a student's job script off the cluster (issue 38).

A graded test sees the job the student ran once, on the exercise's example. To see what the same
script does elsewhere (another count in its checkpoint, a site without ``$SLURM_TMPDIR``, a node
whose ``/tmp`` outlives the job), :func:`run_batch_script` runs its text with bash, as the batch shell
of a pretend job on one pretend node: Slurm's batch variables set, ``srun`` a stand-in that starts
the step's command once, there, and the stand-ins the test asks for (``sleep``, ``tar``...) first on
``PATH``. No Slurm is involved: it takes the time the script's own commands take.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["JOB_ID", "NODE", "run_batch_script", "unpacked_into"]

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
