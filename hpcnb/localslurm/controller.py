"""The local Slurm's controller (slurmctld): a background daemon started on first use.

It schedules pending jobs, forks a supervisor per batch job, notices dead supervisors and
owners (NODE_FAIL / released allocations), and exits after a quiet spell. Commands wake it
with a datagram on its socket; if it is not running they start it (any command does, while
jobs are pending or running), so a killed controller loses nothing: its state is all in the DB.

A batch job's launch is safe against the controller dying at any moment: the scheduler marks it
RUNNING without a supervisor; the forked supervisor claims it (only if still unclaimed) and
records ``batch_pid=-1`` before the script can start. A RUNNING job that nobody claimed for
``LAUNCH_GRACE_S`` never ran and goes back to PENDING; one whose supervisor died ends NODE_FAIL
(its leftover processes killed), or goes back to PENDING if its script had not been started.
"""
from __future__ import annotations

import fcntl
import os
import resource
import select
import signal
import socket
import sqlite3
import sys
import time

from . import apart, db, network, paths, procs, settings, transitions
from .wake import log, socket_address
from .cluster import state_cluster

_LOCK_FD: int | None = None  # the controller's lock; forked supervisors must not hold it
IDLE_EXIT_S = settings.seconds("HPCNB_CONTROLLER_IDLE")
CHECK_EVERY_S = 1.0
CONTROLLER_BUSY_MS = 10 * 60 * 1000  # the controller waits for the write lock (commands: a minute)
RESCHEDULE_S = 5.0  # a scheduling pass at least this often, even when nothing woke us
# how long a scheduled job may wait for its supervisor to claim it before it counts as never launched
LAUNCH_GRACE_S = settings.seconds("HPCNB_LAUNCH_GRACE")
LOCK_WAIT_S = 3.0  # a new controller waits this long for a leaving one's lock
# a finished job's stored environment is dropped this long after its end
ENV_KEPT_AFTER_END_S = settings.seconds("HPCNB_ENV_KEPT_AFTER_END")
NOT_STARTED = -1  # batch_pid while the supervisor prepares the launch (the script may be starting)


class Controller:
    def __init__(self) -> None:
        self.conn = self._connect()
        self.cluster = state_cluster(self.conn)
        self.sock = self._bind()
        self.last_busy = time.time()
        self.started_at = time.time()
        self.db_inode = os.stat(paths.db_path()).st_ino
        self.errors: dict[str, int] = {}
        self.exits: dict[int, int] = {}  # wait status of each supervisor reaped, by pid
        self.own_network = network.wanted() and apart.mode() == "apart"  # off for good once it fails

    @staticmethod
    def _bind() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path = str(paths.socket_path())
        if os.path.exists(path):
            os.unlink(path)
        old = os.umask(0o077)
        try:
            with socket_address() as address:
                sock.bind(address)
        finally:
            os.umask(old)
        sock.setblocking(False)
        return sock

    def _may_exit(self) -> bool:
        """Idle: stop listening, then look once more. A job queued after this look finds no socket,
        so its command starts a new controller (which waits for our lock); one queued before is seen."""
        try:
            os.unlink(paths.socket_path())
        except FileNotFoundError:
            pass
        if self.conn.execute("SELECT 1 FROM jobs WHERE state IN ('PENDING','RUNNING') LIMIT 1").fetchone():
            self.sock.close()
            self.sock = self._bind()
            self.last_busy = time.time()
            return False
        return True

    def run(self) -> None:
        """Schedule when something happened (a wake-up datagram, a job found dead, a begin time
        reached) and every RESCHEDULE_S as a safety net, not in a busy loop: a queue of a thousand
        held jobs costs nothing while nothing changes."""
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        signal.signal(signal.SIGCHLD, lambda *_: None)
        if self.own_network:  # before the first grant: an allocation's srun starts its tasks at once
            self._start_network()
        next_check = 0.0
        next_pass = 0.0  # schedule at once on start
        while True:
            if self._orphaned():  # first: a vanished state makes every step below fail, again and again
                return
            try:
                self._reap()
                now = time.time()
                if now >= next_pass:
                    self._launch_all(self._schedule())
                    now = time.time()
                    next_pass = min(now + RESCHEDULE_S, self._next_begin(now))
                if now >= next_check:
                    next_check = now + CHECK_EVERY_S
                    busy, changed = self._check_liveness()
                    self._forget_environments(now)
                    if changed:
                        next_pass = 0.0
                    if busy:
                        self.last_busy = now
                    elif now - self.last_busy > IDLE_EXIT_S and self._may_exit():
                        return
            except (db.StateError, sqlite3.DatabaseError) as err:
                if isinstance(err, db.StateError) or db.is_damage(err):
                    log(f"controller: stopping, the state file is damaged: {err}")
                    raise SystemExit(1) from None
                self._trouble(err)
                next_pass = 0.0
            except Exception as err:  # noqa: BLE001 - keep scheduling; the log tells what went wrong
                self._trouble(err)
                next_pass = 0.0
            try:
                wait = min(next_check, next_pass) - time.time()
                ready, _, _ = select.select([self.sock], [], [], max(0.0, wait))
            except InterruptedError:
                ready = []
            if ready:
                self._drain()
                next_pass = 0.0

    def _orphaned(self) -> bool:
        """Our state file was deleted or replaced (``hpcnb slurm reset``/``recover``, a removed state
        directory): leave, or we would schedule from a file nobody else can see, forever."""
        try:
            if os.stat(paths.db_path()).st_ino == self.db_inode:
                return False
        except OSError:
            pass
        log("controller: the state file was removed or replaced; leaving")
        return True

    def _next_begin(self, now: float) -> float:
        """When the next pending job's begin time (a requeue's, say) comes; infinity if none."""
        row = self.conn.execute(
            "SELECT MIN(eligible_time) FROM jobs WHERE state='PENDING' AND eligible_time > ?", (now,)
        ).fetchone()
        return row[0] if row and row[0] else float("inf")

    def _trouble(self, err: BaseException) -> None:
        """Log an unexpected error (the first few times) and back off a little; never die of it."""
        key = f"{type(err).__name__}: {err}"
        self.errors[key] = self.errors.get(key, 0) + 1
        if self.errors[key] <= 3:
            import traceback

            log("controller: " + "".join(traceback.format_exception(err)).rstrip())
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        time.sleep(0.2)

    def _drain(self) -> None:
        while True:
            try:
                self.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if status:  # the supervisor's own failure: kept for the NODE_FAIL line of the log
                self.exits[pid] = status
                if len(self.exits) > 1000:
                    self.exits.pop(next(iter(self.exits)))

    def _schedule(self) -> list[dict]:
        from . import scheduler

        with db.transaction(self.conn):
            return scheduler.schedule(self.conn, self.cluster)

    def _launch_all(self, started: list[dict]) -> None:
        batch = [job["id"] for job in started if job["kind"] == "batch"]
        own_network = bool(started) and self.own_network
        if not batch and not own_network:
            return
        # No SQLite connection may cross a fork: close ours, fork the supervisors, reopen.
        self.conn.close()
        try:
            if own_network:  # again, should its holder have gone
                self._start_network()
            for job_id in batch:
                try:
                    self._launch(job_id)
                except OSError as err:  # e.g. EAGAIN: the job stays unclaimed and is requeued after the grace
                    log(f"controller: could not start the supervisor of job {job_id}: {err}")
        finally:
            self.conn = self._connect()

    def _start_network(self) -> None:
        """The nodes' own network (held outside every job: a job's subreaper must not adopt it). Where
        it cannot start, the nodes share this machine's network (not tried again by this controller)."""
        try:
            network.ensure(list(self.cluster.nodes))
        except OSError as err:
            self.own_network = False
            log(f"controller: the nodes' network did not start, they share this machine's: {err}")

    @staticmethod
    def _connect():
        """Reopen the state file, waiting out a busy spell (a damaged file still raises)."""
        while True:
            try:
                conn = db.connect()
                conn.execute(f"PRAGMA busy_timeout={CONTROLLER_BUSY_MS}")
                return conn
            except db.StateError as err:
                if "locked" not in str(err):
                    raise
                time.sleep(0.5)

    def _launch(self, job_id: int) -> None:
        pid = os.fork()
        if pid == 0:
            try:
                self.sock.close()
                if _LOCK_FD is not None:
                    os.close(_LOCK_FD)
                from .supervisor import run_batch

                run_batch(job_id)
            finally:
                os._exit(1)

    def _check_liveness(self) -> tuple[bool, bool]:
        """Fail jobs whose supervisor died (NODE_FAIL); requeue launches that never happened;
        release allocations whose owner died. Returns (any job pending or running, anything changed)."""
        rows = self.conn.execute(
            "SELECT id, kind, state, start_time, supervisor_pid, supervisor_ctime, batch_pid FROM jobs "
            "WHERE state='RUNNING' OR (state='PENDING' AND kind!='batch')"
        ).fetchall()
        busy = bool(rows) or bool(self.conn.execute(  # held jobs alone need no controller: release pokes one
            "SELECT 1 FROM jobs WHERE state='PENDING' AND held=0 LIMIT 1").fetchone())
        now = time.time()
        changed = False
        for job in map(dict, rows):
            if procs.alive(job["supervisor_pid"], job["supervisor_ctime"]):
                continue
            if job["state"] == "RUNNING" and job["kind"] == "batch" and not job["supervisor_pid"]:
                # scheduled, but no supervisor claimed it (yet): a controller died between the two?
                since = max(job["start_time"] or now, self.started_at if job["start_time"] else now)
                if now - since >= LAUNCH_GRACE_S:
                    changed |= self._requeue_unlaunched(job, now)
                continue
            self._fail(job, now)
            changed = True
        return busy, changed

    def _forget_environments(self, now: float) -> None:
        """Drop the stored environment (tokens, keys: the submitter's whole ``env``) of every job
        that ended since the last look; nothing reads it after the end. ``env_dropped_until`` in
        the meta table keeps each look to the jobs that ended since the one before (end_time is
        indexed), so the cost does not grow with history."""
        since = float(db.get_meta(self.conn, "env_dropped_until", "0") or 0)
        until = now - ENV_KEPT_AFTER_END_S  # an end whose transaction waited for the lock is still seen
        if until <= since:
            return
        with db.transaction(self.conn):
            self.conn.execute("UPDATE jobs SET req=json_remove(req, '$.env') WHERE end_time > ? AND end_time <= ?",
                              (since, until))
            db.set_meta(self.conn, "env_dropped_until", repr(until))

    def _requeue_unlaunched(self, job: dict, now: float) -> bool:
        with db.transaction(self.conn):
            done = transitions.unlaunched(self.conn, job["id"], supervisor_pid=None)
        if done:
            log(f"controller: job {job['id']} was scheduled but never launched; back to PENDING")
        return bool(done)

    def _fail(self, job: dict, now: float) -> None:
        leftovers = procs.job_processes(job["id"], str(paths.state_dir()))
        procs.send(leftovers, signal.SIGKILL)
        if job["kind"] == "batch" and job["batch_pid"] is None:
            # the supervisor died before it claimed the launch: nothing of the job ran
            with db.transaction(self.conn):
                transitions.unlaunched(self.conn, job["id"], job["supervisor_pid"])
            return
        state = "NODE_FAIL" if job["kind"] == "batch" else "CANCELLED"
        with db.transaction(self.conn):
            done = transitions.lost(self.conn, job["id"], now, state, "NodeDown" if state == "NODE_FAIL" else "None",
                                    was=job["state"], supervisor_pid=job["supervisor_pid"])
        if done and state == "NODE_FAIL":
            log(f"controller: job {job['id']}: its supervisor (pid {job['supervisor_pid']}) died "
                f"({self._how_it_ended(job['supervisor_pid'])}); NODE_FAIL"
                + (f", killed {len(leftovers)} leftover process(es)" if leftovers else ""))

    def _how_it_ended(self, pid: int | None) -> str:
        self._reap()
        status = self.exits.pop(pid, None) if pid else None
        if status is None:
            return "not reaped here: gone without a failing exit status, or started by an earlier controller"
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}: {signal.strsignal(os.WTERMSIG(status))}"
        return f"exit status {os.WEXITSTATUS(status)}; its traceback, if any, is above"


def _own_limits() -> None:
    """Run with the machine's limits, not those of the shell that happened to start us (a job's
    `ulimit -f`, say, must not stop the controller writing its state)."""
    for res in (resource.RLIMIT_FSIZE, resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_DATA):
        try:
            soft, hard = resource.getrlimit(res)
            if soft != hard:
                resource.setrlimit(res, (hard, hard))
        except (ValueError, OSError):
            pass


def main() -> int:
    global _LOCK_FD
    _own_limits()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full file is an error to report, not a crash
    fd = os.open(paths.lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    give_up = time.time() + LOCK_WAIT_S  # a controller that is just leaving releases it in moments
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.time() >= give_up:
                os.close(fd)
                return 0  # another controller runs
            time.sleep(0.05)
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    _LOCK_FD = fd
    paths.never_create()  # removed while we start up (the lock is taken): leave, do not start a new state
    from . import apart, envvars, supervisor  # noqa: F401 - imported once here, not again in every forked supervisor

    envvars.local_commands_folder()  # found once here, not again in every forked supervisor
    procs.libc_prctl()  # likewise (ctypes)
    apart.mode()  # likewise: whether the nodes are apart, probed once per state folder

    try:
        Controller().run()
    except (db.StateError, FileNotFoundError) as err:
        log(f"controller: cannot start: {err}")
        return 1
    finally:
        try:
            os.unlink(paths.socket_path())
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
