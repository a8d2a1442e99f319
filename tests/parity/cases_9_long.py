"""The slow cases: TIMEOUT, a time limit lowered while the job runs, --signal=B:USR1@N, and requeue
(SLURM_RESTART_COUNT in the rerun).

A real slurmctld checks time limits every 30 s, so a --time=1 job ends 60-90 s after it starts.
These two jobs are submitted on both sides when the session starts (conftest.long_jobs, calling
start_long_jobs below) and run on node2 while the other cases use node1 (and 2-node cases wait).
A real slurmctld holds a requeued job until its credential has expired (AuthInfo's cred_expire,
120 s by default, 30 s in CI's slurm.conf; releasing it sooner gets it killed as "non-startable"),
so the requeue case is started just
before the lesson jobs (conftest.requeue_case, calling start_requeue), whose 4-CPU jobs cannot
be placed differently because of its short rerun. Threads collect each job's results as soon as
it ends; the tests here, run last, compare them. Tests that show the whole cluster's state wait
for the first two to be over (LongJobs.wait_over).
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpcnb.slurm.show import parse_config

from .harness import Norm, Side, compare, intentional, on_both, settled_text


# exec: the batch step is the sleep itself. (With a shell running a step in between, what a real
# Slurm records depends on which process the signals reach first; cancelled steps are compared in
# cases_2_states.test_scancel_running_with_steps.)
TIMEOUT_SCRIPT = """#!/bin/bash
echo start
exec sleep 300
"""
SIGNAL_SCRIPT = """#!/bin/bash
trap 'echo "got USR1"; date +%s.%N > usr1.txt' USR1
date +%s.%N > start.txt
echo start
while true; do sleep 1; done
"""
REQUEUE_SCRIPT = """#!/bin/bash
echo "run ${SLURM_RESTART_COUNT-unset}" >> restarts.txt
echo "output of run ${SLURM_RESTART_COUNT-unset}"
[ -n "$SLURM_RESTART_COUNT" ] && exit 0
sleep 300
"""


@dataclass
class LongJobs:
    """One side's long jobs. A thread collects each job's results as soon as it ends: scontrol
    forgets a job 300 s after its end (MinJobAge), long before the tests here run."""

    side: Side
    jobs: dict[str, tuple[int, Path]] = field(default_factory=dict)
    started: float = 0.0
    requeue_seen: dict = field(default_factory=dict)
    results: dict[str, dict] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def watch(self, names: tuple[str, ...] = ("timeout", "signal")) -> None:
        def run() -> None:
            for name in names:
                try:
                    self.results[name] = collect(self, name)
                except Exception as err:  # noqa: BLE001 - reported by the tests
                    self.errors.append(f"{self.side.name} {name}: {err}")

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def wait_over(self, timeout: float = 240) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


def start_long_jobs(side: Side) -> LongJobs:
    """Submit the TIMEOUT and --signal jobs (node2); a thread collects them when they end."""
    long = LongJobs(side, started=time.time())
    for name, args, script in (
        ("timeout", ["--time=1", "-w", "node2"], TIMEOUT_SCRIPT),
        ("signal", ["--time=1", "--signal=B:USR1@50", "-w", "node2"], SIGNAL_SCRIPT),
    ):
        wd = side.workdir(f"long-{name}")
        long.jobs[name] = (side.sbatch(["-o", "out.txt", *args], wd, script), wd)
    long.watch()
    return long


def start_requeue(side: Side) -> LongJobs:
    """Run a job until it has started, requeue it, note what the queue says; a thread collects the rerun."""
    long = LongJobs(side, started=time.time())
    wd = side.workdir("long-requeue")
    job_id = side.sbatch(["-o", "out.txt", "-w", "node1"], wd, REQUEUE_SCRIPT)
    long.jobs["requeue"] = (job_id, wd)
    side.wait_state(job_id, wd, {"RUNNING"})
    _wait_for(wd / "restarts.txt", "run unset")
    requeue = side.run(["scontrol", "requeue", str(job_id)], wd)
    seen = ""
    end = time.time() + 30
    # until the controller has given the requeued job its reason (a real one says None for a moment)
    while time.time() < end and not (seen.startswith("PENDING") and not seen.endswith(" None")) \
            and "run 1" not in _text(wd / "restarts.txt"):
        seen = side.ok(["squeue", "-h", "-j", str(job_id), "-o", "%T %r"], wd).stdout.strip()
        time.sleep(0.05)
    info = side.scontrol_job(job_id, wd)
    eligible = info["EligibleTime"]
    delay = time.mktime(time.strptime(eligible, "%Y-%m-%dT%H:%M:%S")) - time.time() if eligible[:1].isdigit() else 0
    long.requeue_seen = {"scontrol requeue": (requeue.rc, requeue.stdout, requeue.stderr),
                         "right after the requeue": seen, "eligible in (s)": delay,
                         "credential lifetime (s)": credential_lifetime(side, wd)}
    long.watch(("requeue",))
    return long


def credential_lifetime(side: Side, wd: Path) -> int:
    """AuthInfo's cred_expire as `scontrol show config` gives it (120 s where it is not set)."""
    auth = parse_config(side.ok(["scontrol", "show", "config"], wd).stdout).get("AuthInfo", "")
    found = re.search(r"\bcred_expire=(\d+)", auth)
    return int(found.group(1)) if found else 120


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _wait_for(path: Path, text: str, timeout: float = 30) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never showed {text!r}")


def _rows(side: Side, norm: Norm, job_id: int, wd: Path) -> list[str]:
    res = side.ok(["sacct", "-P", "-n", "-j", str(job_id), "--format", "JobID,State,ExitCode"], wd)
    return [norm.job(line) for line in res.stdout.splitlines()]


def _scontrol(side: Side, job_id: int, wd: Path) -> dict[str, str]:
    info = side.scontrol_job(job_id, wd)
    return {k: info[k] for k in ("JobState", "Reason", "ExitCode", "Restarts", "TimeLimit")}


def _elapsed(side: Side, job_id: int, wd: Path) -> int:
    out = side.ok(["sacct", "-n", "-X", "-P", "-j", str(job_id), "--format", "ElapsedRaw"], wd).stdout.split()
    return int(out[0])


def collect(long: LongJobs, name: str) -> dict:
    job_id, wd = long.jobs[name]
    side = long.side
    if name == "requeue":  # until the rerun has ended (a real Slurm starts it about 2 minutes later)
        end = time.time() + 400
        while time.time() < end and "run 1" not in _text(wd / "restarts.txt"):
            time.sleep(0.5)
    side.wait_done(job_id, wd, timeout=200)
    norm = Norm(side, [wd], [job_id])
    # srun's and slurmstepd's messages reach the output in no fixed order: compared sorted
    out = {"sacct": _rows(side, norm, job_id, wd), "scontrol": _scontrol(side, job_id, wd),
           # bash says "Terminated" if its foreground child dies of the time limit's SIGTERM before it does
           # itself: a race on both Slurms, so that line is left out
           "output": sorted(line for line in norm.text(settled_text(wd / "out.txt") or "").splitlines()
                            if line != "Terminated"),
           "elapsed": _elapsed(side, job_id, wd)}
    if name == "signal" and (wd / "usr1.txt").exists():
        out["usr1 after (s)"] = float((wd / "usr1.txt").read_text()) - float((wd / "start.txt").read_text())
    if name == "requeue":
        out["restarts.txt"] = (wd / "restarts.txt").read_text()
        out.update(long.requeue_seen)
    return out


def _results(started: dict | None, names: tuple[str, ...]) -> dict[str, dict]:
    if started is None:
        pytest.skip("the long jobs were not started (select the cases_9_long tests with the rest)")
    for long in started.values():
        long.wait_over(480)
    errors = [e for long in started.values() for e in long.errors]
    assert not errors, "\n".join(errors)
    return {name: {side: long.results[name] for side, long in started.items()} for name in names}


@pytest.fixture
def results(long_jobs) -> dict[str, dict]:
    return _results(long_jobs, ("timeout", "signal"))


@pytest.fixture
def requeue_results(requeue_case) -> dict[str, dict]:
    return _results(requeue_case, ("requeue",))


@pytest.mark.slow
def test_timeout(results) -> None:
    loc, rea = results["timeout"]["local"], results["timeout"]["real"]
    errors = []
    for aspect in ("sacct", "scontrol", "output"):
        try:
            compare(f"long: --time=1 exceeded [{aspect}]", loc[aspect], rea[aspect])
        except AssertionError as err:
            errors.append(str(err))
    intentional("long: --time=1 exceeded [seconds until killed]", "timelimit_latency",
                60 <= loc["elapsed"] <= 75, 60 <= rea["elapsed"] <= 110, True, True)
    assert not errors, "\n\n".join(errors)


@pytest.mark.slow
def test_signal_before_time_limit(results) -> None:
    loc, rea = results["signal"]["local"], results["signal"]["real"]
    errors = []
    for aspect in ("sacct", "scontrol", "output"):
        try:
            compare(f"long: --signal=B:USR1@50 trapped [{aspect}]", loc[aspect], rea[aspect])
        except AssertionError as err:
            errors.append(str(err))
    assert "usr1 after (s)" in loc and "usr1 after (s)" in rea, "USR1 never reached a batch shell"
    intentional("long: --signal=B:USR1@50 [seconds after start]", "signal_latency",
                9 <= loc["usr1 after (s)"] <= 20, 0 <= rea["usr1 after (s)"] <= 50, True, True)
    assert not errors, "\n\n".join(errors)


@pytest.mark.slow
def test_requeue_restart_count(requeue_results) -> None:
    loc, rea = requeue_results["requeue"]["local"], requeue_results["requeue"]["real"]
    if rea["scontrol"]["TimeLimit"] == "365-00:00:00":  # the rerun was started by the real backfill
        intentional("long: scontrol requeue [TimeLimit of the rerun]", "backfill_year",
                    loc["scontrol"]["TimeLimit"], rea["scontrol"]["TimeLimit"], "UNLIMITED", "365-00:00:00")
        rea = dict(rea, scontrol=dict(rea["scontrol"], TimeLimit="UNLIMITED"))
    errors = []
    for aspect in ("scontrol requeue", "right after the requeue", "restarts.txt", "sacct", "scontrol", "output"):
        try:
            compare(f"long: scontrol requeue [{aspect}]", loc[aspect], rea[aspect])
        except AssertionError as err:
            errors.append(str(err))
    intentional("long: scontrol requeue [hold before the rerun]", "requeue_delay",
                loc["eligible in (s)"] <= 3,
                rea["eligible in (s)"] >= rea["credential lifetime (s)"] - 5, True, True)
    assert not errors, "\n\n".join(errors)


@pytest.mark.slow
def test_time_limit_lowered_while_running(sides, long_jobs) -> None:
    """A running --time=5 job lowered to TimeLimit=1 ends TIMEOUT at its new limit (node2, once the
    other long jobs there are over)."""
    for long in (long_jobs or {}).values():
        long.wait_over()

    def one(side: Side) -> dict:
        wd = side.workdir("long-lowered")
        job_id = side.sbatch(["-o", "out.txt", "--time=5", "-w", "node2"], wd, TIMEOUT_SCRIPT)
        side.wait_state(job_id, wd, {"RUNNING"})
        update = side.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=1"], wd)
        side.wait_done(job_id, wd, timeout=200)
        norm = Norm(side, [wd], [job_id])
        return {"update": (update.rc, update.stdout, update.stderr), "sacct": _rows(side, norm, job_id, wd),
                "scontrol": _scontrol(side, job_id, wd), "elapsed": _elapsed(side, job_id, wd)}

    got = on_both(sides, one)
    loc, rea = got["local"], got["real"]
    errors = []
    for aspect in ("update", "sacct", "scontrol"):
        try:
            compare(f"long: TimeLimit lowered from 5 to 1 [{aspect}]", loc[aspect], rea[aspect])
        except AssertionError as err:
            errors.append(str(err))
    intentional("long: TimeLimit lowered from 5 to 1 [seconds until killed]", "timelimit_latency",
                60 <= loc["elapsed"] <= 75, 60 <= rea["elapsed"] <= 110, True, True)
    assert not errors, "\n\n".join(errors)


def test_cluster_after_the_long_jobs(sides, long_jobs) -> None:
    """With every job over, both clusters look the same again (no leftovers, all nodes idle)."""
    if long_jobs:
        for long in long_jobs.values():
            long.wait_over()

    def one(side: Side) -> dict:
        wd = side.workdir("after-long")
        end = time.time() + 30
        while time.time() < end and side.ok(["squeue", "-h"], wd).stdout.strip():
            time.sleep(0.5)
        return {"squeue": side.ok(["squeue"], wd).stdout, "sinfo": side.ok(["sinfo"], wd).stdout}

    got = on_both(sides, one)
    compare("long: cluster idle afterwards [squeue]", got["local"]["squeue"], got["real"]["squeue"])
    compare("long: cluster idle afterwards [sinfo]", got["local"]["sinfo"], got["real"]["sinfo"])
