"""Lesson-level job scripts run on both Slurms (tests/parity/jobs/).

A 2-node x 2-task torch DDP job over gloo, a Lightning DDP job (2 nodes x 2 devices, CPU), Horovod
started by srun (one Slurm task per worker) and a ``horovodrun --gloo`` job whose host list comes
from ``scontrol show hostnames``. Each must end alike on both sides with the same accounting and
output: the trainings COMPLETE with the same per-rank report and the same final weights (they are
deterministic); horovodrun FAILS at its ssh check on both, as on a cluster with no ssh between
its nodes. The node names must resolve to the nodes' own addresses
(ci/real-slurm.sh puts them in /etc/hosts; the local Slurm's nodes get a hosts file of their own).
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from .harness import JOBS, Norm, Side, compare, name_addresses, on_both, python, settled_text


LESSONS = {  # name: (job script, files beside it, the state it ends in)
    "ddp-gloo": ("ddp_gloo.sh", ("ddp_gloo.py", "free_port.py"), "COMPLETED"),
    "lightning-ddp": ("lightning_ddp.sh", ("lightning_ddp.py", "free_port.py"), "COMPLETED"),
    "horovod-srun": ("horovod_srun.sh", ("horovod_train.py",), "COMPLETED"),
    "horovod": ("horovod.sh", ("horovod_train.py",), "FAILED"),
}
NOISE = (  # lines that tell nothing about Slurm and may differ with timing
    re.compile(r"^\s*$"),
)
# how ssh to node2 fails: refused by node2 (the local nodes, the 22.05 lane's), or no ssh client at
# all (the 24.11 lane's nodes: a minimal Debian 13 root); horovodrun stops alike after either
SSH_FAILS = re.compile(r"^(ssh: connect to host node2 port 22: Connection refused|/bin/sh: 1: ssh: not found)$")


def _needs(name: str) -> None:
    modules = {"ddp-gloo": "torch.distributed", "lightning-ddp": "pytorch_lightning", "horovod": "horovod.torch",
               "horovod-srun": "horovod.torch"}
    check = subprocess.run([python(), "-c", f"import {modules[name]}"], capture_output=True, text=True)
    if check.returncode:
        last = (check.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"`import {modules[name]}` fails in {python()} ({last}): "
                    + ("build Horovod with `bash ci/build-horovod.sh .venv`" if name.startswith("horovod")
                       else "install the course's dl extras (torch==2.13.0, pytorch-lightning 2.6)"))
    if name == "horovod" and not shutil.which("horovodrun", path=str(python()).rsplit("/", 1)[0]):
        pytest.skip("horovodrun is not installed next to the venv's python")


def run_lesson(side: Side, name: str) -> dict:
    script, helpers, _ = LESSONS[name]
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
    text = name_addresses(norm.text(text))  # the peers' addresses: each Slurm's own network
    lines = sorted(SSH_FAILS.sub("<ssh to node2 fails>", line) for line in text.splitlines()
                   if not any(p.search(line) for p in NOISE))
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
        assert result["state"] == [LESSONS[name][2]], f"{name} on the {side} Slurm: {result['state']}\n{result['raw']}"
    errors = []
    for aspect in ("sacct", "output"):
        try:
            compare(f"lesson: {name} [{aspect}]", loc[aspect], rea[aspect])
        except AssertionError as err:
            errors.append(str(err))
    if LESSONS[name][2] == "COMPLETED":
        assert any("weights " in line for line in loc["output"]), loc["raw"]
    else:
        assert "ssh: connect to host node2 port 22: Connection refused" in loc["raw"], loc["raw"]
    assert not errors, "\n\n".join(errors)
