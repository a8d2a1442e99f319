"""The errors and warnings of the job API (:mod:`hpcnb.jobs`), which it re-exports."""
from __future__ import annotations

from typing import Protocol


class HasJobId(Protocol):
    """What an error needs of a job: its id (a :class:`hpcnb.jobs.Job`; no import back to it)."""

    id: str


class SlurmError(RuntimeError):
    """A Slurm command failed. ``stderr`` and ``exit_code`` are the command's own."""

    def __init__(self, message: str, stderr: str = "", exit_code: int | None = None) -> None:
        super().__init__(message)
        self.stderr = stderr
        self.exit_code = exit_code


class SubmitError(SlurmError):
    """sbatch refused the job; the message carries Slurm's text (and a hint where one helps)."""


class JobNotFound(SlurmError, LookupError):
    """Neither squeue nor sacct knows the job id."""


class JobFailed(RuntimeError):
    """``wait(check=True)``: the job ended in a state other than COMPLETED."""

    def __init__(self, job: HasJobId, state: str, exit_code: int | None, tail: str) -> None:
        code = "" if exit_code is None else f" with exit code {exit_code}"
        where = f"\n--- last lines of its output ---\n{tail.rstrip()}" if tail.strip() else ""
        super().__init__(f"job {job.id} ended {state}{code}{where}")
        self.job, self.state, self.exit_code, self.tail = job, state, exit_code, tail


class SlurmWarning(UserWarning):
    """Something a Slurm command printed on stderr although it succeeded."""
