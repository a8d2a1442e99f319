"""What shape a finished job had, as sacct records it: the graded tests' view of a student's job.

The exercises ask for jobs of a given shape ("3 tasks on 2 nodes, one CPU each"); a job of
another shape often gives the same output (three ranks on one node print the same lines), so
the tests read the allocation and its steps from the accounting, as an instructor would.
"""
from __future__ import annotations

import subprocess
from typing import NamedTuple

__all__ = ["Step", "job_nodes", "job_steps"]


class Step(NamedTuple):
    """One step of a job (``123.0``, ``123.batch``) as sacct records it."""
    id: str
    nodes: int
    tasks: int
    state: str


def _sacct(job_id: str, fields: str, *, allocation: bool) -> list[list[str]]:
    """sacct's lines for the job (``-X``: its allocation only), split into their fields."""
    command = ["sacct", "-j", str(job_id), "-n", "-P", "-o", fields] + (["-X"] if allocation else [])
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def job_nodes(job_id: str) -> int:
    """How many nodes the job's allocation held."""
    [[nodes]] = _sacct(job_id, "NNodes", allocation=True)
    return int(nodes)


def job_steps(job_id: str) -> list[Step]:
    """The job's srun steps (``123.0``, ``123.1``...), in order; not its batch or extern step."""
    rows = _sacct(job_id, "JobID,NNodes,NTasks,State", allocation=False)
    steps = [Step(job, int(nodes or 0), int(tasks or 0), state.split()[0])
             for job, nodes, tasks, state in rows if job.partition(".")[2].isdigit()]
    return sorted(steps, key=lambda step: int(step.id.rpartition(".")[2]))
