"""hpcnb.lessons.ownjob (lesson 8): the notebook's own job on the local Slurm, from inside a job (as a
portal's server) and from none (a laptop), and a step run into it with ``srun --overlap --jobid``."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from hpcnb.jobs import Job, submit, until
from hpcnb.lessons import ownjob


@pytest.fixture(autouse=True)
def no_server_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a kernel outside any job: nothing remembered from an earlier setup()."""
    monkeypatch.setattr(ownjob, "_server", {})
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)


def steps(job_id: str) -> dict[str, str]:
    """The job's steps in sacct: ``{"batch": "RUNNING", "0": "COMPLETED", ...}``."""
    out = subprocess.run(["sacct", "-j", job_id, "-n", "-P", "-o", "JobID,JobName,State"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    return {f"{i.split('.', 1)[1]} {name}": state for i, name, state in
            (line.split("|") for line in out.splitlines()) if "." in i}


def test_outside_a_job_it_takes_an_allocation_runs_a_step_in_it_and_gives_it_back(workdir) -> None:
    job = ownjob.notebook_job(cpus=2)
    try:
        assert not job.own and job.cpus == 2 and job.node.startswith("node"), job
        assert Job(job.id).state == "RUNNING"
        assert "runs in no Slurm job (no SLURM_JOB_ID: the local Slurm)" in str(job)
        ran = subprocess.run([*job.srun().split(), "bash", "-c", "echo $SLURM_JOB_ID.$SLURM_STEP_ID $SLURMD_NODENAME"],
                             capture_output=True, text=True, timeout=60)
        assert ran.stdout.split() == [f"{job.id}.0", job.node], ran.stderr
        assert steps(job.id)["0 bash"] == "COMPLETED"
    finally:
        said = job.release()
    assert said == f"job {job.id} cancelled: its node is free again"
    until(lambda: Job(job.id).done, timeout=30, what=f"job {job.id} to end", job=job.id)


SERVER = textwrap.dedent("""
    import subprocess, hpcnb
    from hpcnb.lessons.ownjob import notebook_job
    hpcnb.setup()  # drops the job's SLURM_* variables, as in a portal's kernel
    job = notebook_job()
    print(job)
    print(job.release())
    subprocess.run([*job.srun().split(), "bash", "-c", "echo step $SLURM_JOB_ID.$SLURM_STEP_ID"], check=True)
""")


def test_inside_a_job_the_notebook_job_is_that_job_and_srun_adds_a_step_to_it(workdir) -> None:
    """A portal's server: a kernel run as step 0 of a job; hpcnb.setup() drops the job's variables,
    and yet notebook_job() is that job (no new allocation) and its srun a step of it, beside step 0."""
    (workdir / "server.py").write_text(SERVER)
    server = submit(wrap=f"srun {sys.executable} server.py", cpus_per_task=2, time="5")
    assert server.wait(timeout=120, quiet=True) == "COMPLETED", server.tail()
    out = server.tail()
    node = server.nodes[0]
    assert f"this notebook's server is job {server.id} on {node}: 2 CPU(s), 0 GPU(s)" in out, out
    assert f"job {server.id} is your notebook server: it ends when you stop the server" in out
    assert f"step {server.id}.1" in out
    assert steps(server.id) == {"batch batch": "COMPLETED", "0 python": "COMPLETED", "1 bash": "COMPLETED"}
    assert not [r for r in subprocess.run(["squeue", "-h", "-n", "notebook", "-o", "%i"], capture_output=True,
                                          text=True, timeout=60).stdout.split()], "an allocation was taken"


def test_a_job_the_chosen_slurm_does_not_know_is_not_taken_for_the_notebooks(workdir) -> None:
    """A kernel in a job of another Slurm (a CI job, a real cluster's) with HPCNB_SLURM=local."""
    ownjob.remember_server_job({"SLURM_JOB_ID": "987654", "SLURMD_NODENAME": "nid001234"})
    job = ownjob.notebook_job(cpus=1)
    try:
        assert not job.own and job.why == "job 987654 is unknown to the local Slurm", job
    finally:
        job.release()


def test_an_allocation_that_does_not_start_is_cancelled_with_a_clear_error(workdir) -> None:
    """Both nodes' CPUs held: the allocation waits; after the timeout it is cancelled, not left queued."""
    holders = [submit(wrap="sleep 120", cpus_per_task=2, time="3") for _ in range(2)]
    try:
        until(lambda: all(h.state == "RUNNING" for h in holders), timeout=60, what="the holders to run")
        with pytest.raises(TimeoutError, match=r"waited 2 s for the allocation \(job \d+\) to start"):
            ownjob.notebook_job(cpus=2, timeout=2)
        queued = subprocess.run(["squeue", "-h", "-n", "notebook", "-o", "%i %T"], capture_output=True, text=True,
                                timeout=60).stdout
        assert queued.strip() == "", queued
    finally:
        for h in holders:
            h.cancel()


@pytest.mark.parametrize(("cpus", "gpus", "at_most", "expected"), [
    (288, 4, 4, 4),  # a GH200 node: one process per GPU
    (1, 0, 4, 1),    # a portal's one-CPU server
    (2, 0, 4, 2),    # no GPU: one per CPU
    (64, 8, 4, 4),   # at most at_most
])
def test_processes_one_per_gpu_else_per_cpu(cpus, gpus, at_most, expected) -> None:
    job = ownjob.NotebookJob("1", "n", cpus, gpus, own=True)
    assert job.processes(at_most) == expected


def test_processes_no_more_than_the_gpus_cuda_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local Slurm's 2 virtual GPU slots on a machine with one real GPU: one process, not two on cuda:0."""
    monkeypatch.setattr(ownjob, "_cuda_devices", lambda: 1)
    assert ownjob.NotebookJob("1", "node1", 2, 2, own=False).processes() == 1
    monkeypatch.setattr(ownjob, "_cuda_devices", lambda: 0)  # no CUDA: the slots are CPU processes
    assert ownjob.NotebookJob("1", "node1", 2, 2, own=False).processes() == 2


def test_setup_remembers_the_job_it_drops() -> None:
    env = {"SLURM_JOB_ID": "12", "SLURMD_NODENAME": "node2", "SLURM_CPUS_ON_NODE": "4", "SLURM_MEM_PER_NODE": "2G"}
    ownjob.remember_server_job(env)
    ownjob.remember_server_job({})  # a second setup() in the same kernel, the variables gone: kept
    assert ownjob.server_job() == {"SLURM_JOB_ID": "12", "SLURMD_NODENAME": "node2", "SLURM_CPUS_ON_NODE": "4"}
