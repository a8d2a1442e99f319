"""Reliability under load: many concurrent submissions and a big throttled array lose nothing.

8 submitter processes x 100 ``sbatch`` each run while squeue/sacct are polled; every job gets a
unique id (increasing within each submitter), every job runs exactly once and completes, every
output file is complete, and the queue views stay parseable and consistent throughout.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from reliability_helpers import FINAL, Slurm, slurm  # noqa: F401  (fixture)

WORKERS, PER_WORKER = 8, 100
ARRAY_TASKS, THROTTLE = 500, 3

# One submitter process: PER_WORKER sbatch calls in a row; prints "rc id" per call.
SUBMITTER = r"""
import subprocess, sys
out, count, worker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for k in range(count):
    tag = f"w{worker}-{k}"
    done = subprocess.run(
        ["sbatch", "--parsable", "-J", tag, "-o", f"{out}/%j.out",
         "--wrap", f"echo begin {tag}; echo job $SLURM_JOB_ID name $SLURM_JOB_NAME; echo end {tag}"],
        capture_output=True, text=True)
    print(done.returncode, done.stdout.strip() or "-", tag, done.stderr.strip().replace("\n", " | "), flush=True)
"""

STATES = FINAL | {"PENDING", "RUNNING", "COMPLETING"}
POLL_S = 1.5  # squeue + sacct over hundreds of jobs: often enough to catch an inconsistency, cheap enough


def fast_env(slurm: Slurm, tmp: Path) -> dict[str, str]:
    """Cache the commands' bytecode in a private folder: 800 Python start-ups, compiled once."""
    env = dict(slurm.env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


class Watcher(threading.Thread):
    """Polls squeue and sacct while the load runs; records every inconsistency it sees."""

    def __init__(self, slurm: Slurm, env: dict[str, str], limit: int, array_throttle: int | None = None) -> None:
        super().__init__(daemon=True)
        self.slurm, self.env, self.limit, self.array_throttle = slurm, env, limit, array_throttle
        self.stop = threading.Event()
        self.problems: list[str] = []
        self.polls = 0
        self.last: dict[str, str] = {}
        self.max_running_tasks = 0

    def run(self) -> None:
        seen_total = 0
        while not self.stop.is_set():
            queue = self.slurm.run("squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", env=self.env)
            acct = self.slurm.run("sacct", "-X", "-n", "-P", "-o", "JobID,State", "-S", "2000-01-01", env=self.env)
            self.polls += 1
            if queue.returncode or acct.returncode:
                self.problems.append(f"squeue rc={queue.returncode} {queue.stderr!r}; sacct rc={acct.returncode} {acct.stderr!r}")
                continue
            queued = self._parse("squeue", queue.stdout)
            accounted = self._parse("sacct", acct.stdout)
            if not set(queued) <= set(accounted):
                self.problems.append(f"squeue shows jobs sacct (run after it) does not: {sorted(set(queued) - set(accounted))[:5]}")
            if len(accounted) < seen_total or len(accounted) > self.limit:
                self.problems.append(f"sacct counted {len(accounted)} jobs after {seen_total} (at most {self.limit})")
            seen_total = max(seen_total, len(accounted))
            for job, state in accounted.items():
                before = self.last.get(job)
                if before in FINAL and state != before or before == "RUNNING" and state == "PENDING":
                    self.problems.append(f"job {job} went from {before} to {state}")
                self.last[job] = state
            running = sum(1 for s in queued.values() if s == "RUNNING")
            self.max_running_tasks = max(self.max_running_tasks, running)
            self.stop.wait(POLL_S)

    def _parse(self, what: str, text: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for line in text.splitlines():
            field, sep, state = line.partition("|")
            state = state.split(" ")[0]
            jobs = expand_array_id(field)
            if not sep or not jobs or state not in STATES:
                self.problems.append(f"{what}: unparseable line {line!r}")
                continue
            for job in jobs:
                if job in found:
                    self.problems.append(f"{what}: job {job} listed twice")
                found[job] = state
        return found


def expand_array_id(field: str) -> list[str]:
    """``12``, ``12_3`` or Slurm's grouped pending tasks ``12_[4-9,11%3]`` as single ids; [] if none."""
    if re.fullmatch(r"\d+(_\d+)?", field):
        return [field]
    grouped = re.fullmatch(r"(\d+)_\[([\d,-]+)(?:%\d+)?\]", field)
    if not grouped:
        return []
    job, ranges = grouped.groups()
    tasks = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        tasks += range(int(first), int(last or first) + 1)
    return [f"{job}_{task}" for task in tasks]


def test_800_concurrent_submissions_all_run_once_and_complete(slurm: Slurm, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = fast_env(slurm, tmp_path)
    slurm.run("sinfo", env=env)  # first use: state file and bytecode cache made once, not by 8 at a time
    watcher = Watcher(slurm, env, WORKERS * PER_WORKER)
    watcher.start()
    started = time.time()
    workers = [
        subprocess.Popen([sys.executable, "-c", SUBMITTER, str(out), str(PER_WORKER), str(w)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(WORKERS)
    ]
    results = [w.communicate(timeout=300) for w in workers]
    submitted = time.time() - started
    ids_by_worker: list[list[int]] = []
    tags: dict[int, str] = {}
    failures = []
    for stdout, stderr in results:
        ids = []
        for line in stdout.splitlines():
            rc, job, tag, *err = line.split(" ", 3)
            if rc != "0" or not job.isdigit():
                failures.append(line)
                continue
            ids.append(int(job))
            tags[int(job)] = tag
        ids_by_worker.append(ids)
        assert not stderr.strip(), stderr
    assert not failures, failures[:5]
    everything = [i for ids in ids_by_worker for i in ids]
    assert len(everything) == WORKERS * PER_WORKER == len(set(everything)), "duplicate or missing job ids"
    assert sorted(everything) == list(range(1, WORKERS * PER_WORKER + 1)), "ids are not 1..800 without gaps"
    for ids in ids_by_worker:
        assert ids == sorted(ids), "ids must increase in the order each submitter got them"

    states = slurm.wait_final(everything, timeout=240, poll=0.5)
    watcher.stop.set()
    watcher.join(timeout=30)
    finished = time.time() - started
    bad = [j for j, state in states.items() if state != "COMPLETED"]
    assert not bad, (slurm.db_rows(f"SELECT id, state, reason, exit_code, exit_signal, batch_pid FROM jobs "
                                   f"WHERE id IN ({','.join(map(str, bad[:20]))})"), slurm.log()[-3000:])
    files = sorted(out.iterdir())
    assert len(files) == len(everything)
    for job in everything:
        tag = tags[job]
        text = (out / f"{job}.out").read_text()
        assert text == f"begin {tag}\njob {job} name {tag}\nend {tag}\n", (job, text)
    assert not watcher.problems, watcher.problems[:10]
    assert watcher.polls >= 3
    print(f"\n800 jobs: submitted in {submitted:.1f} s, all finished after {finished:.1f} s, "
          f"{watcher.polls} squeue+sacct polls consistent")


def test_500_task_array_with_throttle(slurm: Slurm, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = fast_env(slurm, tmp_path)
    watcher = Watcher(slurm, env, ARRAY_TASKS)
    watcher.start()
    started = time.time()
    script = tmp_path / "task.sh"  # bash's clock: no process forked per timestamp
    script.write_text("#!/bin/bash\necho start $EPOCHREALTIME\necho task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID\n"
                      "echo stop $EPOCHREALTIME\n")
    done = slurm.run("sbatch", "--parsable", f"--array=1-{ARRAY_TASKS}%{THROTTLE}", "-o", f"{out}/%A_%a.out",
                     str(script), env=env)
    assert done.returncode == 0, done.stderr
    array = int(done.stdout.strip())
    ids = [i for i, in slurm.db_rows("SELECT id FROM jobs WHERE array_job_id=?", (array,))]
    assert len(ids) == ARRAY_TASKS
    states = slurm.wait_final(ids, timeout=240, poll=0.5)
    watcher.stop.set()
    watcher.join(timeout=30)
    finished = time.time() - started
    assert set(states.values()) == {"COMPLETED"}
    intervals = []
    for task in range(1, ARRAY_TASKS + 1):
        lines = (out / f"{array}_{task}.out").read_text().splitlines()
        assert len(lines) == 3 and lines[1] == f"task {task} of {array}", lines
        intervals.append((float(lines[0].split()[1]), float(lines[2].split()[1])))
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= THROTTLE, f"{peak} tasks ran at once; the throttle is {THROTTLE}"
    assert watcher.max_running_tasks <= THROTTLE
    assert not watcher.problems, watcher.problems[:10]
    print(f"\n{ARRAY_TASKS}-task array %{THROTTLE}: finished in {finished:.1f} s, at most {peak} at once")
