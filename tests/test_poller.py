"""hpcnb.poller: one poller per kernel, shared by every job, wait and widget.

The watcher's rules are checked with a fake ``ask`` (no Slurm); then, through the local Slurm's
commands, that the thread comes and goes with what is followed, and that three widgets and a wait
on a real Slurm's pacing stay polite: the commands are counted by wrappers on PATH.
"""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_widgets import WAIT, until

from hpcnb import poller
from hpcnb.backend import LOCAL_COMMANDS, local_bin_dir, which_slurm
from hpcnb.jobs import submit
from hpcnb.poller import Pacing, Watcher


class FakeSlurm:
    """An ``ask`` that records each poll's keys and answers ``state`` for every key."""

    def __init__(self) -> None:
        self.polls: list[tuple[float, frozenset]] = []
        self.state = "RUNNING"

    def __call__(self, keys: frozenset) -> dict:
        self.polls.append((time.monotonic(), keys))
        return {key: f"{key[1]} {self.state}" for key in keys if key[1] != "unknown"}


def poller_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == poller.THREAD_NAME and t.is_alive()]


# ------------------------------------------------------------------------- rules (no Slurm)

def test_one_poll_asks_about_everything_followed_and_reads_share_it() -> None:
    slurm = FakeSlurm()
    watcher = Watcher(slurm, pacing_of=lambda: Pacing(first=0.05, cap=0.05, gap=0.5))
    first, second = watcher.follow(("job", "1")), watcher.follow(("queue", "me"))
    try:
        assert first.next(WAIT).value == "1 RUNNING" and second.next(WAIT).value == "me RUNNING"
        assert slurm.polls[-1][1] == {("job", "1"), ("queue", "me")}  # one poll for both
        before = len(slurm.polls)
        assert watcher.read(("job", "1")) == "1 RUNNING"  # younger than the gap: the cache
        assert len(slurm.polls) == before
        assert watcher.read(("job", "2")) == "2 RUNNING"  # not known yet: a poll of all three
        assert slurm.polls[-1][1] == {("job", "1"), ("queue", "me"), ("job", "2")}
        with pytest.raises(LookupError, match="no answer"):
            watcher.read(("job", "unknown"))
        times = [t for t, _ in slurm.polls]
        assert min(b - a for a, b in zip(times, times[1:])) >= 0.5  # never closer than the gap
    finally:
        first.close()
        second.close()


def test_known_jobs_ride_along_on_every_poll_until_settled() -> None:
    slurm = FakeSlurm()
    watcher = Watcher(slurm, pacing_of=lambda: Pacing(first=0.05, cap=0.05, gap=0.0),
                      settled=lambda answer: answer.value.endswith("COMPLETED"))
    for job_id in "123":
        watcher.register(("job", job_id))
    assert watcher.read(("job", "1")) == "1 RUNNING"
    assert slurm.polls[-1][1] == {("job", "1"), ("job", "2"), ("job", "3")}  # three states: one poll
    slurm.state = "COMPLETED"
    assert watcher.read(("job", "2")) == "2 COMPLETED"
    assert watcher.read(("job", "4")) == "4 COMPLETED"
    assert slurm.polls[-1][1] == {("job", "4")}  # the ended ones are no longer asked about


def test_back_off_while_nothing_changes_and_a_change_brings_it_back() -> None:
    slurm = FakeSlurm()
    watcher = Watcher(slurm, pacing_of=lambda: Pacing(first=0.02, cap=0.16, gap=0.0, growth=2.0))
    with watcher.follow(("job", "1")) as updates:
        time.sleep(1.0)
        quiet = len(slurm.polls)
        # at 0, .02, .06, .14, .30, .46, .62, .78, .94 s: 9 polls (a fixed 0.02 s would make 50)
        assert 4 <= quiet <= 10, [round(t - slurm.polls[0][0], 2) for t, _ in slurm.polls]
        slurm.state = "COMPLETED"
        until(lambda: updates.next(WAIT).value == "1 COMPLETED", what="the change")
        gaps = [b - a for (a, _), (b, _) in zip(slurm.polls, slurm.polls[1:])]
        assert max(gaps) >= 0.15  # it had backed off to the cap


def test_a_fixed_poll_does_not_back_off() -> None:
    slurm = FakeSlurm()
    watcher = Watcher(slurm, pacing_of=lambda: Pacing(first=0.02, cap=5.0, gap=0.0, growth=2.0))
    with watcher.follow(("job", "1"), poll=0.05):
        time.sleep(1.0)
    # backing off, it would have polled at 0, .02, .06, .14, .30, .62 s
    assert len(slurm.polls) >= 10
    times = [t for t, _ in slurm.polls]
    assert min(b - a for a, b in zip(times, times[1:])) >= 0.045


def test_the_thread_starts_on_follow_and_ends_when_nothing_is_followed() -> None:
    slurm = FakeSlurm()
    watcher = Watcher(slurm, pacing_of=lambda: Pacing(first=0.01, cap=0.01, gap=0.0))
    assert watcher.read(("job", "1")) == "1 RUNNING" and not watcher.thread_alive  # a read: no thread
    heard: list[str] = []
    sub = watcher.follow(("job", "1"), lambda answer: heard.append(watcher.read(("job", "1"))))
    until(lambda: len(heard) >= 3, what="three polls heard")
    assert watcher.thread_alive
    sub.close()
    assert len(slurm.polls) - len(heard) <= 2  # the listener's reads took the poll it was called for
    until(lambda: not watcher.thread_alive, timeout=5, what="the thread ending")
    assert sub.next(0.1) is None  # closed: nothing more


def test_a_poll_that_fails_reaches_every_follower_and_reader() -> None:
    def broken(keys: frozenset) -> dict:
        raise OSError("squeue: the controller is down")

    watcher = Watcher(broken, pacing_of=lambda: Pacing(first=0.01, cap=0.01, gap=0.0))
    with watcher.follow(("job", "1")) as updates:
        assert isinstance(updates.next(WAIT).error, OSError)
    with pytest.raises(OSError, match="controller is down"):
        watcher.read(("job", "1"))


def test_a_forked_child_does_not_inherit_the_poll_in_progress() -> None:
    """A child forked while the parent polls (its lock held) polls for itself and does not hang."""
    from hpcnb.jobs import _watcher

    parent = _watcher()  # the kernel's
    with parent._polling:  # the parent is in the middle of a poll
        pid = os.fork()
        if pid == 0:  # the child: a fresh watcher, no lock held, no thread
            code = 1
            try:
                child = poller.shared(FakeSlurm())
                code = 0 if child is not parent and child.read(("job", "7")) == "7 RUNNING" else 2
            finally:
                os._exit(code)
        end = time.monotonic() + 20
        while (status := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < end:
            time.sleep(0.05)
        if status[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the parent's poller lock")
    assert os.waitstatus_to_exitcode(status[1]) == 0


# ------------------------------------------------------------------- through the local Slurm

def test_no_thread_at_import() -> None:
    code = ("import threading, hpcnb, hpcnb.jobs, hpcnb.poller, hpcnb.widgets\n"
            "assert threading.active_count() == 1, threading.enumerate()\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_waits_share_the_poller_and_its_thread_ends_after_them(workdir: Path) -> None:
    jobs = [submit(wrap="sleep 1", time="0:30") for _ in range(2)]
    results: list[str] = []
    other = threading.Thread(target=lambda: results.append(jobs[1].wait(timeout=WAIT, quiet=True)))
    other.start()
    assert jobs[0].wait(timeout=WAIT, quiet=True) == "COMPLETED"
    other.join(WAIT)
    assert results == ["COMPLETED"]
    assert len(poller_threads()) <= 1  # never one per wait
    until(lambda: not poller_threads(), what="the poller's thread ending")  # after its last poll


@pytest.mark.slow
def test_three_widgets_and_a_wait_on_a_real_slurm_are_polite(workdir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11: with three widgets open and a job running for 60 s, at most 20 squeue/sacct calls
    a minute, at least 2 s apart. HPCNB_SLURM=real with wrappers on PATH that log each call and
    run the local Slurm's command: the kernel's pacing is the real Slurm's."""
    from hpcnb.widgets import JobWidget, QueueWidget, TextWatch

    log, wrappers = tmp_path / "calls.log", tmp_path / "bin"
    wrappers.mkdir()
    for name in LOCAL_COMMANDS:
        wrapper = wrappers / name
        command = local_bin_dir() / name
        wrapper.write_text(f'#!/bin/sh\necho "$(date +%s.%N) {name}" >> "{log}"\nexec "{command}" "$@"\n')
        wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HPCNB_SLURM", "real")
    assert which_slurm() == "real" and poller.pacing() == poller.REAL

    job = submit(wrap="sleep 60", time="3:00", job_name="polite")
    start = time.time()
    job_widget, queue_widget = JobWidget(job), QueueWidget(idle_stop=5)
    text = io.StringIO()
    printer = threading.Thread(target=TextWatch(job, stream=text).run, kwargs={"timeout": 150})
    printer.start()
    try:
        assert job.wait(timeout=150, quiet=True) == "COMPLETED"
        printer.join(WAIT)
        assert job_widget.wait(WAIT) == "COMPLETED" and f"job {job.id}: COMPLETED" in text.getvalue()
    finally:
        queue_widget.close()
        job_widget.close()
    calls = [(float(stamp), name) for stamp, name in (line.split() for line in log.read_text().splitlines())]
    polls = [(round(t - start, 1), name) for t, name in calls if name in ("squeue", "sacct") and t >= start]
    in_a_minute = [p for p in polls if p[0] < 60]
    assert len(in_a_minute) <= 20, polls
    squeues = [t for t, name in polls if name == "squeue"]
    assert min(b - a for a, b in zip(squeues, squeues[1:])) >= 1.5, polls  # 2 s, less the start-up jitter
    print(f"{len(in_a_minute)} squeue/sacct calls in the first minute: {polls}")
