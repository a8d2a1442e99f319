"""Every change of a job's or a step's state in the local Slurm: one function per transition.
No other module writes ``jobs.state`` or ``steps.state`` (``tests/test_house_rules.py`` checks).

Call each inside ``db.transaction(conn)``. A guard (the state the row must still be in, the
supervisor that must still own it) makes a transition that lost a race change nothing; those
functions return whether they changed the job.

    (new)    -> PENDING                          queue (sbatch, salloc, srun: submit.queue_jobs)
    PENDING  -> RUNNING                          start (scheduler)
    PENDING  -> CANCELLED                        cancel_pending (scancel, an interrupted salloc/srun,
                                                 a dependency that can never be met)
    RUNNING  -> PENDING                          unlaunched (the controller: nothing of it ran);
                                                 requeue (its supervisor: scontrol requeue, --requeue)
    RUNNING  -> COMPLETED, FAILED, TIMEOUT, ...  end (its supervisor)
    RUNNING  -> NODE_FAIL, CANCELLED             lost (its supervisor died, or gave up)
    any      -> what a recovered state keeps     recover_job, recover_step, restore (hpcnb slurm recover)

Steps start with :func:`start_batch_step` (the supervisor) or :func:`start_step` (srun), and end
with :func:`end_step`, :func:`end_batch_step`, :func:`cancel_steps`, or with their job
(:func:`lost`); their GPU use is recorded with the job's end (:func:`record_gpu_use`).
"""
from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from .gpuusage import StepGpuUse


def queue(conn: sqlite3.Connection, fields: Mapping[str, Any]) -> None:
    """A new job, PENDING: ``fields`` name every column of the INSERT but ``state``."""
    conn.execute(
        "INSERT INTO jobs(id, array_job_id, array_task_id, array_throttle, name, user, uid, account, "
        "partition, kind, state, reason, submit_time, eligible_time, time_limit, held, req, "
        "supervisor_pid, supervisor_ctime) VALUES(:id, :array_job_id, :array_task_id, :array_throttle, :name, "
        ":user, :uid, :account, :partition, :kind, 'PENDING', :reason, :submit_time, :eligible_time, "
        ":time_limit, :held, :req, :supervisor_pid, :supervisor_ctime)",
        fields,
    )


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


def refuse_immediate(conn: sqlite3.Connection, job_id: int, now: float) -> bool:
    """PENDING -> FAILED (BadConstraints): an ``--immediate`` job that cannot start at once, as
    slurmctld's job_allocate() ends it (its exit_code = 1, a wait status: sacct's ``0:1``)."""
    return conn.execute(
        "UPDATE jobs SET state='FAILED', reason='BadConstraints', exit_signal=1, start_time=?, end_time=? "
        "WHERE id=? AND state='PENDING'",
        (now, now, job_id),
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


def start_batch_step(conn: sqlite3.Connection, job_id: int, now: float, ncpus: int, node: str,
                     pid: int | None) -> None:
    """The batch step RUNNING (its script ``pid``, which the job records as its batch_pid); with no
    ``pid`` the step that a failed launch ends at once."""
    if pid is not None:
        conn.execute("UPDATE jobs SET batch_pid=? WHERE id=?", (pid, job_id))
    conn.execute(
        "INSERT OR REPLACE INTO steps(job_id, step, name, state, start_time, ntasks, ncpus, nodelist, pid) "
        "VALUES(?, 'batch', 'batch', 'RUNNING', ?, 1, ?, ?, ?)",
        (job_id, now, ncpus, node, pid),
    )


def start_step(conn: sqlite3.Connection, job_id: int, step: str, name: str, now: float, *, ntasks: int,
               ncpus: int, nodelist: str, pid: int) -> None:
    """An srun step RUNNING (``pid``: its srun)."""
    conn.execute(
        "INSERT INTO steps(job_id, step, name, state, start_time, ntasks, ncpus, nodelist, pid) "
        "VALUES(?,?,?,'RUNNING',?,?,?,?,?)",
        (job_id, step, name, now, ntasks, ncpus, nodelist, pid),
    )


def recover_job(job: dict[str, Any], now: float, script_kept: bool) -> str | None:
    """``hpcnb slurm recover``: a salvaged job record as the fresh state keeps it. A job that was
    running ends NODE_FAIL (an allocation: CANCELLED), a pending allocation CANCELLED (its
    salloc/srun was stopped), a pending batch job whose script is lost FAILED. Changes ``job``;
    returns the state it got, None when it keeps its own. Write it with :func:`restore`."""
    batch = job["kind"] == "batch"
    if job["state"] in ("RUNNING", "COMPLETING", "SUSPENDED"):
        job.update(state="NODE_FAIL" if batch else "CANCELLED", end_time=now, control=None,
                   reason="NodeDown" if batch else "None")
    elif job["state"] == "PENDING" and not batch:
        job.update(state="CANCELLED", end_time=now)
    elif job["state"] == "PENDING" and not script_kept:
        job.update(state="FAILED", reason="JobLaunchFailure", end_time=now)
    else:
        return None
    return job["state"]


def recover_step(step: dict[str, Any], now: float) -> None:
    """``hpcnb slurm recover``: a salvaged step that was running ends NODE_FAIL."""
    if step.get("state") == "RUNNING":
        step.update(state="NODE_FAIL", end_time=now)


def restore(conn: sqlite3.Connection, table: str, record: Mapping[str, Any]) -> None:
    """Write a salvaged record (of ``jobs`` or ``steps``, after :func:`recover_job` or
    :func:`recover_step`) into a fresh state, as it is."""
    if table not in ("jobs", "steps"):
        raise ValueError(table)
    cols = list(record)
    conn.execute(f"INSERT OR REPLACE INTO {table}({','.join(cols)}) VALUES({','.join('?' * len(cols))})",
                 [record[c] for c in cols])
