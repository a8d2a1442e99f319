"""Lesson-level job scripts run to completion on both Slurms (tests/parity/jobs/).

A 2-node x 2-task torch DDP job over gloo, a Lightning DDP job (2 nodes x 2 devices, CPU) and a
``horovodrun --gloo`` job whose host list comes from ``scontrol show hostnames``. Each must
COMPLETE on both sides with the same accounting, the same per-rank report and the same final
weights (the training is deterministic). The node names must resolve (ci/real-slurm.sh puts
them in /etc/hosts; the local Slurm uses the same names).
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from .harness import JOBS, Norm, Side, compare, on_both, python, settled_text


LESSONS = {
    "ddp-gloo": ("ddp_gloo.sh", ("ddp_gloo.py", "free_port.py")),
    "lightning-ddp": ("lightning_ddp.sh", ("lightning_ddp.py", "free_port.py")),
    "horovod": ("horovod.sh", ("horovod_train.py",)),
}
NOISE = (  # lines that tell nothing about Slurm and may differ with timing
    re.compile(r"^\s*$"),
)


def _needs(name: str) -> None:
    modules = {"ddp-gloo": "torch.distributed", "lightning-ddp": "pytorch_lightning", "horovod": "horovod.torch"}
    check = subprocess.run([python(), "-c", f"import {modules[name]}"], capture_output=True, text=True)
    if check.returncode:
        last = (check.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"`import {modules[name]}` fails in {python()} ({last}): "
                    + ("build Horovod with `bash ci/build-horovod.sh .venv`" if name == "horovod"
                       else "install the course's dl extras (torch==2.13.0, pytorch-lightning 2.6)"))
    if name == "horovod" and not shutil.which("horovodrun", path=str(python()).rsplit("/", 1)[0]):
        pytest.skip("horovodrun is not installed next to the venv's python")


def run_lesson(side: Side, name: str) -> dict:
    script, helpers = LESSONS[name]
    wd = side.workdir(f"lesson-{name}")
    for file in (script, *helpers):
        shutil.copy(JOBS / file, wd / file)
    res = side.ok(["sbatch", "--parsable", script], wd)
    job_id = int(res.stdout.strip().split(";")[0])
    side.submitted.append(job_id)
    states = side.wait_done(job_id, wd, timeout=480)
    norm = Norm(side, [wd], [job_id])
    outputs = list(wd.glob(f"*-{job_id}.out"))
    text = (settled_text(outputs[0]) if outputs else None) or "<no output file>"
    lines = sorted(line for line in norm.text(text).splitlines() if not any(p.search(line) for p in NOISE))
    rows = side.ok(["sacct", "-P", "-n", "-j", str(job_id), "--format",
                    "JobID,JobName,State,ExitCode,NNodes,NTasks,AllocCPUS,NodeList"], wd).stdout.splitlines()
    return {"state": list(states.values()), "sacct": [norm.job(r) for r in rows], "output": lines, "raw": text}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LESSONS))
def test_lesson_job(sides, requeue_case, name: str) -> None:
    _needs(name)
    got = on_both(sides, lambda side: run_lesson(side, name))
    loc, rea = got["local"], got["real"]
    for side, result in got.items():
        assert result["state"] == ["COMPLETED"], f"{name} on the {side} Slurm: {result['state']}\n{result['raw']}"
    errors = []
    for aspect in ("sacct", "output"):
        try:
            compare(f"lesson: {name} [{aspect}]", loc[aspect], rea[aspect])
        except AssertionError as err:
            errors.append(str(err))
    assert any("weights " in line for line in loc["output"]), loc["raw"]
    assert not errors, "\n\n".join(errors)
