"""Lesson 8: the notebook's own job. On a portal (CSCS's jupyter-daint, Open OnDemand, ``make
portal``) JupyterLab is itself a Slurm job, on a node the student already holds: training can start
from a cell on that node (``python -m torch.distributed.run --standalone``), or run as a step of that
job (``srun --overlap --jobid=<its id>``).

:func:`hpcnb.setup` drops the server job's ``SLURM_*`` variables from the kernel (new jobs must not
inherit them) and hands them to :func:`remember_server_job` first. :func:`notebook_job` gives that job,
or, where the notebook runs in no job (a laptop with the local Slurm), a short allocation it takes
for the lesson, as a portal's server job would be, and that :meth:`NotebookJob.release` gives back.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

SERVER_VARIABLES = ("SLURM_JOB_ID", "SLURMD_NODENAME", "SLURM_CPUS_ON_NODE", "SLURM_GPUS_ON_NODE")
HOLD_S = 600  # how long the stand-in allocation's job may run at most (its time limit: 10 min)
_server: dict[str, str] = {}  # the server job's variables, as hpcnb.setup() found them


@dataclass(frozen=True)
class NotebookJob:
    """The job whose node the notebook's cells use: the server's own (``own``) or one taken for them."""

    id: str
    node: str
    cpus: int
    gpus: int
    own: bool
    why: str = ""  # where it is not the server's own job: why not

    def processes(self, at_most: int = 4) -> int:
        """Training processes for this node: one per GPU the job holds (no more than CUDA shows here,
        where it shows any: NCCL takes one GPU per rank), else one per CPU; at most ``at_most``."""
        per_node = min(self.gpus, _cuda_devices() or self.gpus) if self.gpus else self.cpus
        return max(1, min(per_node, at_most))

    def srun(self) -> str:
        """The ``srun`` that runs a command as one more step of this job, beside what already runs there."""
        return f"srun --overlap --jobid={self.id} --ntasks=1 --cpus-per-task={self.cpus}"

    def release(self) -> str:
        """Give the allocation back (scancel) if it was taken for the lesson; the server's own job stays."""
        if self.own:
            return f"job {self.id} is your notebook server: it ends when you stop the server, not here"
        from hpcnb.jobs import Job

        Job(self.id).cancel()
        return f"job {self.id} cancelled: its node is free again"

    def __str__(self) -> str:
        held = f"job {self.id} on {self.node}: {self.cpus} CPU(s), {self.gpus} GPU(s)"
        if self.own:
            return f"this notebook's server is {held}; the cells below use the node it already holds"
        return (f"this notebook runs in no Slurm job ({self.why}): {held}, taken for the cells below, "
                "stands in for a portal's server job; commands without srun run where the notebook runs")


def _cuda_devices() -> int:
    """The GPUs torch sees from this process (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def remember_server_job(env: Mapping[str, str]) -> None:
    """Keep the variables of the job the kernel runs in (:func:`hpcnb.setup`, before it drops them)."""
    if env.get("SLURM_JOB_ID"):
        _server.clear()
        _server.update({k: env[k] for k in SERVER_VARIABLES if env.get(k)})


def server_job() -> dict[str, str]:
    """The variables of the job this notebook's server runs in ({} outside a job)."""
    if _server:
        return dict(_server)
    return {k: os.environ[k] for k in SERVER_VARIABLES if os.environ.get(k)} if "SLURM_JOB_ID" in os.environ else {}


def _running_here(env: dict[str, str]) -> str:
    """Why the chosen Slurm cannot take steps into this job ("" where it can: it runs there, on this node)."""
    from hpcnb.jobs import Job, SlurmError

    try:
        job = Job(env["SLURM_JOB_ID"])
        state, nodes = job.state, job.nodes
    except SlurmError:  # JobNotFound, or a job id the chosen Slurm does not take
        return f"job {env['SLURM_JOB_ID']} is unknown to the {_slurm_name()} Slurm"
    if state != "RUNNING" or env.get("SLURMD_NODENAME", nodes[0] if nodes else "") not in nodes:
        return f"job {env['SLURM_JOB_ID']} of the {_slurm_name()} Slurm is {state} on {nodes or 'no node'}"
    return ""


def _slurm_name() -> str:
    from hpcnb.backend import which_slurm

    return which_slurm()


def notebook_job(cpus: int = 2, gpus: int = 0, timeout: float = 120.0) -> NotebookJob:
    """The server's own job when the notebook runs in one that the chosen Slurm runs; else a new
    allocation of ``cpus`` CPUs and ``gpus`` GPUs on one node (the site's GPU request), running once
    this returns (TimeoutError after ``timeout`` s, the job cancelled)."""
    env = server_job()
    why = _running_here(env) if env else f"no SLURM_JOB_ID: the {_slurm_name()} Slurm"
    if not why:
        return NotebookJob(env["SLURM_JOB_ID"], env.get("SLURMD_NODENAME", ""), int(env.get("SLURM_CPUS_ON_NODE", 1)),
                           int(env.get("SLURM_GPUS_ON_NODE", 0)), own=True)
    return _allocate(cpus, gpus, timeout, why)


def _allocate(cpus: int, gpus: int, timeout: float, why: str) -> NotebookJob:
    """A one-node job that only holds its node (``sleep``), like a server job; running when returned."""
    from hpcnb.jobs import submit, until
    from hpcnb.lessons.jobscripts import gpu_options

    options = gpu_options(gpus) if gpus else {}
    job = submit(wrap=f"sleep {HOLD_S}", job_name="notebook", nodes=1, ntasks=1, cpus_per_task=cpus,
                 time=f"{HOLD_S // 60}", **options)
    try:
        until(lambda: job.state == "RUNNING", timeout=timeout, what=f"the allocation (job {job.id}) to start",
              job=job.id)
    except BaseException:
        job.cancel()
        raise
    return NotebookJob(job.id, job.nodes[0], cpus, gpus if options else 0, own=False, why=why)
