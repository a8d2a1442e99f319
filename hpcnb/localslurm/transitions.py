"""Every change of a job's or a step's state in the local Slurm: one function per transition.

Call each inside ``db.transaction(conn)``. A guard (the state the row must still be in, the
supervisor that must still own it) makes a transition that lost a race change nothing; those
functions return whether they changed the job.

    PENDING  -> RUNNING                          start (scheduler)
    PENDING  -> CANCELLED                        cancel_pending (scancel, an interrupted salloc/srun,
                                                 a dependency that can never be met)
    RUNNING  -> PENDING                          unlaunched (the controller: nothing of it ran);
                                                 requeue (its supervisor: scontrol requeue, --requeue)
    RUNNING  -> COMPLETED, FAILED, TIMEOUT, ...  end (its supervisor)
    RUNNING  -> NODE_FAIL, CANCELLED             lost (its supervisor died, or gave up)

Steps end with :func:`end_step`, :func:`end_batch_step`, :func:`cancel_steps`, or with their job
(:func:`lost`); their GPU use is recorded with the job's end (:func:`record_gpu_use`).
"""
from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from .gpuusage import StepGpuUse


def start(conn: sqlite3.Connection, job_id: int, now: float, alloc_json: str, nodelist: str) -> None:
    """PENDING -> RUNNING on the nodes placed; the supervisor the controller forks claims it."""
    conn.execute(
        "UPDATE jobs SET state='RUNNING', reason='None', start_time=?, alloc=?, nodelist=?, control=NULL "
        "WHERE id=?",
        (now, alloc_json, nodelist, job_id),
    )


def cancel_pending(conn: sqlite3.Connection, job_id: int, now: float, reason: str | None = None) -> bool:
    """PENDING -> CANCELLED, with ``reason`` if given (a running job is cancelled by its supervisor instead)."""
    return conn.execute(
        "UPDATE jobs SET state='CANCELLED', reason=COALESCE(?, reason), end_time=? WHERE id=? AND state='PENDING'",
        (reason, now, job_id),
    ).rowcount > 0


def unlaunched(conn: sqlite3.Connection, job_id: int, supervisor_pid: int | None) -> bool:
    """RUNNING -> PENDING for a job whose script never started: no supervisor claimed it, or the
    one that did (``supervisor_pid``) died before starting the script."""
    done = conn.execute(
        "UPDATE jobs SET state='PENDING', reason='None', start_time=NULL, alloc=NULL, nodelist=NULL, "
        "supervisor_pid=NULL, supervisor_ctime=NULL, control=NULL WHERE id=? AND state='RUNNING' "
        "AND supervisor_pid IS ? AND batch_pid IS NULL",
        (job_id, supervisor_pid),
    ).rowcount
    if done:
        conn.execute("DELETE FROM steps WHERE job_id=?", (job_id,))
    return done > 0


def requeue(conn: sqlite3.Connection, job_id: int, now: float) -> None:
    """RUNNING -> PENDING after a run (``scontrol requeue``, a requeued node failure): the same id,
    one more restart, eligible again a second later (Slurm: BeginTime), its steps forgotten."""
    conn.execute(
        "UPDATE jobs SET state='PENDING', reason='BeginTime', start_time=NULL, end_time=NULL, alloc=NULL, "
        "nodelist=NULL, restart_count=restart_count+1, supervisor_pid=NULL, batch_pid=NULL, control=NULL, "
        "eligible_time=? WHERE id=?",
        (now + 1.0, job_id),
    )
    conn.execute("DELETE FROM steps WHERE job_id=?", (job_id,))


def end(conn: sqlite3.Connection, job_id: int, now: float, state: str, reason: str, *, exit_code: int,
        exit_signal: int, max_rss: int | None, total_cpu: float | None) -> None:
    """RUNNING -> its final state, with what sacct shows of it."""
    conn.execute(
        "UPDATE jobs SET state=?, reason=?, end_time=?, exit_code=?, exit_signal=?, max_rss=?, total_cpu=?, "
        "control=NULL WHERE id=?",
        (state, reason, now, exit_code, exit_signal, max_rss, total_cpu, job_id),
    )


def lost(conn: sqlite3.Connection, job_id: int, now: float, state: str, reason: str, *,
         was: str, supervisor_pid: int | None) -> bool:
    """A job (still in state ``was``, owned by ``supervisor_pid``) whose supervisor is gone ends
    ``state`` (NODE_FAIL; CANCELLED for an allocation), and so do its running steps."""
    done = conn.execute(
        "UPDATE jobs SET state=?, reason=?, end_time=?, control=NULL WHERE id=? AND state=? AND supervisor_pid IS ?",
        (state, reason, now, job_id, was, supervisor_pid),
    ).rowcount
    if done:
        conn.execute("UPDATE steps SET state=?, end_time=? WHERE job_id=? AND state='RUNNING'", (state, now, job_id))
    return done > 0


def cancel_steps(conn: sqlite3.Connection, job_id: int, now: float) -> None:
    """Every running step but the batch step ends CANCELLED (signal 15): its job is ending."""
    conn.execute(
        "UPDATE steps SET state='CANCELLED', end_time=?, exit_signal=15 WHERE job_id=? AND state='RUNNING' "
        "AND step!='batch'",
        (now, job_id),
    )


def end_batch_step(conn: sqlite3.Connection, job_id: int, now: float, state: str, *, exit_code: int,
                   exit_signal: int, max_rss: int | None) -> None:
    conn.execute(
        "UPDATE steps SET state=?, end_time=?, exit_code=?, exit_signal=?, max_rss=? WHERE job_id=? AND step='batch'",
        (state, now, exit_code, exit_signal, max_rss, job_id),
    )


def record_gpu_use(conn: sqlite3.Connection, job_id: int, use: Mapping[str, StepGpuUse]) -> None:
    """What each step used of its GPUs (sacct's gres/gpuutil and gres/gpumem), sampled by the supervisor."""
    conn.executemany(
        "UPDATE steps SET gpu_util_ave=?, gpu_util_max=?, gpu_mem_ave=?, gpu_mem_max=? WHERE job_id=? AND step=?",
        [(u.util_ave, u.util_max, u.mem_ave, u.mem_max, job_id, step) for step, u in use.items()],
    )


def end_step(conn: sqlite3.Connection, job_id: int, step: str, now: float, state: str, *, exit_code: int,
             exit_signal: int) -> None:
    """An srun step's end, as slurmctld records it."""
    conn.execute(
        "UPDATE steps SET state=?, end_time=?, exit_code=?, exit_signal=? WHERE job_id=? AND step=?",
        (state, now, exit_code, exit_signal, job_id, step),
    )
