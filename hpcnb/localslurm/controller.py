"""The local Slurm's controller (slurmctld): a background daemon started on first use.

It schedules pending jobs, forks a supervisor per batch job, notices dead supervisors and
owners (NODE_FAIL / released allocations), and exits after a quiet spell. Commands wake it
with a datagram on its socket; if it is not running they start it.
"""
from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import subprocess
import sys
import time

from . import db, paths, procs, scheduler
from .cluster import load_cluster

_LOCK_FD: int | None = None  # the controller's lock; forked supervisors must not hold it
IDLE_EXIT_S = float(os.environ.get("HPCNB_CONTROLLER_IDLE", "600"))
CHECK_EVERY_S = 1.0


def poke(start: bool = True) -> None:
    """Wake the controller; start it if it is not running (and ``start``)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.sendto(b"w", str(paths.socket_path()))
        return
    except (FileNotFoundError, ConnectionRefusedError):
        pass
    except BlockingIOError:
        return  # its queue is full of wake-ups already
    finally:
        sock.close()
    if start:
        start_controller()


def start_controller() -> None:
    log = open(paths.log_path(), "a")
    subprocess.Popen(
        [sys.executable, "-m", "hpcnb.localslurm.controller"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
        env={**os.environ, "HPCNB_STATE_DIR": str(paths.state_dir())},
    )
    log.close()


def running_pid() -> int | None:
    """The controller's pid, if one runs."""
    try:
        with open(paths.lock_path()) as fh:
            pid = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return None
    return pid if procs.alive(pid, None) else None


class Controller:
    def __init__(self) -> None:
        self.conn = db.connect()
        profile = db.get_meta(self.conn, "profile")
        if profile is None:
            profile = os.environ.get("HPCNB_PROFILE", "local")
            with db.transaction(self.conn):
                db.set_meta(self.conn, "profile", profile)
        self.cluster = load_cluster(profile)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path = str(paths.socket_path())
        if os.path.exists(path):
            os.unlink(path)
        old = os.umask(0o077)
        self.sock.bind(path)
        os.umask(old)
        self.sock.setblocking(False)
        self.last_busy = time.time()

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        signal.signal(signal.SIGCHLD, lambda *_: None)
        next_check = 0.0
        while True:
            self._reap()
            started = self._schedule()
            for job in started:
                if job["kind"] == "batch":
                    self._launch(job["id"])
            now = time.time()
            if now >= next_check:
                next_check = now + CHECK_EVERY_S
                busy = self._check_liveness()
                if busy:
                    self.last_busy = now
                elif now - self.last_busy > IDLE_EXIT_S:
                    return
            try:
                ready, _, _ = select.select([self.sock], [], [], max(0.0, next_check - time.time()))
            except InterruptedError:
                ready = []
            if ready:
                self._drain()

    def _drain(self) -> None:
        while True:
            try:
                self.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def _schedule(self) -> list[dict]:
        with db.transaction(self.conn):
            return scheduler.schedule(self.conn, self.cluster)

    def _launch(self, job_id: int) -> None:
        pid = os.fork()
        if pid == 0:
            self.sock.close()
            if _LOCK_FD is not None:
                os.close(_LOCK_FD)
            from .supervisor import run_batch

            run_batch(job_id)

    def _check_liveness(self) -> bool:
        """Fail jobs whose supervisor died (NODE_FAIL); release allocations whose owner died."""
        active = db.jobs_where(self.conn, "state IN ('RUNNING','PENDING')")
        now = time.time()
        for job in active:
            if job["state"] == "PENDING" and job["kind"] == "batch":
                continue
            if procs.alive(job["supervisor_pid"], job["supervisor_ctime"]):
                continue
            if job["state"] == "RUNNING" and job["kind"] == "batch" and not job["supervisor_pid"]:
                if now - (job["start_time"] or now) < 10:
                    continue
            self._fail(job, now)
        return bool(active)

    def _fail(self, job: dict, now: float) -> None:
        leftovers = procs.job_processes(job["id"], str(paths.state_dir()))
        procs.send(leftovers, signal.SIGKILL)
        state = "NODE_FAIL" if job["kind"] == "batch" else "CANCELLED"
        with db.transaction(self.conn):
            self.conn.execute(
                "UPDATE jobs SET state=?, reason=?, end_time=?, control=NULL WHERE id=? AND state=?",
                (state, "NodeDown" if state == "NODE_FAIL" else "None", now, job["id"], job["state"]),
            )
            self.conn.execute(
                "UPDATE steps SET state=?, end_time=? WHERE job_id=? AND state='RUNNING'", (state, now, job["id"])
            )


def main() -> int:
    global _LOCK_FD
    lock = open(paths.lock_path(), "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another controller runs
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    _LOCK_FD = lock.fileno()
    try:
        Controller().run()
    finally:
        try:
            os.unlink(paths.socket_path())
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
