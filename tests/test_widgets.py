"""hpcnb.widgets on the local Slurm: the job widget's model, Cancel, the queue widget, the text fallback.

The widgets are built without a kernel here (ipywidgets then talks to nobody), which is enough
to check their model: what the background thread writes into them as the job moves on.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from hpcnb import widgets
from hpcnb.jobs import Job, submit
from hpcnb.widgets import (
    JobWidget,
    QueueWidget,
    TextWatch,
    format_queue,
    format_seconds,
    snapshot,
    watch,
    watch_queue,
)

pytest.importorskip("ipywidgets")
WAIT = 60


def until(predicate, timeout: float = WAIT, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"{what} not reached in {timeout} s"
        time.sleep(0.05)


def test_format_seconds() -> None:
    assert [format_seconds(s) for s in (None, 0, 7, 65, 3725, 90061)] == [
        "-", "0:00", "0:07", "1:05", "1:02:05", "1-01:01:01"]


def test_widget_reaches_completed(workdir: Path) -> None:
    job = submit(wrap="echo first line; sleep 1; echo last line", time="0:30", job_name="short")
    w = JobWidget(job)
    assert w.polling
    assert w.wait(WAIT) == "COMPLETED"
    assert not w.polling  # polling stops when the job has ended
    assert "COMPLETED" in w.state_label.value and widgets.STATE_COLOURS["COMPLETED"] in w.state_label.value
    assert "exit code 0:0" in w.state_label.value
    assert "<code>short</code>" in w.title.value
    assert "first line\nlast line" in w.output.value
    assert "node1" in w.nodes_label.value
    assert "time limit <b>0:30</b>" in w.time_label.value
    assert w.progress.bar_style == "success" and 0 < w.progress.value < 1
    assert w.cancel_button.disabled and w.cancel_button.description == "Finished"
    assert w.snapshot.done and w.snapshot.exit_code == "0:0"
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == f"JobWidget(job {job.id})"
    assert repr(w) == f"<JobWidget job {job.id}: COMPLETED>"


def test_widget_shows_what_a_gpu_jobs_gpus_did_or_why_it_cannot(workdir: Path) -> None:
    """Here (no GPU, no NVML) it says what it would read and why that is not there; a job
    without GPUs gets no GPU line."""
    gpu_job = JobWidget(submit(wrap="true", time="0:30", gres="gpu:1"))
    plain = JobWidget(submit(wrap="true", time="0:30"))
    assert gpu_job.wait(WAIT) == "COMPLETED" and plain.wait(WAIT) == "COMPLETED"
    assert gpu_job.gpus_label.value.startswith("GPUs: 1, utilisation and memory not recorded: sacct&#x27;s")
    assert "AccountingStorageTRES=gres/gpumem,gres/gpuutil" in gpu_job.gpus_label.value
    assert plain.gpus_label.value == ""


def test_widget_shows_running_then_cancel_button_cancels(workdir: Path) -> None:
    job = submit(wrap="echo started; sleep 120", time="5:00")
    w = JobWidget(job, poll=0.2)
    until(lambda: w.state == "RUNNING" and "started" in w.output.value, what="RUNNING with output")
    assert not w.cancel_button.disabled
    assert "RUNNING" in w.state_label.value and w.progress.bar_style == "info"
    w.cancel_button.click()
    assert w.wait(WAIT) == "CANCELLED"
    assert job.state == "CANCELLED"
    assert "scancel" in w.message.value
    assert "CANCELLED" in w.state_label.value and "exit code" not in w.state_label.value
    assert w.cancel_button.disabled


def test_widget_shows_why_a_job_waits_and_a_failure(workdir: Path) -> None:
    first = submit(wrap="until [ -e go ]; do sleep 0.05; done; exit 3", time="0:30")  # fails when let
    second = submit(wrap="echo never", time="0:30", dependency=f"afterok:{first.id}")
    w1, w2 = JobWidget(first, poll=0.2), JobWidget(second, poll=0.2)
    until(lambda: w2.state == "PENDING", what="PENDING")
    assert "(Dependency)" in w2.state_label.value and "none yet" in w2.nodes_label.value
    (workdir / "go").touch()
    assert w1.wait(WAIT) == "FAILED"
    assert "exit code 3:0" in w1.state_label.value and widgets.STATE_COLOURS["FAILED"] in w1.state_label.value
    assert w1.progress.bar_style == "danger"
    # afterok on a failed job: real Slurm leaves it pending (DependencyNeverSatisfied); stop watching
    time.sleep(0.5)
    if w2.state == "PENDING":
        w2.stop()
        second.cancel()
    else:
        w2.wait(WAIT)


def test_widget_for_an_unknown_job_reports_and_stops(workdir: Path) -> None:
    w = JobWidget(Job("987654"), poll=0.1)
    w.wait(WAIT)
    assert w.state == "UNKNOWN"
    assert "987654" in w.message.value and w.error


def test_array_job_snapshot(workdir: Path) -> None:
    job = submit(wrap="echo task $SLURM_ARRAY_TASK_ID", time="0:30", array="1-3")
    w = JobWidget(job, poll=0.2)
    assert w.wait(WAIT) == "COMPLETED"
    assert w.snapshot.is_array and w.snapshot.counts() == {"COMPLETED": 3}
    assert "3 COMPLETED" in w.state_label.value and "job array: 3 tasks" in w.output.value


def test_text_fallback_prints_the_final_state(workdir: Path, capsys) -> None:
    job = submit(wrap="echo text fallback output; sleep 1", time="0:30")
    result = watch(job)  # no Jupyter kernel here: plain text, blocking until the end
    assert isinstance(result, TextWatch) and result.state == "COMPLETED"
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"job {job.id}: ")
    assert any(line.startswith(f"job {job.id}: COMPLETED on node1") and "exit code 0:0" in line for line in lines)
    assert "text fallback output" in out
    assert repr(result) == f"<job {job.id}: COMPLETED>"


def test_text_fallback_without_ipywidgets_in_a_kernel(workdir: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(widgets, "in_jupyter", lambda: True)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets -> ImportError
    result = watch(submit(wrap="true", time="0:30"), timeout=WAIT)
    assert isinstance(result, TextWatch) and result.state == "COMPLETED"
    assert "COMPLETED" in capsys.readouterr().out


def test_watch_gives_a_widget_in_jupyter(workdir: Path, monkeypatch) -> None:
    monkeypatch.setattr(widgets, "in_jupyter", lambda: True)
    w = watch(submit(wrap="true", time="0:30"))
    assert isinstance(w, JobWidget)
    assert w.wait(WAIT) == "COMPLETED"
    with pytest.raises(ValueError, match="mode"):
        watch(w.job, mode="fancy")


def test_in_jupyter_is_false_here() -> None:
    assert widgets.in_jupyter() is False


def test_snapshot_of_a_running_job(workdir: Path) -> None:
    job = submit(wrap="sleep 30", time="1:00", nodes=2)
    try:
        until(lambda: snapshot(job).state == "RUNNING", what="RUNNING")
        snap = snapshot(job)
        assert snap.time_limit == 60 and snap.nodes == "node[1-2]" and not snap.done
        assert snap.elapsed is not None and snap.elapsed < 30
    finally:
        job.cancel()
    until(lambda: snapshot(job).done, what="done")
    assert snapshot(job).state == "CANCELLED"


def test_queue_widget_lists_and_cancels(workdir: Path, capsys) -> None:
    job = submit(wrap="sleep 120", time="5:00", job_name="queued-one")
    q = QueueWidget(poll=0.2, idle_stop=0.5)
    try:
        until(lambda: any(r.job_id == job.id and r.state == "RUNNING" for r in q.rows), what="job listed")
        assert "queued-one" in q.table.value and "RUNNING" in q.table.value
        assert job.id in q.choice.options and not q.cancel_button.disabled
        q.choice.value = job.id
        q.cancel_button.click()
        until(lambda: job.state == "CANCELLED", what="CANCELLED")
        until(lambda: not any(r.job_id == job.id and r.state == "RUNNING" for r in q.rows), what="queue refreshed")
        until(lambda: not q.polling or q.rows, timeout=10, what="polling stops once the queue is empty")
        assert q._repr_mimebundle_()["text/plain"].startswith("QueueWidget(user ")
    finally:
        q.close()
    assert watch_queue() is None  # text: squeue-like table
    out = capsys.readouterr().out
    assert out.startswith("JOBID") and "NODELIST(REASON)" in out


def test_format_queue_marks_pending_reasons() -> None:
    from hpcnb.jobs import QueueRow

    rows = [QueueRow("5", "debug", "me", "PENDING", 0, "1:00", 1, "", "Priority", "a"),
            QueueRow("4", "debug", "me", "RUNNING", 65, "1:00", 2, "node[1-2]", "None", "b")]
    text = format_queue(rows).splitlines()
    assert text[1].split() == ["5", "a", "debug", "PENDING", "0:00", "1:00", "1", "(Priority)"]
    assert text[2].split() == ["4", "b", "debug", "RUNNING", "1:05", "1:00", "2", "node[1-2]"]
