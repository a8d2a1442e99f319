"""hpcnb.jobs end to end: every call goes through the local Slurm's commands (see conftest.py)."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcnb.jobs import (
    FINISHED_STATES,
    AccountingRow,
    Efficiency,
    Job,
    JobFailed,
    JobNotFound,
    JobSnapshot,
    QueueRow,
    SlurmError,
    SubmitError,
    parse_elapsed,
    parse_size,
    queue,
    submit,
)
from hpcnb.job_records import _expand_ids, _summarize, _tasks_of
from hpcnb.jobscript import JobScript
from hpcnb.slurm.sizes import format_rounded_size
from hpcnb.slurm.times import format_cpu_time, parse_printed_seconds

WAIT = 60  # seconds; a test that needs this long has failed anyway


def _wait_until(predicate, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.05)


# ----------------------------------------------------------------------- parsing (no Slurm)

@pytest.mark.parametrize("text, seconds", [
    ("00:00:07", 7), ("01:02:03", 3723), ("2-00:00:01", 172801), ("12:34", 754), ("0:02.345", 2),
    ("", None), ("INVALID", None),
])
def test_parse_elapsed(text: str, seconds: int | None) -> None:
    assert parse_elapsed(text) == seconds


@pytest.mark.parametrize("text, size", [
    ("15464K", 15464 * 1024), ("1.50M", 1572864), ("2G", 2 * 1024**3), ("0", 0), ("512", 512), ("", None),
])
def test_parse_size(text: str, size: int | None) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text, seconds", [
    ("00:00.412", 0.412), ("01:02.5", 62.5), ("00:00:00", 0), ("01:02:03", 3723), ("1-00:00:01", 86401), ("", None),
])
def test_cpu_times_keep_their_fraction(text: str, seconds: float | None) -> None:
    assert parse_printed_seconds(text) == seconds


@pytest.mark.parametrize("seconds, text", [
    (0.412, "00:00.412"), (62.5, "01:02.500"), (0, "00:00:00"), (59, "00:00:59"), (3723.4, "01:02:03"),
    (90061, "1-01:01:01"),
])
def test_total_cpu_is_printed_as_sacct_does_and_read_back(seconds: float, text: str) -> None:
    assert format_cpu_time(seconds) == text
    assert parse_printed_seconds(text) == (round(seconds) if seconds >= 3600 else seconds)


@pytest.mark.parametrize("size, text", [
    (0, "0"), (1023, "1023"), (2048, "2.0K"), (269312 * 1024, "263.0M"), (3 * 1024**3 // 2, "1.5G"),
])
def test_format_size_uses_sacct_units(size: int, text: str) -> None:
    assert format_rounded_size(size) == text


OOM_LINES = """\
17|OUT_OF_MEMORY|0:125|00:00:02|1|1|00:00.120|100M||||
17.batch|OUT_OF_MEMORY|0:125|00:00:02|1|1|00:00.120||269312K|||
"""
ROOMY_LINES = """\
18|COMPLETED|0:0|00:00:05|1|2|00:01.000|1.50G||||
18.batch|COMPLETED|0:0|00:00:05|1|2|00:00.400||900M|||
18.0|COMPLETED|0:0|00:00:04|1|2|00:00.600||1.25G|||
"""


def test_efficiency_from_sacct_lines_with_their_units_and_empty_fields() -> None:
    oom = Efficiency.from_sacct(OOM_LINES)
    assert (oom.job_id, oom.state, oom.exit_code, oom.elapsed, oom.ncpus) == ("17", "OUT_OF_MEMORY", "0:125", 2, 1)
    assert oom.req_mem == 100 * 1024**2 and oom.peak_rss == 269312 * 1024  # the job line's empty MaxRSS is skipped
    assert oom.mem_efficiency == pytest.approx(2.63) and oom.hit_memory_limit
    assert oom.cpu_efficiency == pytest.approx(0.06)
    roomy = Efficiency.from_sacct(ROOMY_LINES)
    assert roomy.peak_rss == 1.25 * 1024**3 and roomy.req_mem == 1.5 * 1024**3  # G and M, as sacct prints them
    assert roomy.mem_efficiency == pytest.approx(1.25 / 1.5) and not roomy.hit_memory_limit
    assert roomy.total_cpu == 1.0 and roomy.cpu_efficiency == pytest.approx(1.0 / (5 * 2))
    assert roomy.suggest_mem() == "1536M"  # 1.25G x 1.2, in whole MiB
    assert roomy.suggest_mem(margin=0) == "1280M"
    # CANCELLED by <uid>, no TotalCPU, no MaxRSS (never ran): everything unknown says so
    never = Efficiency.from_sacct("19|CANCELLED by 1000|0:0|00:00:00|1|1||500M||||\n")
    assert never.state == "CANCELLED" and never.total_cpu is None and never.peak_rss is None
    assert never.cpu_efficiency is None and never.mem_efficiency is None and not never.hit_memory_limit
    assert "CPU efficiency: n/a" in str(never) and "Memory utilized (peak): not recorded" in str(never)
    with pytest.raises(ValueError, match="no MaxRSS"):
        never.suggest_mem()


def test_efficiency_waits_for_the_steps_of_a_finished_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real slurmdbd can show the job COMPLETED while its batch step still runs, without MaxRSS,
    or without its ReqMem (22.05, seen in lesson 3 and exercise 3 under CI): the summary waits for
    them, a bounded time."""
    import hpcnb.jobs as jobs

    replies = iter(["18|COMPLETED|0:0|00:00:03|1|1|00:01.000|500M||||\n18.batch|RUNNING|0:0|00:00:03|1|1|00:00:00|||||\n",
                    "18|COMPLETED|0:0|00:00:03|1|1|00:01.000|||||\n18.batch|COMPLETED|0:0|00:00:03|1|1|00:01.000||300M|||\n",
                    "18|COMPLETED|0:0|00:00:03|1|1|00:01.000|500M||||\n18.batch|COMPLETED|0:0|00:00:03|1|1|00:01.000||300M|||\n"])
    monkeypatch.setattr(jobs, "_slurm", lambda args, **_: subprocess.CompletedProcess(args, 0, next(replies), ""))
    monkeypatch.setattr(jobs.time, "sleep", lambda _: None)
    summary = Job("18").efficiency()
    assert summary.peak_rss == 300 * 1024**2 and summary.req_mem == 500 * 1024**2
    stuck = "18|COMPLETED|0:0|00:00:03|1|1|00:01.000|500M||||\n18.batch|RUNNING|0:0|00:00:03|1|1|00:00:00|||||\n"
    monkeypatch.setattr(jobs, "_slurm", lambda args, **_: subprocess.CompletedProcess(args, 0, stuck, ""))
    assert Job("18").efficiency(settle=0.2).peak_rss is None  # gives up: what sacct has


def test_efficiency_text_is_seff_like() -> None:
    text = str(Efficiency.from_sacct(ROOMY_LINES))
    assert text.splitlines() == [
        "Job ID: 18", "State: COMPLETED (exit code 0:0)", "Nodes: 1, cores: 2, elapsed: 00:00:05",
        "CPU utilized: 1.00 s", "CPU efficiency: 10.0% of 10 s core-walltime",
        "Memory utilized (peak): 1.2G", "Memory efficiency: 83.3% of 1.5G per node",
    ]
    oom = str(Efficiency.from_sacct(OOM_LINES))
    assert "Memory efficiency: 263.0% of 100.0M per node" in oom and "stopped at its memory limit" in oom


GPU_LINES = """\
21|COMPLETED|0:0|00:01:40|1|2|00:50.000|6G||billing=2,cpu=2,gres/gpu=1,mem=6G,node=1||
21.batch|COMPLETED|0:0|00:01:40|1|2|00:01.000||300M|cpu=2,gres/gpu=1,mem=6G,node=1||
21.0|COMPLETED|0:0|00:01:39|1|2|00:49.000||2G|cpu=2,gres/gpu=1,mem=6G,node=1|gres/gpumem=1000M,gres/gpuutil=87|gres/gpumem=1340M,gres/gpuutil=99
"""


def test_efficiency_reads_the_gpus_use_or_says_why_it_is_not_there() -> None:
    """sacct's gres/gpuutil (TRESUsageInAve) and gres/gpumem (TRESUsageInMax), as Slurm records them
    with AccountingStorageTRES=gres/gpumem,gres/gpuutil."""
    used = Efficiency.from_sacct(GPU_LINES)
    assert (used.gpus, used.gpu_util, used.gpu_mem) == (1, 87.0, 1340 * 1024**2)
    assert str(used).splitlines()[-3:] == ["GPUs: 1", "GPU utilisation (mean): 87%", "GPU memory (peak): 1.3G"]
    unread = Efficiency.from_sacct(GPU_LINES.replace("gres/gpumem=1000M,gres/gpuutil=87|gres/gpumem=1340M,gres/gpuutil=99", "|"))
    assert (unread.gpus, unread.gpu_util, unread.gpu_mem) == (1, None, None)
    assert "not recorded: sacct's TRESUsageInAve has no gres/gpuutil" in str(unread)
    assert "AccountingStorageTRES=gres/gpumem,gres/gpuutil" in str(unread)
    assert "GPU" not in str(Efficiency.from_sacct(ROOMY_LINES))  # no GPU, no GPU lines


def test_efficiency_refuses_what_it_cannot_summarise() -> None:
    oom = Efficiency.from_sacct(OOM_LINES)
    with pytest.raises(ValueError, match="stopped at its memory limit.*generous --mem"):
        oom.suggest_mem()
    # killed without cgroups (FAILED 0:9): the peak at the request tells the same
    killed = Efficiency.from_sacct(OOM_LINES.replace("OUT_OF_MEMORY|0:125", "FAILED|0:9"))
    assert killed.hit_memory_limit
    with pytest.raises(ValueError, match="memory limit"):
        killed.suggest_mem()
    with pytest.raises(ValueError, match="margin"):
        Efficiency.from_sacct(ROOMY_LINES).suggest_mem(margin=-0.1)
    with pytest.raises(ValueError, match="2 job lines.*array_tasks"):
        Efficiency.from_sacct("7_1|COMPLETED|0:0|00:00:01|1|1||500M||||\n7_2|COMPLETED|0:0|00:00:01|1|1||500M||||\n")
    with pytest.raises(JobNotFound):
        Efficiency.from_sacct("")
    with pytest.raises(SlurmError, match="unexpected line"):
        Efficiency.from_sacct("17|COMPLETED|0:0\n")


def test_accounting_row_keeps_a_pipe_in_the_job_name() -> None:
    row = AccountingRow.parse(
        "12.batch|a|b|CANCELLED by 1000|0:15|1-00:00:02|15464K|2|4|2026-01-02T03:04:05|Unknown|cpu=4,node=2"
    )
    assert (row.job_id, row.step, row.name, row.state, row.state_text) == (
        "12.batch", "batch", "a|b", "CANCELLED", "CANCELLED by 1000")
    assert (row.exit_code, row.signal, row.elapsed, row.max_rss) == (0, 15, 86402, 15464 * 1024)
    assert (row.nnodes, row.ncpus, row.start.hour, row.end) == (2, 4, 3, None)
    assert row.alloc_tres == {"cpu": "4", "node": "2"}


def test_array_id_ranges_and_summary() -> None:
    assert _expand_ids("7_[1-3,5%2]") == ["7_1", "7_2", "7_3", "7_5"]
    assert _expand_ids("7_4") == ["7_4"]
    assert _summarize(["COMPLETED", "PENDING", "RUNNING"]) == "RUNNING"
    assert _summarize(["COMPLETED", "TIMEOUT", "FAILED"]) == "TIMEOUT"
    assert _summarize(["COMPLETED"] * 3) == "COMPLETED"
    assert {"BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "PREEMPTED"} <= FINISHED_STATES


def test_one_snapshot_from_squeue_and_sacct_lines() -> None:
    """What one poll reads: a running task from squeue, the rest of the array from sacct (22.05
    gives the tasks that never started one record, the array's own), a name with a '|'."""
    queued = [QueueRow.parse("7_1|8|debug|me|RUNNING|0:05|1:00|1|node1|None|a|b")]
    accounted = [QueueRow.parse(line, accounted=True) for line in (
        "7_2|9|debug|me|COMPLETED|00:00:03|00:01:00|1|node2|None|0:0|a|b",
        "7_[3-4%1]|7|debug|me|CANCELLED by 0|00:00:00|00:01:00|1|None assigned|None|0:0|a|b")]
    assert queued[0].raw_id == "8" and queued[0].name == "a|b" and accounted[1].state == "CANCELLED"
    snap = JobSnapshot.from_tasks("7", {**_tasks_of("7", accounted), **_tasks_of("7", queued)})
    assert snap.states == {"7_2": "COMPLETED", "7_3": "CANCELLED", "7_4": "CANCELLED", "7_1": "RUNNING"}
    assert (snap.state, snap.is_array, snap.done, snap.elapsed, snap.time_limit) == ("RUNNING", True, False, 5, 60)
    assert (snap.nodes, snap.reason, snap.exit_code, snap.name) == ("node2,node1", "", "0:0", "a|b")
    assert list(_tasks_of("8", queued)) == ["7_1"]  # a task by its own job id
    assert _tasks_of("17", queued) == {} and QueueRow.parse("not a row") is None


def test_bad_calls_fail_before_slurm() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        submit()
    with pytest.raises(ValueError, match="exactly one"):
        submit("job.sh", wrap="true")
    with pytest.raises(ValueError, match="wrap command"):
        submit(wrap="true", args=["x"])
    with pytest.raises(NotADirectoryError, match="no-such-dir"):
        submit(wrap="true", cwd="/no-such-dir")
    with pytest.raises(ValueError, match="7_3"):
        Job("12.batch")


# ------------------------------------------------------------------- through the local Slurm

def test_wrap_job_completes_with_accounting(workdir: Path) -> None:
    job = submit(wrap="echo hello from $SLURM_JOB_ID; sleep 1.2", time="5:00", job_name="greet")
    assert job.state in ("PENDING", "RUNNING")
    assert job.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    assert job.state == "COMPLETED" and job.done and not job.is_array
    assert job.output_path == workdir / f"slurm-{job.id}.out"
    assert job.tail() == f"hello from {job.id}\n"
    assert job.exit_code == 0
    assert job.elapsed is not None and 1 <= job.elapsed <= 10
    rows = job.accounting()
    assert [r.job_id for r in rows][:2] == [job.id, f"{job.id}.batch"]
    assert rows[0].name == "greet" and rows[0].state == "COMPLETED" and rows[0].alloc_tres["node"] == "1"
    batch = rows[1]
    assert batch.step == "batch" and batch.max_rss and batch.max_rss > 100_000  # bytes, not KiB
    assert rows[0].start and rows[0].end and rows[0].start <= rows[0].end
    assert job.nodes and job.nodes[0].startswith("node")
    assert Job.attach(job.id) == job and repr(job) == f"<Job {job.id} COMPLETED>"


def test_wait_accounted_returns_the_end_or_times_out_with_what_it_saw(workdir: Path) -> None:
    job = submit(wrap="exit 3", cwd=workdir)
    job.wait(quiet=True)
    assert job.wait_accounted(timeout=10) == "FAILED"
    held = submit(wrap="true", cwd=workdir, hold=True)
    try:
        with pytest.raises(TimeoutError, match=rf"no end for job {held.id} after 0.5 s \(it says: PENDING\)"):
            held.wait_accounted(timeout=0.5)
    finally:
        held.cancel()


def test_wait_accounted_waits_for_every_array_task_and_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real slurmdbd first shows an array as one row and a two-node job on one node (22.05,
    seen in the course's real-Slurm run); the wait goes on until sacct matches scontrol."""
    import hpcnb.jobs as jobs

    scontrol = ("JobId=9 ArrayJobId=7 ArrayTaskId=2 JobState=COMPLETED ReqNodeList=(null) NodeList=node[1-2]\n"
                "JobId=8 ArrayJobId=7 ArrayTaskId=1 JobState=COMPLETED ReqNodeList=(null) NodeList=node1\n")
    sacct_replies = iter(["7|COMPLETED|node1\n",
                          "7_1|COMPLETED|node1\n7_2|COMPLETED|node1\n",
                          "7_1|COMPLETED|node1\n7_2|COMPLETED|node[1-2]\n"])
    calls = []

    def fake_slurm(args: list[str], **_: object) -> subprocess.CompletedProcess:
        calls.append(args[0])
        out = scontrol if args[0] == "scontrol" else next(sacct_replies)
        return subprocess.CompletedProcess(args, 0, out, "")

    monkeypatch.setattr(jobs, "_slurm", fake_slurm)
    monkeypatch.setattr(jobs.time, "sleep", lambda _: None)
    assert Job("7").wait_accounted(timeout=10) == "COMPLETED"
    assert calls == ["sacct", "scontrol", "sacct", "sacct"]


def test_wait_accounted_waits_for_the_steps_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real slurmdbd under load had a job's end but none of its steps yet (22.05, exercise 4.2 in
    CI): with ``steps`` the wait goes on until sacct shows that many, else says what it lacks."""
    import hpcnb.jobs as jobs

    replies = {"sacct -X": iter(["5|FAILED|node1\n"] * 3),
               "sacct": iter([["5", "5.batch"], ["5", "5.batch", "5.0", "5.1"]])}

    def fake_slurm(args: list[str], **_: object) -> subprocess.CompletedProcess:
        if args[0] == "scontrol":
            out = "JobId=5 JobState=FAILED NodeList=node1\n"
        elif "-X" in args:
            out = next(replies["sacct -X"])
        else:  # Job.accounting's rows: JobID and ten more fields
            sep = next(a for a in args if a.startswith("--delimiter=")).split("=", 1)[1]
            out = "".join(sep.join([row, "x", "FAILED", "1:0", "00:00:01", "", "1", "1", "", "", ""]) + "\n"
                          for row in next(replies["sacct"]))
        return subprocess.CompletedProcess(args, 0, out, "")

    monkeypatch.setattr(jobs, "_slurm", fake_slurm)
    monkeypatch.setattr(jobs.time, "sleep", lambda _: None)
    assert Job("5").wait_accounted(timeout=10, steps=2) == "FAILED"
    replies["sacct -X"], replies["sacct"] = iter(["5|FAILED|node1\n"] * 99), iter([["5", "5.0"]] * 99)
    with pytest.raises(TimeoutError, match=r"not yet: 1 of 2 steps"):
        Job("5").wait_accounted(timeout=0, steps=2)


def test_wait_accounted_ends_for_an_array_cancelled_with_unstarted_tasks(workdir: Path) -> None:
    """scontrol says ``ArrayTaskId=2-3%1`` for the unstarted tasks, sacct ``N_[2-3%1]``: one record."""
    job = submit(wrap="sleep 60", array="1-3%1", cwd=workdir)
    try:
        deadline = time.monotonic() + WAIT
        while "RUNNING" not in job.states.values() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        job.cancel()
    assert job.wait_accounted(timeout=30) == "CANCELLED"


def test_wait_accounted_names_the_rows_it_still_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    import hpcnb.jobs as jobs

    def fake_slurm(args: list[str], **_: object) -> subprocess.CompletedProcess:
        out = "JobId=5 JobState=COMPLETED NodeList=node[1-2]\n" if args[0] == "scontrol" else "5|COMPLETED|node1\n"
        return subprocess.CompletedProcess(args, 0, out, "")

    monkeypatch.setattr(jobs, "_slurm", fake_slurm)
    with pytest.raises(TimeoutError, match=r"COMPLETED; not yet: 5 on node\[1-2\]"):
        Job("5").wait_accounted(timeout=0.3)


def test_script_job_with_args_and_script_text(workdir: Path) -> None:
    script = workdir / "hello.sh"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=from-file\necho \"args: $1 $2\"\n")
    job = submit(script, args=["a b", 2])
    assert job.script_path == script
    assert job.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    assert job.tail() == "args: a b 2\n"
    assert job.accounting(steps=False)[0].name == "from-file"
    text_job = submit("#!/bin/sh\n#SBATCH --job-name=from-stdin\necho via stdin\n", cwd=workdir)
    assert text_job.script_path is None
    assert text_job.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    assert text_job.tail() == "via stdin\n"
    assert text_job.accounting(steps=False)[0].name == "from-stdin"


def test_failing_job_is_failed_with_exit_code_and_check_raises(workdir: Path) -> None:
    job = submit(wrap="echo line one; echo about to fail >&2; exit 3")
    with pytest.raises(JobFailed) as info:
        job.wait(timeout=WAIT, quiet=True, check=True)
    err = info.value
    assert err.state == "FAILED" and err.exit_code == 3
    assert "about to fail" in str(err) and f"job {job.id} ended FAILED with exit code 3" in str(err)
    assert job.state == "FAILED" and job.exit_code == 3
    assert job.accounting(steps=False)[0].exit_code == 3
    assert job.wait(quiet=True) == "FAILED"  # without check: just the state


def test_cancel_running_job(workdir: Path) -> None:
    job = submit(wrap="sleep 60")
    _wait_until(lambda: job.state == "RUNNING")
    assert job.reason == "None"
    assert job.cancel() is True
    assert job.wait(timeout=WAIT, quiet=True) == "CANCELLED"
    row = job.accounting(steps=False)[0]
    assert row.state == "CANCELLED" and row.state_text.startswith("CANCELLED")
    assert job.cancel() is False  # already over: nothing to do
    assert job.elapsed is not None and job.elapsed < 30


def test_array_with_throttle_runs_every_task_two_at_a_time(workdir: Path) -> None:
    job = submit(wrap="echo start $(date +%s.%N); sleep 0.6; echo end $(date +%s.%N)", array="1-5%2")
    _wait_until(lambda: len(job.states) == 5)
    assert job.is_array
    assert job.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    tasks = job.array_tasks()
    assert [t.id for t in tasks] == [f"{job.id}_{i}" for i in range(1, 6)]
    assert set(job.states.values()) == {"COMPLETED"} and len(job.accounting(steps=False)) == 5
    spans = []
    for task in tasks:
        assert task.output_path.name == f"slurm-{job.id}_{task.id.split('_')[1]}.out"
        (_, start), (_, end) = (line.split() for line in task.tail().splitlines())
        spans.append((float(start), float(end)))
    most = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert most <= 2, f"throttle %2 broken: {most} tasks ran at once"
    with pytest.raises(ValueError, match="array_tasks"):
        _ = job.output_path
    assert job.exit_code == 0 and "array: 5 COMPLETED" in repr(job)


def test_dependency_afterok_waits_for_the_first_job(workdir: Path) -> None:
    first = submit(wrap="until [ -e go ]; do sleep 0.05; done; date +%s.%N")  # ends when the test lets it
    second = submit(wrap="date +%s.%N", dependency=f"afterok:{first.id}")
    _wait_until(lambda: second.reason == "Dependency")
    assert second.state == "PENDING"
    (workdir / "go").touch()
    assert second.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    assert first.state == "COMPLETED"
    assert float(second.tail()) >= float(first.tail())


def test_time_limit_overrun_is_timeout(workdir: Path) -> None:
    job = submit(wrap="sleep 30", time="0:02")
    assert job.wait(timeout=WAIT, quiet=True) == "TIMEOUT"
    assert job.elapsed is not None and 2 <= job.elapsed <= 6
    assert job.accounting(steps=False)[0].state == "TIMEOUT"


HOG = "python3 -c \"import time; x = bytearray({mib} << 20); time.sleep({hold})\""


def test_memory_overrun_then_right_sized_rerun(workdir: Path) -> None:
    """Over --mem: OUT_OF_MEMORY in the summary; a roomy run's peak plus a margin then fits."""
    hog = submit(wrap=HOG.format(mib=150, hold=5), mem="50M", time="1:00")
    assert hog.wait(timeout=WAIT, quiet=True) == "OUT_OF_MEMORY"
    oom = hog.efficiency()
    assert (oom.state, oom.exit_code, oom.req_mem) == ("OUT_OF_MEMORY", "0:125", 50 * 1024**2)
    assert oom.peak_rss and oom.peak_rss > oom.req_mem and oom.hit_memory_limit
    assert "exceeded memory limit" in hog.tail()
    with pytest.raises(ValueError, match="memory limit"):
        oom.suggest_mem()
    roomy = submit(wrap=HOG.format(mib=100, hold=1.5), mem="400M", time="1:00")
    assert roomy.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    used = roomy.efficiency()
    assert used.peak_rss and 100 * 1024**2 < used.peak_rss < 400 * 1024**2
    assert used.total_cpu is not None and 0 < used.total_cpu < used.elapsed  # TotalCPU: the job's processes
    assert used.cpu_efficiency is not None and 0 < used.cpu_efficiency < 1 and not used.hit_memory_limit
    mem = used.suggest_mem(margin=0.2)
    assert parse_size(mem) >= 1.2 * used.peak_rss
    snug = submit(wrap=HOG.format(mib=100, hold=1.5), mem=mem, time="1:00")
    assert snug.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    assert snug.efficiency().mem_efficiency > used.mem_efficiency


def test_wait_timeout_leaves_the_job_running(workdir: Path) -> None:
    job = submit(wrap="sleep 30")
    with pytest.raises(TimeoutError, match=rf"job {job.id} is still .* after 0.3 s \(seen: .*\).* job.cancel"):
        job.wait(timeout=0.3, quiet=True)
    _wait_until(lambda: job.state == "RUNNING")
    with pytest.raises(TimeoutError, match=rf"job {job.id} is still RUNNING after 3 s \(seen: RUNNING\)"):
        job.wait(timeout=3, quiet=True)  # (its first poll may take a second on a loaded machine)
    assert job.state in ("PENDING", "RUNNING")
    job.cancel()


@pytest.mark.parametrize("options, slurm_text, code", [
    ({"time": "abc"}, "sbatch: error: Invalid --time specification", 255),
    ({"partition": "nope"}, "Batch job submission failed: Invalid partition name specified", 1),
    ({"ntaks_per_node": 2}, "sbatch: unrecognized option '--ntaks-per-node=2'", 255),
])
def test_bad_option_raises_submit_error_with_slurms_text(options, slurm_text, code, workdir: Path) -> None:
    with pytest.raises(SubmitError) as info:
        submit(wrap="true", **options)
    assert slurm_text in str(info.value) and slurm_text in info.value.stderr
    assert info.value.exit_code == code


def test_misspelt_option_names_the_keyword_and_the_fix(workdir: Path) -> None:
    with pytest.raises(SubmitError, match=r"submit\(ntaks_per_node=\.\.\.\).*did you mean ntasks_per_node"):
        submit(wrap="true", ntaks_per_node=2)


def test_missing_script_is_slurms_error(workdir: Path) -> None:
    with pytest.raises(SubmitError, match="Unable to open file nope.sh"):
        submit("nope.sh")


def test_jobscript_round_trip(workdir: Path) -> None:
    script = JobScript(name="round trip", time="0:05:00", ntasks=1, cpus_per_task=2).add(
        "echo cpus=$SLURM_CPUS_PER_TASK name=$SLURM_JOB_NAME")
    job = submit(script)
    assert job.script_path == workdir / "round_trip.sbatch"
    back = JobScript.from_file(job.script_path)
    assert back.options() == script.options() and back.render() == script.render()
    assert job.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    assert job.tail() == "cpus=2 name=round trip\n"
    row = job.accounting(steps=False)[0]
    assert row.name == "round trip" and row.ncpus == 2
    (workdir / "other.sbatch").write_text("#!/bin/sh\n# someone else's\n")
    second = submit(JobScript(name="other").add("true"))
    assert second.script_path == workdir / "other-2.sbatch"  # never overwrites a different file
    assert (workdir / "other.sbatch").read_text().endswith("someone else's\n")
    second.wait(timeout=WAIT, quiet=True)


def test_two_node_srun_job_output_has_both_nodes(workdir: Path) -> None:
    job = submit(wrap="srun bash -c 'echo task $SLURM_PROCID on $SLURMD_NODENAME'", nodes=2, ntasks_per_node=1)
    assert job.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    lines = sorted(job.tail().splitlines())
    assert lines == ["task 0 on node1", "task 1 on node2"]
    assert job.nodes == ["node1", "node2"]
    step = next(r for r in job.accounting() if r.step == "0")
    assert step.state == "COMPLETED" and step.nnodes == 2


def test_step_alloc_tres_counts_nodes_and_memory_like_slurm(workdir: Path) -> None:
    job = submit(wrap="srun true", nodes=2, ntasks_per_node=1)
    assert job.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    rows = {r.step: r.alloc_tres for r in job.accounting()}
    assert rows[None] == {"billing": "2", "cpu": "2", "mem": "1000M", "node": "2"}
    assert rows["batch"] == {"cpu": "1", "mem": "500M", "node": "1"}
    assert rows["0"] == {"cpu": "2", "mem": "1000M", "node": "2"}


def test_queue_lists_running_jobs_with_awkward_names(workdir: Path) -> None:
    job = submit(wrap="sleep 30", job_name="a|b c")
    _wait_until(lambda: job.state == "RUNNING")
    rows = [r for r in queue() if r.job_id == job.id]
    assert len(rows) == 1
    row = rows[0]
    assert (row.name, row.state, row.nodes, row.reason, row.partition) == ("a|b c", "RUNNING", 1, "None", "debug")
    assert row.nodelist.startswith("node") and row.time is not None
    assert job.id in [r.job_id for r in queue(user=row.user)]
    assert job.id not in [r.job_id for r in queue(user="nobody")]  # a real user with no jobs here
    job.cancel()


def test_attach_unknown_job_is_job_not_found() -> None:
    with pytest.raises(JobNotFound, match="no job 999999"):
        Job.attach(999999)


def test_progress_bar_shows_the_job_and_its_state(workdir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    job = submit(wrap="sleep 0.3")
    assert job.wait(timeout=WAIT) == "COMPLETED"
    err = capfd.readouterr().err
    assert f"job {job.id}" in err and "COMPLETED" in err and "1/1 done" in err


def test_job_api_talks_to_slurm_only_through_its_commands(workdir: Path) -> None:
    code = (
        "import sys\nfrom hpcnb.jobs import submit\n"
        "job = submit(wrap='echo ok')\nassert job.wait(quiet=True) == 'COMPLETED', job.state\n"
        "job.accounting(); job.tail(); job.nodes\n"
        "heavy = [m for m in sys.modules if m.startswith(('hpcnb.localslurm', 'torch', 'matplotlib', 'ipywidgets'))]\n"
        "assert not heavy, heavy\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_until_returns_the_value_or_says_what_it_waited_for(monkeypatch):
    from hpcnb import jobs

    answers = iter([0, "", "ready"])
    assert jobs.until(lambda: next(answers), poll=0.01) == "ready"
    shown = []

    def squeue(args, **_):
        shown.append(args)
        return subprocess.CompletedProcess(args, 0, "JOBID STATE REASON NODELIST\n7 PENDING Priority \n", "")

    monkeypatch.setattr(jobs, "_slurm", squeue)
    with pytest.raises(TimeoutError, match=r"(?s)waited 0.05 s for job 7 to run; squeue -j 7: .*7 PENDING Priority"):
        jobs.until(lambda: False, timeout=0.05, poll=0.01, what="job 7 to run", job=7)
    assert shown[0][:3] == ["squeue", "-j", "7"]


def test_a_script_path_is_never_read_as_an_option(workdir: Path) -> None:
    """``submit("-job.sh")`` runs that file; ``submit("--wrap=...")`` is a (missing) file, never a command."""
    script = workdir / "-job.sh"
    script.write_text("#!/bin/sh\necho dashed \"$1\"\n")
    job = submit("-job.sh", args=["-x"])
    assert job.wait(timeout=WAIT, quiet=True) == "COMPLETED"
    assert job.tail() == "dashed -x\n"
    canary = workdir / "canary"
    with pytest.raises(SubmitError, match="Unable to open file --wrap=touch"):
        submit(f"--wrap=touch {canary}")
    time.sleep(0.5)
    assert not canary.exists()


def test_a_job_name_with_a_newline_forges_no_row(workdir: Path) -> None:
    """Anyone may name a job ``"x\\n<your job id>|...|FAILED|..."``: squeue and sacct print it across
    two lines, and the second must not read as your job's row."""
    victim = submit(wrap="sleep 30")
    _wait_until(lambda: victim.state == "RUNNING")
    forged = f"x\n{victim.id}|{victim.id}|debug|root|FAILED|0:01|1:00|1|node1|None|0:0|forged"
    done = subprocess.run(["sbatch", "--parsable", "-J", forged, "--wrap", "sleep 30"], capture_output=True,
                          text=True, timeout=60, cwd=workdir)
    assert done.returncode == 0, done.stderr
    forger = Job(done.stdout.strip())
    _wait_until(lambda: forger.state == "RUNNING")
    assert victim.state == "RUNNING" and victim.snapshot().name == "wrap"
    rows = {row.job_id: row for row in queue()}
    assert rows[victim.id].state == "RUNNING" and rows[forger.id].name == forged
    assert [row.name for row in forger.accounting()] == [forged, "batch"]
    forger.cancel()
    assert forger.wait(timeout=WAIT, quiet=True) == "CANCELLED" and forger.snapshot().name == forged
    victim.cancel()
