"""Runs one job's processes (like slurmstepd): limits, signals, cancellation, cleanup, final state.

A batch job's supervisor is forked by the controller; salloc's and a stand-alone srun's runs in
the command's own process, which execs into it once granted (:mod:`.allocation`). The
supervisor is a child subreaper, so every process the job starts stays in its tree and dies with
the job.
"""
from __future__ import annotations

import errno
import os
import re
import resource
import shutil
import signal
import sqlite3
import stat
import time
from typing import Callable, NamedTuple

import hostlist

from . import apart, db, envvars, paths, procs, transitions
from .cluster import Cluster, state_cluster
from .gpuusage import GpuSampler, StepGpuUse
from .patterns import default_output, expand_pattern
from .wake import ensure_running, log, poke

MEM_POLL_S = 0.25
SUPERVISOR_BUSY_MS = 30 * 60 * 1000
FINISH_PATIENCE_S = 600.0
WATCHED = procs.SUPERVISOR_SIGNALS


class Outcome(NamedTuple):  # not a dataclass: salloc's and srun's supervisor start with it (about 10 ms)
    state: str  # final job state, or REQUEUE
    exit_code: int = 0
    exit_signal: int = 0
    step_state: str | None = None
    step_code: int = 0
    step_signal: int = 0
    reason: str | None = None  # the job's Reason, when not the state's usual one


class Supervisor:
    def __init__(self, job_id: int) -> None:
        self.conn = _connect()
        job = db.get_job(self.conn, job_id)
        assert job is not None, job_id
        self.job = job
        self.cluster: Cluster = state_cluster(self.conn)
        self.mains: dict[int, int | None] = {}  # pid -> wait status, for the processes the job waits for
        self.err_fd: int | None = None
        self.node = job["alloc"][0]["node"]
        self.max_rss = 0
        self.gpu_use: dict[str, StepGpuUse] = {}  # by step, where NVML sees the job's GPUs
        self.db_inode = _inode(paths.db_path())
        # salloc's: a revoked allocation (scancel, time limit) ends its steps and is recorded at once,
        # while the command (on the login node) runs on; this is then told the outcome
        self.on_revoke: Callable[[Supervisor, Outcome], None] | None = None
        self.revoked: Outcome | None = None

    def _fresh(self) -> None:
        """Reconnect if the state file was replaced (``hpcnb slurm recover``) while the job ran."""
        inode = _inode(paths.db_path())
        if inode is not None and inode != self.db_inode:
            try:
                self.conn.close()
            except sqlite3.Error:
                pass
            self.conn = _connect()
            self.db_inode = inode

    # -- lifecycle -----------------------------------------------------------------------------
    def register(self) -> bool:
        """Claim the job. A batch job is claimed only while RUNNING and unclaimed, so a job the
        controller gave up on (and requeued) is never run twice; ``batch_pid=-1`` then says that the
        script may be starting (a supervisor that dies after this means NODE_FAIL, not a requeue)."""
        me = os.getpid()
        with db.transaction(self.conn):
            if self.job["kind"] == "batch":
                claimed = self.conn.execute(
                    "UPDATE jobs SET supervisor_pid=?, supervisor_ctime=?, batch_pid=-1 WHERE id=? "
                    "AND state='RUNNING' AND supervisor_pid IS NULL AND start_time IS ?",
                    (me, procs.create_time(me), self.job["id"], self.job["start_time"]),
                ).rowcount
                if not claimed:
                    return False
            else:
                self.conn.execute(
                    "UPDATE jobs SET supervisor_pid=?, supervisor_ctime=? WHERE id=?",
                    (me, procs.create_time(me), self.job["id"]),
                )
        old = os.umask(0o077)  # the node folders too, not only the job's own: private
        try:
            for part in self.job["alloc"]:
                if self.cluster.slurm_tmpdir:
                    paths.node_tmpdir(self.job["id"], part["node"]).mkdir(mode=0o700, parents=True, exist_ok=True)
                for folder in apart.private_folders(self.job["id"], part["node"]):
                    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        finally:
            os.umask(old)
        return True

    def watch(self) -> Outcome:
        """Wait for the main process, enforcing time, memory, signals and control requests."""
        job = self.job
        time_limit, warned = job["time_limit"], False
        deadline, warn_at = self._due(time_limit, warned)
        # each step is held to the job's memory on each of its nodes (the batch step: the first node's),
        # as a real Slurm 22.05 does; --mem=0: all of the node's memory
        node_limit = {p["node"]: (p["mem"] or self.cluster.nodes[p["node"]].memory_mb) * 1024 * 1024
                      for p in job["alloc"]}
        max_rss = 0
        verdict: Outcome | None = None
        next_poll = 0.0
        gpu_ids = [gpu for part in job["alloc"] for gpu in part["gpus"]]
        gpus, why = GpuSampler.open(gpu_ids)
        if gpu_ids:
            log(f"[{job['id']}.batch] GPU accounting: {why}")
        while any(status is None for status in self.mains.values()):
            now = time.time()
            if warn_at is not None and now >= warn_at:
                self._deliver_warning()
                warn_at, warned = None, True
            if deadline is not None and now >= deadline and verdict is None:
                verdict = Outcome("TIMEOUT", step_state="CANCELLED", step_signal=signal.SIGTERM)
                self._end(verdict, "DUE TO TIME LIMIT")
                deadline = warn_at = None
                continue
            if now >= next_poll and self.revoked is None:
                next_poll = now + MEM_POLL_S
                # scontrol update TimeLimit= takes effect at once
                if verdict is None and (fresh := self._time_limit(time_limit)) != time_limit:
                    time_limit = fresh
                    deadline, warn_at = self._due(time_limit, warned)
                    continue
                found = procs.descendants()
                usage = procs.rss_by_step_node(found, self.node)
                if gpus is not None:
                    gpus.sample(procs.step_lookup(found, self.node))
                max_rss = max(max_rss, sum(usage.values()))
                over = [(key, rss) for key, rss in usage.items() if rss > node_limit.get(key[1], 0)]
                if over and verdict is None:
                    (step, node), rss = over[0]
                    limit = node_limit.get(node, 0)
                    self._say(f"error: StepId={job['id']}.{step} exceeded memory limit ({rss} > {limit}), being killed")
                    self._say(
                        f"error: Detected 1 oom-kill event(s) in StepId={job['id']}.{step}. "
                        "Some of your processes may have been killed by the cgroup out-of-memory handler."
                    )
                    verdict = Outcome("OUT_OF_MEMORY", 0, 125, "OUT_OF_MEMORY", 0, 125)
                    self._kill_all(None, grace=False)
                    continue
            wake = [t for t in (deadline, warn_at, None if self.revoked else next_poll) if t is not None] or [now + 1]
            timeout = max(0.0, min(wake) - time.time())
            sig = signal.sigtimedwait(WATCHED, timeout)
            self._reap()
            if sig is not None and sig.si_signo == signal.SIGUSR2 and verdict is None:
                verdict = self._control()
        self._kill_all(None, grace=False)  # what the job left behind dies with it
        if verdict is None and job["kind"] == "batch":
            verdict = self._late_requeue()
        self.max_rss = max_rss
        if gpus is not None:
            gpus.close()
            self.gpu_use = gpus.steps
        if verdict is not None:
            return verdict
        return outcome_of(list(self.mains.values()), self.cluster.since("24.11"))

    def _due(self, time_limit: int | None, warned: bool) -> tuple[float | None, float | None]:
        """When the job's time limit ends, and when its ``--signal`` warning is due (None: no limit,
        no warning, or the warning already sent)."""
        if not time_limit:
            return None, None
        deadline = self.job["start_time"] + time_limit
        signal_spec = self.job["req"].get("signal")
        return deadline, (deadline - signal_spec[2] if signal_spec and not warned else None)

    def _time_limit(self, known: int | None) -> int | None:
        """The job's time limit as the state has it now (``scontrol update TimeLimit=`` changes it);
        ``known`` while the state cannot be read (the next poll tries again)."""
        try:
            self._fresh()
            row = self.conn.execute("SELECT time_limit FROM jobs WHERE id=?", (self.job["id"],)).fetchone()
        except sqlite3.Error:
            return known
        return row["time_limit"] if row else known

    def finish(self, outcome: Outcome) -> None:
        """Clean node-local scratch, record the final state in one transaction, wake the controller.

        The scratch goes first, as slurmd's epilog runs before a job leaves COMPLETING: whoever
        sees the job ended (``sbatch --wait``) finds its ``SLURM_TMPDIR`` gone. A full disk under
        the state file is waited out (up to FINISH_PATIENCE_S): the job's true end is recorded once
        there is room, instead of a supervisor dying and a NODE_FAIL."""
        self._clean_scratch()
        give_up = time.time() + FINISH_PATIENCE_S
        while True:
            try:
                self._record(outcome)
                break
            except sqlite3.OperationalError as err:
                if time.time() > give_up or db.is_damage(err):
                    raise
                log(f"[{self.job['id']}.batch] cannot record the job's end yet ({err}); retrying")
                time.sleep(1.0)
        self._wake_controller()

    def _record(self, outcome: Outcome) -> None:
        job, now = self.job, time.time()
        self._fresh()
        with db.transaction(self.conn):
            transitions.cancel_steps(self.conn, job["id"], now)
            transitions.record_gpu_use(self.conn, job["id"], self.gpu_use)
            if outcome.step_state and job["kind"] == "batch":
                transitions.end_batch_step(self.conn, job["id"], now, outcome.step_state, exit_code=outcome.step_code,
                                           exit_signal=outcome.step_signal, max_rss=self.max_rss)
            current = db.get_job(self.conn, job["id"])
            if outcome.state == "REQUEUE":
                transitions.requeue(self.conn, job["id"], now)
            elif current and current["state"] == "RUNNING":
                transitions.end(self.conn, job["id"], now, outcome.state, _reason(outcome),
                                exit_code=outcome.exit_code, exit_signal=outcome.exit_signal, max_rss=self.max_rss,
                                total_cpu=_children_cpu() if job["kind"] == "batch" else None)

    def _clean_scratch(self) -> None:
        for part in self.job["alloc"]:
            shutil.rmtree(paths.node_tmpdir(self.job["id"], part["node"]), ignore_errors=True)
            for folder in apart.private_folders(self.job["id"], part["node"]):
                shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def _wake_controller() -> None:
        try:
            if not poke(start=False):
                ensure_running()  # the controller was killed: pending jobs must not wait for the next command
        except (db.StateError, sqlite3.Error, OSError):
            pass  # the job's end is recorded; the next command starts the controller

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

    def _banner(self, why: str | None, job_line: bool = True) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        tail = f" {why}" if why else ""
        # as Slurm 22.05: each running step's srun says it was aborted, its slurmstepd prints a STEP line
        steps = self.conn.execute("SELECT step, nodelist FROM steps WHERE job_id=? AND state='RUNNING' "
                                  "AND step!='batch'", (self.job["id"],)).fetchall()
        for step in steps:
            first = hostlist.expand_hostlist(step["nodelist"])[0]
            self._write(f"srun: Job step aborted: Waiting up to {self.cluster.kill_wait_s + 2} seconds for job "
                        "step to finish.")
            self._write(f"slurmstepd-{first}: error: *** STEP {self.job['id']}.{step['step']} ON {first} "
                        f"CANCELLED AT {stamp}{tail} ***")
        if job_line:
            self._say(f"error: *** JOB {self.job['id']} ON {self.node} CANCELLED AT {stamp}{tail} ***")

    def _write(self, line: str) -> None:
        if self.err_fd is not None:
            try:
                os.write(self.err_fd, f"{line}\n".encode())
            except OSError:
                pass

    def _job_tree(self) -> list:
        """Every process of the job: the descendants, and each main process not yet reaped. A main
        process between its fork and its exec still has this supervisor's command line, so
        :func:`procs.descendants` takes it for a daemon and leaves it out (a cancel then missed it)."""
        tree = procs.descendants()
        listed = {p.pid for p in tree}
        return tree + procs.processes(pid for pid, status in self.mains.items()
                                      if status is None and pid not in listed)

    def _kill_all(self, why: str | None, grace: bool = True, banner: bool = True) -> None:
        """SIGCONT+SIGTERM to every process of the job, SIGKILL after KillWait; reap them all."""
        if grace and banner:
            self._banner(why)
        tree = self._job_tree()
        if grace:
            procs.send(tree, signal.SIGCONT)
            procs.send(tree, signal.SIGTERM)
            end = time.time() + self.cluster.kill_wait_s
            while time.time() < end and self._job_tree():
                signal.sigtimedwait(WATCHED, 0.05)
                self._reap()
        for _ in range(50):
            tree = self._job_tree()
            if not tree:
                break
            procs.send(tree, signal.SIGKILL)
            signal.sigtimedwait(WATCHED, 0.02)
            self._reap()
        self._reap()

    def _end(self, outcome: Outcome, why: str | None) -> None:
        """End the job's processes; for salloc only its steps' (see ``on_revoke``)."""
        if self.on_revoke is None:
            self._kill_all(why)
            return
        self._banner(why, job_line=False)
        self._stop(procs.step_processes(procs.descendants()))
        self.finish(outcome)
        self.revoked = outcome
        self.on_revoke(self, outcome)

    def _stop(self, targets: list) -> None:
        """SIGCONT+SIGTERM, then SIGKILL after KillWait, to these processes only."""
        procs.send(targets, signal.SIGCONT)
        procs.send(targets, signal.SIGTERM)
        end = time.time() + self.cluster.kill_wait_s
        while time.time() < end and not all(map(procs.gone, targets)):
            signal.sigtimedwait(WATCHED, 0.05)
            self._reap()
        procs.send(targets, signal.SIGKILL)
        self._reap()

    def _deliver_warning(self) -> None:
        batch_only, signum, _ = self.job["req"]["signal"]
        tree = procs.descendants()
        if batch_only:
            targets = [p for p in tree if p.pid in self.mains]
        else:
            targets = procs.step_processes(tree)
        procs.send(targets, signum)

    def _late_requeue(self) -> Outcome | None:
        """A requeue (or preemption) asked for as the batch script ended, whose SIGUSR2 was not taken
        before the script's exit: Slurm's controller has the request, so the job is requeued, not
        COMPLETED (lesson 12's job asks for its own requeue, then exits 0 at once)."""
        try:
            return self._control(only=("requeue", "preempt"))
        except sqlite3.Error:
            return None

    def _control(self, only: tuple[str, ...] = ("cancel", "requeue", "preempt")) -> Outcome | None:
        """Carry out what scancel/scontrol asked of the job (one of ``only``); None if nothing."""
        self._fresh()
        row = self.conn.execute("SELECT control FROM jobs WHERE id=?", (self.job["id"],)).fetchone()
        action = row["control"] if row else None
        if action not in only:
            return None
        if action == "cancel":
            outcome = Outcome("CANCELLED", 0, 0, "CANCELLED", 0, signal.SIGTERM)
            self._end(outcome, None)
            return outcome
        requeue = self.job["kind"] == "batch" and (action == "requeue" or self.job["req"].get("requeue") is not False)
        self._kill_all("DUE TO PREEMPTION" if action == "preempt" else "DUE TO JOB REQUEUE")
        if requeue:
            return Outcome("REQUEUE", step_state="CANCELLED", step_signal=signal.SIGTERM)
        return Outcome("PREEMPTED", 0, 0, "CANCELLED", 0, signal.SIGTERM)


def outcome_of(statuses: list[int | None], signal_reason: bool = False) -> Outcome:
    """COMPLETED if every process exited 0; else FAILED with the highest exit code (or the signal).
    A job ended by a signal has reason JobLaunchFailure (22.05), or (``signal_reason``, 24.11) names
    the signal: ``RaisedSignal:9(Killed)``."""
    codes = [os.WEXITSTATUS(s) for s in statuses if s is not None and os.WIFEXITED(s)]
    signals = [os.WTERMSIG(s) for s in statuses if s is not None and os.WIFSIGNALED(s)]
    if signals and not any(codes):  # as Slurm: the step CANCELLED, the job FAILED
        reason = f"RaisedSignal:{signals[0]}({signal.strsignal(signals[0])})" if signal_reason else "JobLaunchFailure"
        return Outcome("FAILED", 0, signals[0], "CANCELLED", 0, signals[0], reason=reason)
    code = max(codes, default=0)
    state = "COMPLETED" if code == 0 else "FAILED"
    return Outcome(state, code, 0, state, code, 0)


def _reason(outcome: Outcome) -> str:
    if outcome.reason:
        return outcome.reason
    return {
        "COMPLETED": "None", "FAILED": "NonZeroExitCode", "TIMEOUT": "TimeLimit", "CANCELLED": "None",
        "OUT_OF_MEMORY": "OutOfMemory", "PREEMPTED": "Preempted",
    }.get(outcome.state, "None")


def _children_cpu() -> float:
    """User + system CPU seconds of every process the job ran: a batch supervisor is a forked
    subreaper that reaps them all, so its children's usage is the job's (sacct's TotalCPU)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_batch(job_id: int) -> None:
    """Entry point of a forked batch supervisor (never returns)."""
    code = 1
    sup: Supervisor | None = None
    try:
        os.setsid()
        procs.become_subreaper()
        signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
        sup = Supervisor(job_id)
        if not sup.register():
            os._exit(0)  # requeued or taken over meanwhile: another launch runs it, never two
        outcome = _launch_batch(sup)
        sup.finish(outcome)
        code = 0
    except BaseException as err:  # noqa: BLE001 - never leave the job's processes behind
        import traceback

        log(f"[{job_id}.batch] error: the supervisor failed: "
             + "".join(traceback.format_exception(err)).rstrip())
        _crashed(sup, job_id)
    finally:
        os._exit(code)


def _crashed(sup: Supervisor | None, job_id: int) -> None:
    """The supervisor itself failed: kill what the job started and record NODE_FAIL, as slurmctld
    does when a node's slurmstepd dies."""
    for _ in range(20):
        tree = procs.descendants()
        if not tree:
            break
        procs.send(tree, signal.SIGKILL)
        time.sleep(0.02)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
    if sup is None:
        return
    try:
        sup._fresh()
        now = time.time()
        with db.transaction(sup.conn):
            transitions.lost(sup.conn, job_id, now, "NODE_FAIL", "NodeDown", was="RUNNING", supervisor_pid=os.getpid())
    except Exception:  # noqa: BLE001 - the controller's liveness check records it instead
        pass


def _inside(path: str, folder: str) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _launch_failed(sup: Supervisor, message: str) -> Outcome:
    """Slurm's answer when slurmstepd cannot set up the job (its I/O, say): FAILED, ExitCode 0:53,
    Reason JobLaunchFailure, the batch step CANCELLED; the error goes to the log."""
    job = sup.job
    log(f"[{job['id']}.batch] error: {message}")
    with db.transaction(sup.conn):
        transitions.start_batch_step(sup.conn, job["id"], time.time(), job["alloc"][0]["cpus"], sup.node, None)
    return Outcome("FAILED", 0, 53, "CANCELLED", 0, 53, reason="JobLaunchFailure")


def _launch_batch(sup: Supervisor) -> Outcome:
    job = sup.job
    req = job["req"]
    workdir = req["workdir"]
    row = sup.conn.execute("SELECT control FROM jobs WHERE id=?", (job["id"],)).fetchone()
    if row and row["control"] == "cancel":  # scancel came between scheduling and this launch
        return Outcome("CANCELLED", 0, 0, None)
    if req.get("umask") is not None:
        os.umask(req["umask"])  # the submitter's, as Slurm propagates it (SLURM_UMASK)
    out_pattern = req["output"] or default_output(job)
    out_path = os.path.join(workdir, expand_pattern(out_pattern, job, sup.node))
    err_path = os.path.join(workdir, expand_pattern(req["error"], job, sup.node)) if req["error"] else out_path
    state = str(paths.state_dir())
    for kind, path in (("stdout", out_path), ("stderr", err_path)):
        if _inside(path, state):
            return _launch_failed(sup, f"Could not open {kind} file {path}: it is inside the local Slurm's "
                                       f"private state directory {state}")
    append = req.get("open_mode") == "append"  # a requeued job truncates its output too (real 22.05)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    opened: list[int] = []
    try:
        what, where = "stdout", out_path
        out_fd = _open_output(sup, out_path, flags)
        if isinstance(out_fd, Outcome):
            return out_fd
        opened.append(out_fd)
        what, where = "stderr", err_path
        err_fd = out_fd if err_path == out_path else _open_output(sup, err_path, flags)
        if isinstance(err_fd, Outcome):
            os.close(out_fd)
            return err_fd
        opened.append(err_fd)
        what, where = "stdin", os.path.join(workdir, req["input"]) if req["input"] else os.devnull
        in_fd = os.open(where, os.O_RDONLY)
    except OSError as err:
        for fd in set(opened):
            os.close(fd)
        return _launch_failed(sup, f"Could not open {what} file {where}: {err.strerror}")
    sup.err_fd = _message_descriptor(err_fd)
    script = str(paths.job_dir(job["id"]) / "slurm_script")  # $0, as with slurmd
    env = envvars.batch_env(job, sup.cluster, req["env"])
    pid = procs.spawn(batch_argv(script, req.get("script_args", [])), env, workdir, (in_fd, out_fd, err_fd), True,
                      "SLURM_TASK_PID", f"slurmstepd-{sup.node}", rlimits=req.get("rlimits"),
                      view=apart.view_for(job, sup.node, sup.cluster))
    sup.mains[pid] = None
    now = time.time()
    with db.transaction(sup.conn):
        transitions.start_batch_step(sup.conn, job["id"], now, job["alloc"][0]["cpus"], sup.node, pid)
    os.close(in_fd)
    if out_fd != err_fd:
        os.close(out_fd)  # err_fd stays open: slurmstepd's own messages go there
    outcome = sup.watch()
    if outcome.state == "FAILED":
        trouble = _write_trouble(job, req, sorted({out_path, err_path}))
        if trouble:
            reason, message = trouble
            outcome = outcome._replace(reason=reason)
            log(f"[{job['id']}.batch] error: {message}")
            sup._say(f"error: {message}")  # lands only if there is room after all
    return outcome


def _open_output(sup: Supervisor, path: str, flags: int) -> int | Outcome:
    """open(2) an output file as slurmstepd does, except that a FIFO nobody reads yet is waited for
    here (opened with O_NONBLOCK, again and again), not inside open(2): the time limit and scancel
    still end the job meanwhile (their outcome is returned). Once open, the descriptor blocks as a
    plain open's does; for a regular file O_NONBLOCK changes nothing."""
    job = sup.job
    deadline = job["start_time"] + job["time_limit"] if job["time_limit"] else None
    while True:
        try:
            fd = os.open(path, flags | os.O_NONBLOCK, 0o644)
        except OSError as err:
            if err.errno != errno.ENXIO:  # ENXIO: a FIFO without a reader
                raise
        else:
            os.set_blocking(fd, True)
            return fd
        if deadline is not None and time.time() >= deadline:
            return Outcome("TIMEOUT", step_state="CANCELLED", step_signal=signal.SIGTERM)
        sig = signal.sigtimedwait(WATCHED, 0.1)
        if sig is not None and sig.si_signo == signal.SIGUSR2:
            outcome = sup._control()
            if outcome is not None:
                return outcome


def _message_descriptor(fd: int) -> int:
    """Where the supervisor writes its own messages (the CANCELLED line...): ``fd``, or for a FIFO a
    non-blocking descriptor of its own, so that a reader that stopped reading cannot hold the
    supervisor (a message that does not fit is dropped)."""
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        return fd
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return fd


_LOGIN_BASH = re.compile(r"#![ \t]*(/\S*/bash)((?:[ \t]+-\S+)+)[ \t]*")


def batch_argv(script: str, args: list[str]) -> list[str]:
    """How the batch script starts: as its ``#!`` line says, except that a login bash (``#!/bin/bash -l``,
    Piz Daint's guide) still finds the local Slurm's commands after its profile has reset PATH, as a
    cluster's login PATH has ``srun``: the same bash and flags, then the commands' folder first on
    PATH, then the script sourced with ``$0`` and its arguments as they would be."""
    try:
        with open(script, "rb") as fh:
            first = fh.readline().decode("utf-8", "replace").rstrip("\n")
    except OSError:
        first = ""
    login = _LOGIN_BASH.fullmatch(first)
    flags = login.group(2).split() if login else []
    if not any(f == "--login" or (not f.startswith("--") and "l" in f) for f in flags):
        return [script, *args]
    command = f'PATH="{envvars.local_commands_folder()}${{PATH:+:$PATH}}"; . "$0" "$@"'
    return [login.group(1), *flags, "-c", command, script, *args]


def _write_trouble(job: dict, req: dict, outputs: list[str]) -> tuple[str, str] | None:
    """Why a failed job's output could not be written, if that is it: its file size limit
    (RLIMIT_FSIZE, propagated from the submitting shell) reached, or no space left on the disk."""
    import resource

    limit = (req.get("rlimits") or {}).get("FSIZE", resource.RLIM_INFINITY)
    for path in outputs:
        try:
            size = os.stat(path).st_size
            fs = os.statvfs(os.path.dirname(path) or ".")
        except OSError:
            continue
        if limit not in (None, resource.RLIM_INFINITY) and 0 <= limit <= size:
            return "FileSizeLimit", (f"output file {path} reached the job's file size limit ({limit} bytes, "
                                     "RLIMIT_FSIZE from the submitting shell): File too large")
        free = (fs.f_bfree if os.geteuid() == 0 else fs.f_bavail) * fs.f_frsize
        if free < 64 * 1024:
            return "DiskFull", f"write to output file {path} failed: No space left on device (its disk is full)"
    return None


def _connect():
    """A supervisor never gives up recording its job: it waits for the write lock as long as it takes
    (commands give up after a minute; under heavy load a supervisor may wait longer than that)."""
    conn = db.connect()
    conn.execute(f"PRAGMA busy_timeout={SUPERVISOR_BUSY_MS}")
    return conn


def _inode(path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


