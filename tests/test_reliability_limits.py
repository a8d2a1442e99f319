"""Reliability at the limits: time and memory overruns, cancelled process trees, stubborn tasks.

Slurm's rules (22.05): at the time limit every process of the job gets SIGTERM (after SIGCONT),
then SIGKILL once KillWait (2 s in the local profile) has passed, and the job ends TIMEOUT; a job
over its memory ends OUT_OF_MEMORY; scancel does the same as the time limit and ends CANCELLED.
Whatever the job started (children, double-forked daemons in their own session) is gone afterwards.
"""
from __future__ import annotations

import time
from pathlib import Path

import psutil

from reliability_helpers import Slurm, slurm, wait_gone  # noqa: F401  (fixture)

KILL_WAIT = 2  # the local profile's KillWait

STUBBORN = """#!/bin/bash
trap 'echo got TERM at $(date +%s.%N)' TERM
echo started at $(date +%s.%N)
while true; do sleep 0.1; done
"""

TREE = """#!/bin/bash
for i in $(seq 20); do sleep 300 & done
( sleep 301 & ) &
setsid sleep 302 &
nohup sleep 303 >/dev/null 2>&1 &
python3 -c 'import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 3); time.sleep(304)
    os._exit(0)
'
python3 -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(305)' &
echo ready
wait
"""


def _processes(slurm: Slurm, job: int, at_least: int, timeout: float = 20) -> list[psutil.Process]:
    end = time.time() + timeout
    while time.time() < end:
        found = slurm.job_processes(job)
        if len(found) >= at_least:
            return found
        time.sleep(0.1)
    raise AssertionError(f"job {job}: only {len(slurm.job_processes(job))} processes")


def _elapsed(slurm: Slurm, job: int) -> float:
    (start, end), = slurm.db_rows("SELECT start_time, end_time FROM jobs WHERE id=?", (job,))
    return end - start


def test_time_limit_sigterm_then_sigkill_after_killwait(slurm: Slurm, tmp_path: Path) -> None:
    (tmp_path / "stubborn.sh").write_text(STUBBORN)
    job = slurm.submit("--time=0:02", "-o", f"{tmp_path}/%j.out", str(tmp_path / "stubborn.sh"))
    slurm.wait_state(job, {"RUNNING"})
    procs = _processes(slurm, job, 1)
    assert slurm.wait_final([job], timeout=30) == {job: "TIMEOUT"}
    out = (tmp_path / f"{job}.out").read_text()
    started = float(out.split("started at ")[1].split()[0])
    termed = float(out.split("got TERM at ")[1].split()[0])
    # SIGTERM at the 2 s limit, not before it and not long after
    assert termed - started >= 1.5, out
    assert termed - started <= 4, out
    assert f"CANCELLED AT" in out and "DUE TO TIME LIMIT" in out
    assert 2 + KILL_WAIT - 0.5 <= _elapsed(slurm, job) <= 2 + KILL_WAIT + 3  # SIGKILL after KillWait
    assert not wait_gone([p.pid for p in procs], 5)
    assert slurm.job_processes(job) == []
    rows = slurm.run("sacct", "-j", str(job), "-n", "-P", "-o", "JobID,State").stdout.split()
    assert rows == [f"{job}|TIMEOUT", f"{job}.batch|CANCELLED"]


def test_memory_overrun_is_out_of_memory(slurm: Slurm, tmp_path: Path) -> None:
    job = slurm.submit("--mem=50M", "-o", f"{tmp_path}/%j.out", "--wrap",
                       "python3 -c \"import time; x = b'y' * (300 << 20); time.sleep(60)\"; echo survived")
    assert slurm.wait_final([job], timeout=40) == {job: "OUT_OF_MEMORY"}
    out = (tmp_path / f"{job}.out").read_text()
    assert "exceeded memory limit" in out and "oom-kill" in out and "survived" not in out
    assert _elapsed(slurm, job) < 20
    assert slurm.job_processes(job) == []
    assert slurm.run("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "State").stdout.strip() == "OUT_OF_MEMORY"


def test_a_vfork_child_is_its_parents_memory_counted_once() -> None:
    """Between vfork and exec a child shares its parent's address space: the same RSS, read twice.
    Summed, a 317 MB PyTorch process running ``subprocess.run(["scontrol", ...])`` looked like 634 MB
    and was killed at --mem=500M (seen in CI under load). An exec'd child counts on its own."""
    from collections import namedtuple

    from hpcnb.localslurm.procs import rss_by_step_node

    mem = namedtuple("mem", "rss vms")

    class Proc:
        def __init__(self, pid: int, parent: int, rss: int, vms: int, **env: str) -> None:
            self.pid, self.parent, self.mem, self.env = pid, parent, mem(rss, vms), env

        def ppid(self) -> int:
            return self.parent

        def memory_info(self):
            return self.mem

        def environ(self) -> dict[str, str]:
            return self.env

    torch_run = Proc(10, 1, 317 << 20, 2 << 30)
    in_vfork = Proc(11, 10, 317 << 20, 2 << 30)     # before exec: the parent's memory itself
    scontrol = Proc(12, 10, 30 << 20, 300 << 20)    # after exec: its own
    task = Proc(13, 1, 317 << 20, 2 << 30, SLURM_STEP_ID="0", SLURMD_NODENAME="node2")  # not a child
    usage = rss_by_step_node([torch_run, in_vfork, scontrol, task], "node1")
    assert usage == {("batch", "node1"): (317 + 30) << 20, ("0", "node2"): 317 << 20}


def test_cancelled_job_with_children_and_daemons_leaves_nothing(slurm: Slurm, tmp_path: Path) -> None:
    (tmp_path / "tree.sh").write_text(TREE)
    job = slurm.submit("-o", f"{tmp_path}/%j.out", str(tmp_path / "tree.sh"))
    slurm.wait_state(job, {"RUNNING"})
    procs = _processes(slurm, job, 26)
    sessions = {p.pid: p.pid == _sid(p) for p in procs}
    assert sum(sessions.values()) >= 2, "some processes should lead their own session (setsid daemons)"
    started = time.time()
    assert slurm.run("scancel", str(job)).returncode == 0
    assert slurm.wait_final([job], timeout=20) == {job: "CANCELLED"}
    left = wait_gone([p.pid for p in procs], 5)
    assert not left, [psutil.Process(p).cmdline() for p in left if psutil.pid_exists(p)]
    assert slurm.job_processes(job) == []
    assert time.time() - started <= KILL_WAIT + 5  # the SIGTERM-ignoring one needed the SIGKILL
    assert slurm.run("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "State").stdout.strip().startswith("CANCELLED")


def test_a_process_named_like_the_controller_does_not_outlive_scancel(slurm: Slurm, tmp_path: Path) -> None:
    """Issue 40 item 3: a job's process is the job's whatever it calls itself; the local Slurm's
    daemons are known by who they are (the controller's lock names it; a supervisor is its child)."""
    job = slurm.submit("-o", f"{tmp_path}/%j.out", "--wrap",
                       "bash -c '(exec -a hpcnb.localslurm.controller sleep 1004) & echo ready; wait'")
    slurm.wait_state(job, {"RUNNING"})
    procs = _processes(slurm, job, 2)
    named = [p.pid for p in procs if "hpcnb.localslurm.controller" in p.cmdline()]
    assert named, [p.cmdline() for p in procs]
    assert slurm.run("scancel", str(job)).returncode == 0
    assert slurm.wait_final([job], timeout=20) == {job: "CANCELLED"}
    assert not wait_gone(named, 10), "a process that calls itself the controller outlived scancel"
    assert slurm.job_processes(job) == []


def test_task_ignoring_sigterm_is_killed_after_killwait(slurm: Slurm, tmp_path: Path) -> None:
    job = slurm.submit("-o", f"{tmp_path}/%j.out", "--wrap",
                       "trap '' TERM; echo ready; while true; do sleep 0.1; done")
    slurm.wait_state(job, {"RUNNING"})
    procs = _processes(slurm, job, 1)
    time.sleep(0.3)
    sent = time.time()
    assert slurm.run("scancel", str(job)).returncode == 0
    assert slurm.wait_final([job], timeout=20) == {job: "CANCELLED"}
    took = time.time() - sent
    assert KILL_WAIT - 0.5 <= took <= KILL_WAIT + 4, took
    assert not wait_gone([p.pid for p in procs], 5)
    assert slurm.job_processes(job) == []


def test_daemons_left_by_a_finished_job_are_killed(slurm: Slurm, tmp_path: Path) -> None:
    job = slurm.submit("-o", f"{tmp_path}/%j.out", "--wrap",
                       "setsid sleep 300 & nohup sleep 301 >/dev/null 2>&1 & (sleep 302 &) ; echo bye")
    assert slurm.wait_final([job]) == {job: "COMPLETED"}
    assert (tmp_path / f"{job}.out").read_text() == "bye\n"
    end = time.time() + 5
    while slurm.job_processes(job) and time.time() < end:
        time.sleep(0.1)
    assert slurm.job_processes(job) == []


def _sid(proc: psutil.Process) -> int:
    import os

    try:
        return os.getsid(proc.pid)
    except OSError:
        return -1
