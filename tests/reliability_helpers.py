"""Shared pieces of the reliability suite (tests/test_reliability_*.py): a private local Slurm per
test, process inspection, and waiting for jobs.

Every reliability test runs against its own state directory (``private_slurm``), so killing its
controller, filling its queue or corrupting its state file never disturbs the session's local
Slurm that the other tests use.
"""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"}


@dataclass
class Slurm:
    """A private local Slurm: its state directory and helpers to drive and inspect it."""

    state: Path
    env: dict[str, str]

    # -- commands ------------------------------------------------------------------------
    def run(self, *args: str, cwd: Path | str | None = None, input: str | bytes | None = None,
            timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run a command (argument list, never a shell) with this Slurm's environment."""
        text = not isinstance(input, bytes)
        return subprocess.run(list(args), cwd=cwd, input=input, capture_output=True, text=text,
                              timeout=timeout, env=env or self.env,
                              stdin=subprocess.DEVNULL if input is None else None)

    def submit(self, *args: str, cwd: Path | str | None = None) -> int:
        done = self.run("sbatch", "--parsable", *args, cwd=cwd)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().split(";")[0])

    def admin(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(sys.executable, "-m", "hpcnb.cli", "slurm", *args)

    # -- state ---------------------------------------------------------------------------
    def db_rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Read the state file directly (read-only, closed at once)."""
        conn = sqlite3.connect(f"file:{self.state / 'slurm.db'}?mode=ro", uri=True, timeout=30)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def next_job_id(self) -> int:
        rows = self.db_rows("SELECT value FROM meta WHERE key='next_job_id'")
        return int(rows[0][0]) if rows else 1

    def job_count(self) -> int:
        return self.db_rows("SELECT COUNT(*) FROM jobs")[0][0]

    def states(self, ids: list[int] | None = None) -> dict[str, str]:
        """Job id text (``12`` or ``12_3``) -> state, from sacct (base states: no ``by <uid>``)."""
        args = ["sacct", "-X", "-n", "-P", "-o", "JobID,State"]
        if ids:
            args += ["-j", ",".join(map(str, ids))]
        else:
            args += ["-S", "2000-01-01"]
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        found = {}
        for line in done.stdout.splitlines():
            job, _, state = line.partition("|")
            found[job] = state.split()[0]
        return found

    def db_states(self) -> dict[int, str]:
        return dict(self.db_rows("SELECT id, state FROM jobs"))

    def wait_final(self, ids: list[int], timeout: float = 60, poll: float = 0.2) -> dict[int, str]:
        """Wait until every job (db ids) is in a final state; returns id -> state."""
        end = time.time() + timeout
        wanted = set(ids)
        while True:
            states = {i: s for i, s in self.db_states().items() if i in wanted}
            if len(states) == len(wanted) and all(s in FINAL for s in states.values()):
                return states
            if time.time() > end:
                stuck = {i: s for i, s in states.items() if s not in FINAL}
                raise AssertionError(f"jobs not finished after {timeout} s: {dict(list(stuck.items())[:10])} "
                                     f"(missing: {sorted(wanted - set(states))[:10]}); "
                                     f"log: {self.log()[-2000:]}")
            time.sleep(poll)

    def wait_state(self, job_id: int, wanted: set[str], timeout: float = 30) -> str:
        end = time.time() + timeout
        while time.time() < end:
            rows = self.db_rows("SELECT state FROM jobs WHERE id=?", (job_id,))
            if rows and rows[0][0] in wanted:
                return rows[0][0]
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} is {rows[0][0] if rows else 'unknown'}, wanted {wanted}")

    def log(self) -> str:
        try:
            return (self.state / "controller.log").read_text(errors="replace")
        except OSError:
            return ""

    # -- processes -----------------------------------------------------------------------
    def controller_pid(self) -> int | None:
        for proc in self.processes():
            try:
                if "hpcnb.localslurm.controller" in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                    if proc.ppid() == 1 or "controller" not in " ".join(proc.parent().cmdline()):
                        return proc.pid
            except psutil.Error:
                continue
        return None

    def wait_controller(self, timeout: float = 15) -> int:
        end = time.time() + timeout
        while time.time() < end:
            pid = self.db_lock_holder()
            if pid:
                return pid
            time.sleep(0.05)
        raise AssertionError("no controller came up")

    def start_controller_first(self, timeout: float = 15) -> int:
        """Start a controller before any job exists and wait until it listens: its state file is
        then open, so no command is the last to close it (which would checkpoint the journal)."""
        started = self.run(sys.executable, "-c", "from hpcnb.localslurm import wake; wake.start_controller()")
        assert started.returncode == 0, started.stderr
        pid = self.wait_controller(timeout)
        end = time.time() + timeout
        while not (self.state / "controller.sock").exists():
            assert time.time() < end, "the controller never listened"
            time.sleep(0.05)
        return pid

    def db_lock_holder(self) -> int | None:
        """The pid written in the controller's lock file, if that process holds the lock."""
        import fcntl

        lock = self.state / "controller.lock"
        try:
            fd = os.open(lock, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None  # nobody holds it
        except BlockingIOError:
            text = lock.read_text().strip()
            return int(text) if text.isdigit() else None
        finally:
            os.close(fd)

    def processes(self) -> list[psutil.Process]:
        """Every live process that belongs to this Slurm: controller, supervisors, job processes."""
        found = []
        marker = str(self.state)
        for proc in psutil.process_iter():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
                    continue
                env = proc.environ()
            except (psutil.Error, OSError):
                continue
            if env.get("HPCNB_STATE_DIR") == marker or env.get("SLURM_CONF", "").startswith(marker):
                found.append(proc)
        return found

    def network_pids(self) -> set[int]:
        """The processes of the nodes' own network (the default), its gateway included: daemons, as
        the controller."""
        daemons = ("hpcnb.localslurm.network", "hpcnb.localslurm.gateway")
        return {p.pid for p in self.processes() if any(d in " ".join(_cmdline(p)) for d in daemons)}

    def job_processes(self, job_id: int) -> list[psutil.Process]:
        return [p for p in self.processes() if _env(p).get("SLURM_JOB_ID") == str(job_id)]

    def supervisor_pid(self, job_id: int) -> int | None:
        rows = self.db_rows("SELECT supervisor_pid FROM jobs WHERE id=?", (job_id,))
        return rows[0][0] if rows else None

    def stop_everything(self) -> None:
        """Teardown: forget all state and kill whatever is left (controller included), in rounds: a
        process forked while a round ran (the network holder a dying controller was starting, in its
        own session) or caught mid-exec (its environment unreadable) is found by the next one."""
        self.admin("reset")
        for _ in range(3):
            left = self.processes()
            if not left:
                return
            for proc in left:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            wait_gone([p.pid for p in left], 2)  # a child forked meanwhile exists by the time they are gone


def _env(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def make_env(state: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["HPCNB_STATE_DIR"] = str(state)
    env["HPCNB_FIRST_JOB_ID"] = "1"  # the id checks below count from 1; these jobs open no ports
    env.update(extra)
    return env


def wait_gone(pids: list[int], timeout: float = 10) -> list[int]:
    """Wait for these processes to disappear (zombies count as gone); returns those still alive."""
    end = time.time() + timeout
    alive = list(pids)
    while alive and time.time() < end:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    return alive


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill9(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------------------- fixtures

import pytest  # noqa: E402


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.Error, OSError):
        return []


@pytest.fixture
def slurm(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Slurm:
    """A private local Slurm for one test; everything it started is gone afterwards."""
    base = tmp_path_factory.mktemp("rel")
    state = base / "state"
    env = make_env(state)
    monkeypatch.setenv("HPCNB_STATE_DIR", str(state))
    monkeypatch.chdir(base)
    instance = Slurm(state, env)
    yield instance
    instance.stop_everything()
    left = {p.pid: " ".join(_cmdline(p)) for p in instance.processes()}
    assert not wait_gone(list(left), 5), f"processes left behind: {left}"
