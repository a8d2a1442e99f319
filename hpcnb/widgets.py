"""Watch Slurm jobs from a notebook: a live job widget, a queue widget, and a text fallback.

::

    from hpcnb.jobs import submit
    from hpcnb.widgets import watch, QueueWidget

    job = submit("train.sh", time="5:00")
    watch(job)          # in Jupyter: a live widget (state, time, nodes, output, Cancel); returns at once
    QueueWidget()       # your jobs in the queue, refreshed while there are any

The widgets follow their jobs through the job API: the kernel's one poller
(:mod:`hpcnb.poller`) asks Slurm for every widget, wait and job at once from a background
thread (so the kernel stays free to run other cells), the same on the local Slurm and a real
cluster, and a widget stops following once its job has ended. Outside Jupyter (a terminal,
a script, no ipywidgets) :func:`watch` prints the job's progress as text until it ends.
ipywidgets is imported only when a widget is built.
"""
from __future__ import annotations

import getpass
import html
import sys
import threading
import time
from typing import IO, Any

from hpcnb.jobs import FINISHED_STATES, Job, JobSnapshot, QueueRow, SlurmError, follow_queue, queue
from hpcnb.poller import Answer, Subscription
from hpcnb.slurm.times import format_squeue_time

__all__ = [
    "STATE_COLOURS",
    "JobSnapshot",
    "JobWidget",
    "QueueWidget",
    "TextWatch",
    "in_jupyter",
    "snapshot",
    "watch",
    "watch_queue",
]

#: Colour per Slurm state (others: grey).
STATE_COLOURS: dict[str, str] = {
    "PENDING": "#9a6700", "CONFIGURING": "#9a6700", "REQUEUED": "#bc4c00", "RESIZING": "#9a6700",
    "SUSPENDED": "#bc4c00", "PREEMPTED": "#bc4c00", "STOPPED": "#bc4c00", "SIGNALING": "#0969da",
    "RUNNING": "#0969da", "COMPLETING": "#0969da", "STAGE_OUT": "#0969da",
    "COMPLETED": "#1a7f37",
    "FAILED": "#cf222e", "TIMEOUT": "#cf222e", "OUT_OF_MEMORY": "#cf222e", "NODE_FAIL": "#cf222e",
    "BOOT_FAIL": "#cf222e", "DEADLINE": "#cf222e",
    "CANCELLED": "#57606a",
}
_BAR_STYLES = {"#1a7f37": "success", "#cf222e": "danger", "#9a6700": "warning", "#bc4c00": "warning"}


def colour(state: str) -> str:
    return STATE_COLOURS.get(state, "#57606a")


def in_jupyter() -> bool:
    """True inside a Jupyter kernel (where widgets can be shown), False in a terminal or script."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def _widgets_available() -> bool:
    import importlib

    try:
        importlib.import_module("ipywidgets")
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------ snapshots

def format_seconds(seconds: int | None) -> str:
    """As squeue prints times: ``65`` -> ``1:05``, ``3725`` -> ``1:02:05``, ``90061`` -> ``1-01:01:01``; None -> ``-``."""
    return "-" if seconds is None else format_squeue_time(seconds)


def snapshot(job: Job | int | str) -> JobSnapshot:
    """The job's state, times and nodes (:meth:`hpcnb.jobs.Job.snapshot`, from the kernel's poller).

    Raises :class:`hpcnb.jobs.SlurmError` when Slurm knows no such job.
    """
    return _as_job(job).snapshot()


def _tail(job: Job, snap: JobSnapshot, lines: int) -> str:
    """The output's last lines, or a short note where there is none to show."""
    if snap.is_array:
        return f"(job array: {len(snap.states)} tasks, each with its own output: job.array_tasks())"
    if snap.state == "PENDING" and not snap.nodes:
        return ""
    try:
        if not job.output_path.exists():
            return "" if not snap.done else "(the output file does not exist on this machine)"
        return job.tail(lines)
    except (SlurmError, ValueError, OSError) as err:
        return f"({err})"


def _as_job(job: Job | int | str) -> Job:
    return job if isinstance(job, Job) else Job(job)


def _status_line(snap: JobSnapshot) -> str:
    """``RUNNING on node1, 0:05 of 0:30`` (text fallback)."""
    if snap.is_array:
        text = ", ".join(f"{n} {s}" for s, n in snap.counts().items())
    else:
        text = snap.state
    if snap.state == "PENDING" and snap.reason:
        text += f" ({snap.reason})"
    if snap.nodes and snap.state != "PENDING":
        text += f" on {snap.nodes}"
    if snap.elapsed is not None and snap.state != "PENDING":
        limit = f" of {format_seconds(snap.time_limit)}" if snap.time_limit else ""
        text += f", {format_seconds(snap.elapsed)}{limit}"
    if snap.done and snap.exit_code:
        text += f", exit code {snap.exit_code}"
    return text


# --------------------------------------------------------------------------- JobWidget

class JobWidget:
    """A live view of one job: state (coloured), elapsed / time limit, nodes, output tail, Cancel.

    Display it (last expression of a cell, or ``display(w)``). It follows the job through the
    kernel's one poller (:mod:`hpcnb.poller`: from 0.05 s up to 1 s apart on the local Slurm,
    2 s up to 10 s on a real one; ``poll=`` fixes it) until the job has ended. ``w.state`` is
    the latest state, ``w.wait()`` blocks until it has stopped following, ``w.cancel()`` (or the
    button) runs scancel.
    """

    def __init__(self, job: Job | int | str, *, poll: float | None = None, tail_lines: int = 15,
                 autostart: bool = True) -> None:
        import ipywidgets as w

        self.job = _as_job(job)
        self.tail_lines = tail_lines
        self.state = "UNKNOWN"
        self.snapshot: JobSnapshot | None = None
        self.error = ""
        self._lock = threading.Lock()
        self._failures = 0
        self._poll = poll
        self._updates: Subscription | None = None
        self._stopped = threading.Event()

        self.title = w.HTML(f"<b>Slurm job {html.escape(self.job.id)}</b>", layout=w.Layout(margin="0 12px 0 0"))
        self.state_label = w.HTML(self._badge("UNKNOWN"), layout=w.Layout(margin="0 12px 0 0"))
        self.state_label.add_class("hpcnb-job-state")
        self.time_label = w.HTML("", layout=w.Layout(margin="0 12px 0 0"))
        self.time_label.add_class("hpcnb-job-time")
        self.progress = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(width="220px", margin="0 12px 0 0"))
        self.nodes_label = w.HTML("")
        self.nodes_label.add_class("hpcnb-job-nodes")
        self.output = w.HTML(self._pre(""))
        self.output.add_class("hpcnb-job-tail")
        self.message = w.HTML("")
        self.gpus_label = w.HTML("")  # once the job has ended: what its GPUs did (Job.efficiency)
        self.gpus_label.add_class("hpcnb-job-gpus")
        self.cancel_button = w.Button(description="Cancel", button_style="danger", icon="stop",
                                      tooltip=f"scancel {self.job.id}", layout=w.Layout(width="110px"))
        self.cancel_button.add_class("hpcnb-job-cancel")
        self.cancel_button.on_click(lambda _button: self.cancel())
        header = w.HBox([self.title, self.state_label, self.cancel_button],
                        layout=w.Layout(align_items="center"))
        times = w.HBox([self.progress, self.time_label, self.nodes_label],
                       layout=w.Layout(align_items="center"))
        self.widget = w.VBox([header, times, self.output, self.gpus_label, self.message],
                             layout=w.Layout(border="1px solid #d0d7de", padding="6px", max_width="900px"))
        self.widget.add_class("hpcnb-job-widget")
        if autostart:
            self.start()

    # -- display ------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = f"JobWidget(job {self.job.id})"
        return bundle

    def __repr__(self) -> str:
        return f"<JobWidget job {self.job.id}: {self.state}>"

    @staticmethod
    def _badge(state: str, extra: str = "") -> str:
        return (f'<span style="background:{colour(state)};color:white;border-radius:4px;'
                f'padding:2px 8px;font-weight:bold;font-family:monospace">{html.escape(state)}</span>'
                f"{html.escape(extra)}")

    @staticmethod
    def _pre(text: str) -> str:
        body = html.escape(text.rstrip("\n")) if text.strip() else '<span style="color:#8c959f">(no output yet)</span>'
        return ('<pre style="max-height:16em;overflow:auto;margin:4px 0;padding:4px 6px;'
                f'background:#f6f8fa;font-size:12px;line-height:1.3">{body}</pre>')

    # -- polling ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or restart) following the job."""
        if self.polling:
            return
        self._stopped.clear()
        self._updates = self.job.follow(self._on_answer, poll=self._poll)

    def stop(self) -> None:
        """Stop following (the job keeps running)."""
        if self._updates is not None:
            self._updates.close()
        self._stopped.set()

    @property
    def polling(self) -> bool:
        return self._updates is not None and not self._updates.closed

    def wait(self, timeout: float | None = None) -> str:
        """Block until it stopped following (the job ended); return the state. TimeoutError otherwise."""
        if not self._stopped.wait(timeout):
            raise TimeoutError(f"job {self.job.id} still {self.state} after {timeout:g} s")
        return self.state

    def _on_answer(self, answer: Answer) -> None:
        """One poll's word on the job (in the poller's thread); stops following once it has ended."""
        if answer.error is not None:
            self._show_error(answer.error)
            if (self._failures >= 5 and self.snapshot is None) or self._failures >= 30:
                self.stop()
            return
        self._failures = 0
        self._apply(answer.value, _tail(self.job, answer.value, self.tail_lines))
        if answer.value.done:
            self._show_gpus()
            self.stop()

    def _show_gpus(self) -> None:
        """What the ended job's GPUs did (sacct's gres/gpuutil, gres/gpumem), or why that is unknown."""
        if self.snapshot is None or self.snapshot.is_array:
            return
        try:
            lines = self.job.efficiency(settle=0).gpu_lines()
        except (SlurmError, ValueError):
            return  # no accounting for it: the state above says what is known
        self.gpus_label.value = "<br>".join(html.escape(line) for line in lines)

    def _show_error(self, err: BaseException) -> None:
        self._failures += 1
        self.error = str(err)
        self.message.value = f'<span style="color:#cf222e">{html.escape(str(err))}</span>'

    def refresh(self) -> JobSnapshot | None:
        """Ask now (also done whenever the poller polls)."""
        try:
            snap = self.job.snapshot()
        except SlurmError as err:
            self._show_error(err)
            return self.snapshot
        self._apply(snap, _tail(self.job, snap, self.tail_lines))
        return self.snapshot

    def _apply(self, snap: JobSnapshot, tail: str) -> None:
        with self._lock:
            self.snapshot = snap
            if snap.name:
                self.title.value = (f"<b>Slurm job {html.escape(snap.job_id)}</b> "
                                    f"<code>{html.escape(snap.name)}</code>")
            extra = ""
            if snap.is_array:
                extra = "  " + ", ".join(f"{n} {s}" for s, n in snap.counts().items())
            elif snap.state == "PENDING" and snap.reason:
                extra = f"  ({snap.reason})"
            elif snap.done and snap.exit_code and snap.state != "CANCELLED":
                extra = f"  exit code {snap.exit_code}"
            self.state_label.value = self._badge(snap.state, extra)
            limit = format_seconds(snap.time_limit) if snap.time_limit else "no limit"
            self.time_label.value = (f"elapsed <b>{format_seconds(snap.elapsed or 0)}</b> / "
                                     f"time limit <b>{limit}</b>")
            if snap.time_limit:
                self.progress.value = min(1.0, (snap.elapsed or 0) / snap.time_limit)
            elif snap.done:
                self.progress.value = 1.0
            self.progress.bar_style = _BAR_STYLES.get(colour(snap.state), "info")
            self.nodes_label.value = (f"nodes <code>{html.escape(snap.nodes)}</code>" if snap.nodes
                                      else "nodes <i>none yet</i>")
            self.output.value = self._pre(tail)
            if snap.done:
                self.cancel_button.disabled = True
                self.cancel_button.description = "Finished"
                self.cancel_button.icon = "check"
                self.cancel_button.button_style = ""
            self.error = ""
            if not self.message.value.startswith("<b>"):
                self.message.value = ""
            self.state = snap.state

    # -- control ------------------------------------------------------------------------------
    def cancel(self) -> bool:
        """scancel the job; False if it had already finished."""
        self.cancel_button.disabled = True
        try:
            cancelled = self.job.cancel()
        except SlurmError as err:
            self.cancel_button.disabled = False
            self.message.value = f'<span style="color:#cf222e">{html.escape(str(err))}</span>'
            return False
        self.message.value = (f"<b>scancel {html.escape(self.job.id)}</b> sent" if cancelled
                              else "<b>the job had already finished</b>")
        self.start()  # the poller hears of the change (Job.cancel) and asks again soon
        return cancelled

    def close(self) -> None:
        """Stop polling and remove the widget from the page."""
        self.stop()
        self.widget.close()


# ---------------------------------------------------------------------------- text fallback

class TextWatch:
    """Plain-text progress of a job (terminals, scripts, no ipywidgets): a line per change."""

    def __init__(self, job: Job | int | str, *, poll: float | None = None, tail_lines: int = 15,
                 stream: IO[str] | None = None, heartbeat: float = 30.0) -> None:
        self.job = _as_job(job)
        self.tail_lines = tail_lines
        self.stream = stream
        self.heartbeat = heartbeat
        self.state = "UNKNOWN"
        self.snapshot: JobSnapshot | None = None
        self._poll = poll

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout, flush=True)

    def run(self, timeout: float | None = None) -> str:
        """Print progress until the job ends (or ``timeout`` s: TimeoutError); return the final state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_line, last_print, failures, seen = "", 0.0, 0, []
        snap = None
        with self.job.follow(poll=self._poll) as updates:
            while snap is None or not snap.done:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"job {self.job.id} still {self.state} after {timeout:g} s "
                                       f"(seen: {', '.join(seen) or 'nothing'})")
                answer = updates.next(timeout=left)
                if answer is None:
                    continue
                if answer.error is not None:
                    failures += 1
                    if failures >= 5:
                        raise answer.error
                    continue
                failures, snap = 0, answer.value
                self.snapshot, self.state = snap, snap.state
                seen += [] if snap.state in seen else [snap.state]
                key = f"{snap.state}|{snap.nodes}|{snap.counts()}"
                now = time.monotonic()
                if key != last_line or (self.heartbeat and now - last_print >= self.heartbeat):
                    self._print(f"job {self.job.id}: {_status_line(snap)}")
                    last_line, last_print = key, now
        tail = _tail(self.job, snap, self.tail_lines)
        if tail.strip():
            self._print(f"--- last lines of job {self.job.id}'s output ---\n{tail.rstrip()}")
        return self.state

    def __repr__(self) -> str:
        return f"<job {self.job.id}: {self.state}>"


def watch(job: Job | int | str, *, poll: float | None = None, tail_lines: int = 15, mode: str = "auto",
          timeout: float | None = None) -> JobWidget | TextWatch:
    """Follow a job: a live :class:`JobWidget` in Jupyter (returned at once; display it), or
    printed progress elsewhere (blocks until the job ends; ``timeout`` s at most).

    ``mode``: ``"auto"`` (widget when running in a Jupyter kernel with ipywidgets), ``"widget"``
    or ``"text"``.
    """
    if mode not in ("auto", "widget", "text"):
        raise ValueError("watch(mode=...): use 'auto', 'widget' or 'text'")
    if mode == "widget" or (mode == "auto" and in_jupyter() and _widgets_available()):
        return JobWidget(job, poll=poll, tail_lines=tail_lines)
    text = TextWatch(job, poll=poll, tail_lines=tail_lines)
    text.run(timeout=timeout)
    return text


# ---------------------------------------------------------------------------- QueueWidget

_QUEUE_COLUMNS = ("JOBID", "NAME", "PARTITION", "STATE", "TIME", "TIME_LIMIT", "NODES", "NODELIST(REASON)")


def format_queue(rows: list[QueueRow]) -> str:
    """squeue-like text table of :class:`hpcnb.jobs.QueueRow`."""
    table = [_QUEUE_COLUMNS] + [
        (r.job_id, r.name, r.partition, r.state, format_seconds(r.time), r.time_limit, str(r.nodes),
         r.nodelist if r.state not in ("PENDING",) else f"({r.reason})")
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(_QUEUE_COLUMNS))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


class QueueWidget:
    """Your jobs in the queue (``squeue -u $USER``): a coloured table, Refresh, and Cancel for one job.

    Follows the queue through the kernel's one poller (:mod:`hpcnb.poller`; ``poll=`` fixes the
    seconds between polls) until the queue has been empty for ``idle_stop`` s; Refresh starts it again.
    """

    def __init__(self, user: str | None = None, *, poll: float | None = None, idle_stop: float = 60.0,
                 autostart: bool = True) -> None:
        import ipywidgets as w

        self.user = user or getpass.getuser()
        self.rows: list[QueueRow] = []
        self.error = ""
        self.idle_stop = idle_stop
        self._empty_since: float | None = None
        self._poll = poll
        self._updates: Subscription | None = None
        self._lock = threading.Lock()
        self.title = w.HTML(f"<b>Jobs of {html.escape(self.user)}</b>", layout=w.Layout(margin="0 12px 0 0"))
        self.table = w.HTML("")
        self.table.add_class("hpcnb-queue-table")
        self.refresh_button = w.Button(description="Refresh", icon="refresh",
                                       layout=w.Layout(width="110px", margin="0 12px 0 0"))
        self.refresh_button.on_click(lambda _b: self._restart())
        self.choice = w.Dropdown(options=[], description="job", layout=w.Layout(width="200px"))
        self.cancel_button = w.Button(description="Cancel job", button_style="danger", icon="stop",
                                      layout=w.Layout(width="120px"))
        self.cancel_button.on_click(lambda _b: self.cancel(self.choice.value) if self.choice.value else None)
        self.message = w.HTML("")
        self.widget = w.VBox([w.HBox([self.title, self.refresh_button, self.choice, self.cancel_button],
                                     layout=w.Layout(align_items="center")),
                              self.table, self.message])
        self.widget.add_class("hpcnb-queue-widget")
        self.refresh()
        if autostart:
            self.start()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = f"QueueWidget(user {self.user})"
        return bundle

    def start(self) -> None:
        """Start (or restart) following the queue."""
        self._empty_since = None
        if not self.polling:
            self._updates = follow_queue(self.user, self._on_answer, poll=self._poll)

    def _restart(self) -> None:
        self.refresh()
        self.start()

    def _on_answer(self, answer: Answer) -> None:
        """One poll's rows (in the poller's thread); stops after ``idle_stop`` s of an empty queue."""
        if answer.error is not None:
            self._show(error=answer.error)
            return
        self._show(rows=answer.value)
        if self.rows:
            self._empty_since = None
            return
        now = time.monotonic()
        self._empty_since = self._empty_since or now
        if now - self._empty_since >= self.idle_stop:
            self.stop()

    def refresh(self) -> list[QueueRow]:
        """Ask squeue now and redraw."""
        try:
            self._show(rows=queue(self.user))
        except SlurmError as err:
            self._show(error=err)
        return self.rows

    def _show(self, rows: list[QueueRow] | None = None, error: BaseException | None = None) -> None:
        with self._lock:
            if error is not None:
                self.error = str(error)
                self.message.value = f'<span style="color:#cf222e">{html.escape(str(error))}</span>'
                return
            self.error = ""
            self.rows = rows or []
            self.table.value = self._html(self.rows)
            ids = [r.job_id for r in self.rows if r.state not in FINISHED_STATES]
            if list(self.choice.options) != ids:
                keep = self.choice.value if self.choice.value in ids else (ids[0] if ids else None)
                self.choice.options = ids
                self.choice.value = keep
            self.cancel_button.disabled = not ids

    @staticmethod
    def _html(rows: list[QueueRow]) -> str:
        if not rows:
            return '<i style="color:#57606a">no jobs in the queue</i>'
        head = "".join(f'<th style="text-align:left;padding:2px 8px">{c}</th>' for c in _QUEUE_COLUMNS)
        body = []
        for r in rows:
            where = r.nodelist if r.state != "PENDING" else f"({r.reason})"
            cells = [r.job_id, r.name, r.partition, None, format_seconds(r.time), r.time_limit, str(r.nodes), where]
            tds = []
            for value in cells:
                if value is None:
                    tds.append(f'<td style="padding:2px 8px;color:{colour(r.state)};font-weight:bold">'
                               f"{html.escape(r.state)}</td>")
                else:
                    tds.append(f'<td style="padding:2px 8px">{html.escape(str(value))}</td>')
            body.append("<tr>" + "".join(tds) + "</tr>")
        return ('<table style="font-family:monospace;font-size:12px;border-collapse:collapse">'
                f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")

    def cancel(self, job_id: str) -> bool:
        try:
            done = Job(job_id).cancel()
        except SlurmError as err:
            self.message.value = f'<span style="color:#cf222e">{html.escape(str(err))}</span>'
            return False
        self.message.value = f"<b>scancel {html.escape(job_id)}</b> sent" if done else "already finished"
        self._restart()
        return done

    def stop(self) -> None:
        """Stop following the queue."""
        if self._updates is not None:
            self._updates.close()

    @property
    def polling(self) -> bool:
        return self._updates is not None and not self._updates.closed

    def close(self) -> None:
        self.stop()
        self.widget.close()


def watch_queue(user: str | None = None, *, mode: str = "auto") -> QueueWidget | None:
    """Your jobs: a :class:`QueueWidget` in Jupyter, else the table printed once."""
    if mode == "widget" or (mode == "auto" and in_jupyter() and _widgets_available()):
        return QueueWidget(user)
    print(format_queue(queue(user or getpass.getuser())))
    return None
