"""Runs one job's processes (like slurmstepd): limits, signals, cancellation, cleanup, final state.

A batch job's supervisor is forked by the controller; salloc and a stand-alone srun supervise
their own allocation. The supervisor is a child subreaper, so every process the job starts stays
in its tree and dies with the job.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from typing import Any

from . import db, envvars, paths, procs
from .cluster import Cluster, load_cluster

MEM_POLL_S = 0.25
WATCHED = {signal.SIGCHLD, signal.SIGUSR2}


@dataclass
class Outcome:
    state: str  # final job state, or REQUEUE
    exit_code: int = 0
    exit_signal: int = 0
    step_state: str | None = None
    step_code: int = 0
    step_signal: int = 0


def expand_pattern(pattern: str, job: dict[str, Any], node: str) -> str:
    """Slurm's filename patterns: %j %x %A %a %N %u %n %t %s %%."""
    array_id = job["array_job_id"] if job["array_job_id"] is not None else job["id"]
    values = {
        "j": str(job["id"]), "x": job["name"], "A": str(array_id),
        "a": str(job["array_task_id"]) if job["array_task_id"] is not None else "4294967294",
        "N": node, "u": job["user"], "n": "0", "t": "0", "s": "batch", "%": "%",
    }
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "%" and i + 1 < len(pattern) and pattern[i + 1] in values:
            out.append(values[pattern[i + 1]])
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def default_output(job: dict[str, Any]) -> str:
    return "slurm-%A_%a.out" if job["array_job_id"] is not None else "slurm-%j.out"


class Supervisor:
    def __init__(self, job_id: int) -> None:
        self.conn = db.connect()
        job = db.get_job(self.conn, job_id)
        assert job is not None, job_id
        self.job = job
        self.cluster: Cluster = load_cluster(db.get_meta(self.conn, "profile", "local") or "local")
        self.mains: dict[int, int | None] = {}  # pid -> wait status, for the processes the job waits for
        self.err_fd: int | None = None
        self.node = job["alloc"][0]["node"]

    # -- lifecycle -----------------------------------------------------------------------------
    def register(self) -> None:
        me = os.getpid()
        with db.transaction(self.conn):
            self.conn.execute(
                "UPDATE jobs SET supervisor_pid=?, supervisor_ctime=? WHERE id=?",
                (me, procs.create_time(me), self.job["id"]),
            )
        for part in self.job["alloc"]:
            if self.cluster.slurm_tmpdir:
                envvars.node_tmpdir(self.job["id"], part["node"]).mkdir(mode=0o700, parents=True, exist_ok=True)

    def watch(self) -> Outcome:
        """Wait for the main process, enforcing time, memory, signals and control requests."""
        job, req = self.job, self.job["req"]
        start = job["start_time"]
        deadline = start + job["time_limit"] if job["time_limit"] else None
        warn_at = None
        if req.get("signal") and deadline is not None:
            warn_at = deadline - req["signal"][2]
        mem_limit = sum(p["mem"] for p in job["alloc"]) * 1024 * 1024
        max_rss = 0
        verdict: Outcome | None = None
        next_poll = 0.0
        while any(status is None for status in self.mains.values()):
            now = time.time()
            if warn_at is not None and now >= warn_at:
                self._deliver_warning()
                warn_at = None
            if deadline is not None and now >= deadline and verdict is None:
                verdict = Outcome("TIMEOUT", step_state="CANCELLED", step_signal=signal.SIGTERM)
                self._kill_all("DUE TO TIME LIMIT")
                continue
            if now >= next_poll:
                next_poll = now + MEM_POLL_S
                rss = procs.tree_rss(procs.descendants())
                max_rss = max(max_rss, rss)
                if rss > mem_limit and verdict is None:
                    self._say(f"error: StepId={job['id']}.batch exceeded memory limit ({rss} > {mem_limit}), being killed")
                    self._say(
                        f"error: Detected 1 oom-kill event(s) in StepId={job['id']}.batch. "
                        "Some of your processes may have been killed by the cgroup out-of-memory handler."
                    )
                    verdict = Outcome("OUT_OF_MEMORY", 0, 125, "OUT_OF_MEMORY", 0, 125)
                    self._kill_all(None, grace=False)
                    continue
            wake = [t for t in (deadline, warn_at, next_poll) if t is not None]
            timeout = max(0.0, min(wake) - time.time())
            sig = signal.sigtimedwait(WATCHED, timeout)
            self._reap()
            if sig is not None and sig.si_signo == signal.SIGUSR2 and verdict is None:
                verdict = self._control()
        self._kill_all(None, grace=False)  # what the job left behind dies with it
        self.max_rss = max_rss
        if verdict is not None:
            return verdict
        return outcome_of(list(self.mains.values()))

    def finish(self, outcome: Outcome) -> None:
        """Record the final state in one transaction, clean node-local scratch, wake the controller."""
        job, now = self.job, time.time()
        with db.transaction(self.conn):
            self.conn.execute(
                "UPDATE steps SET state='CANCELLED', end_time=?, exit_signal=15 WHERE job_id=? AND state='RUNNING' "
                "AND step!='batch'",
                (now, job["id"]),
            )
            if outcome.step_state and job["kind"] == "batch":
                self.conn.execute(
                    "UPDATE steps SET state=?, end_time=?, exit_code=?, exit_signal=?, max_rss=? "
                    "WHERE job_id=? AND step='batch'",
                    (outcome.step_state, now, outcome.step_code, outcome.step_signal, self.max_rss, job["id"]),
                )
            current = db.get_job(self.conn, job["id"])
            requeue = outcome.state == "REQUEUE"
            if requeue:
                self.conn.execute(
                    "UPDATE jobs SET state='PENDING', reason='BeginTime', start_time=NULL, end_time=NULL, alloc=NULL, "
                    "nodelist=NULL, restart_count=restart_count+1, supervisor_pid=NULL, batch_pid=NULL, control=NULL, "
                    "eligible_time=? WHERE id=?",
                    (now + 1.0, job["id"]),
                )
                self.conn.execute("DELETE FROM steps WHERE job_id=?", (job["id"],))
            elif current and current["state"] == "RUNNING":
                self.conn.execute(
                    "UPDATE jobs SET state=?, reason=?, end_time=?, exit_code=?, exit_signal=?, max_rss=?, control=NULL "
                    "WHERE id=?",
                    (outcome.state, _reason(outcome), now, outcome.exit_code, outcome.exit_signal, self.max_rss, job["id"]),
                )
        for part in job["alloc"]:
            shutil.rmtree(envvars.node_tmpdir(job["id"], part["node"]), ignore_errors=True)
        from .controller import poke

        poke(start=False)

    # -- helpers -------------------------------------------------------------------------------
    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                for pid in self.mains:  # lost track (should not happen): count it as ended
                    if self.mains[pid] is None:
                        self.mains[pid] = 0
                return
            if pid == 0:
                return
            if pid in self.mains:
                self.mains[pid] = status

    def _say(self, text: str) -> None:
        if self.err_fd is not None:
            try:
                os.write(self.err_fd, f"slurmstepd-{self.node}: {text}\n".encode())
            except OSError:
                pass

    def _banner(self, why: str | None) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        tail = f" {why}" if why else ""
        self._say(f"error: *** JOB {self.job['id']} ON {self.node} CANCELLED AT {stamp}{tail} ***")

    def _kill_all(self, why: str | None, grace: bool = True, banner: bool = True) -> None:
        """SIGCONT+SIGTERM to every process of the job, SIGKILL after KillWait; reap them all."""
        if grace and banner:
            self._banner(why)
        tree = procs.descendants()
        if grace:
            procs.send(tree, signal.SIGCONT)
            procs.send(tree, signal.SIGTERM)
            end = time.time() + self.cluster.kill_wait_s
            while time.time() < end and procs.descendants():
                signal.sigtimedwait(WATCHED, 0.05)
                self._reap()
        for _ in range(50):
            tree = procs.descendants()
            if not tree:
                break
            procs.send(tree, signal.SIGKILL)
            signal.sigtimedwait(WATCHED, 0.02)
            self._reap()
        self._reap()

    def _deliver_warning(self) -> None:
        batch_only, signum, _ = self.job["req"]["signal"]
        tree = procs.descendants()
        if batch_only:
            targets = [p for p in tree if p.pid in self.mains]
        else:
            targets = procs.step_processes(tree)
        procs.send(targets, signum)

    def _control(self) -> Outcome | None:
        row = self.conn.execute("SELECT control FROM jobs WHERE id=?", (self.job["id"],)).fetchone()
        action = row["control"] if row else None
        if action == "cancel":
            self._kill_all(None)
            return Outcome("CANCELLED", 0, 0, "CANCELLED", 0, signal.SIGTERM)
        if action in ("requeue", "preempt"):
            requeue = self.job["kind"] == "batch" and (action == "requeue" or self.job["req"].get("requeue") is not False)
            self._kill_all("DUE TO PREEMPTION" if action == "preempt" else "DUE TO JOB REQUEUE")
            if requeue:
                return Outcome("REQUEUE", step_state="CANCELLED", step_signal=signal.SIGTERM)
            return Outcome("PREEMPTED", 0, 0, "CANCELLED", 0, signal.SIGTERM)
        return None


def outcome_of(statuses: list[int | None]) -> Outcome:
    """COMPLETED if every process exited 0; else FAILED with the highest exit code (or the signal)."""
    codes = [os.WEXITSTATUS(s) for s in statuses if s is not None and os.WIFEXITED(s)]
    signals = [os.WTERMSIG(s) for s in statuses if s is not None and os.WIFSIGNALED(s)]
    if signals and not any(codes):
        return Outcome("FAILED", 0, signals[0], "FAILED", 0, signals[0])
    code = max(codes, default=0)
    state = "COMPLETED" if code == 0 else "FAILED"
    return Outcome(state, code, 0, state, code, 0)


def _reason(outcome: Outcome) -> str:
    return {
        "COMPLETED": "None", "FAILED": "NonZeroExitCode", "TIMEOUT": "TimeLimit", "CANCELLED": "None",
        "OUT_OF_MEMORY": "OutOfMemory", "PREEMPTED": "Preempted",
    }.get(outcome.state, "None")


def run_batch(job_id: int) -> None:
    """Entry point of a forked batch supervisor (never returns)."""
    code = 1
    try:
        os.setsid()
        procs.become_subreaper()
        signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
        sup = Supervisor(job_id)
        sup.register()
        outcome = _launch_batch(sup)
        sup.finish(outcome)
        code = 0
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _launch_batch(sup: Supervisor) -> Outcome:
    job = sup.job
    req = job["req"]
    workdir = req["workdir"]
    out_pattern = req["output"] or default_output(job)
    out_path = os.path.join(workdir, expand_pattern(out_pattern, job, sup.node))
    err_path = os.path.join(workdir, expand_pattern(req["error"], job, sup.node)) if req["error"] else out_path
    append = req.get("open_mode") == "append" or job["restart_count"] > 0
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    try:
        out_fd = os.open(out_path, flags, 0o644)
        err_fd = out_fd if err_path == out_path else os.open(err_path, flags, 0o644)
        in_fd = os.open(os.path.join(workdir, req["input"]) if req["input"] else os.devnull, os.O_RDONLY)
    except OSError as err:
        _log(f"job {job['id']}: could not open output/input: {err}")
        return Outcome("FAILED", 0, 0, "FAILED", 0, 0)
    sup.err_fd = err_fd
    script = str(paths.job_dir(job["id"]) / "script")
    env = envvars.batch_env(job, sup.cluster, req["env"])
    pid = procs.spawn([script, *req.get("script_args", [])], env, workdir, (in_fd, out_fd, err_fd), True, "SLURM_TASK_PID")
    sup.mains[pid] = None
    now = time.time()
    with db.transaction(sup.conn):
        sup.conn.execute("UPDATE jobs SET batch_pid=? WHERE id=?", (pid, job["id"]))
        sup.conn.execute(
            "INSERT OR REPLACE INTO steps(job_id, step, name, state, start_time, ntasks, ncpus, nodelist, pid) "
            "VALUES(?, 'batch', 'batch', 'RUNNING', ?, 1, ?, ?, ?)",
            (job["id"], now, job["alloc"][0]["cpus"], sup.node, pid),
        )
    os.close(in_fd)
    if out_fd != err_fd:
        os.close(out_fd)  # err_fd stays open: slurmstepd's own messages go there
    return sup.watch()


def _log(text: str) -> None:
    with open(paths.log_path(), "a") as log:
        log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")
