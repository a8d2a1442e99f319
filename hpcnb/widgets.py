"""Watch Slurm jobs from a notebook: a live job widget, a queue widget, and a text fallback.

::

    from hpcnb.jobs import submit
    from hpcnb.widgets import watch, QueueWidget

    job = submit("train.sh", time="5:00")
    watch(job)          # in Jupyter: a live widget (state, time, nodes, output, Cancel); returns at once
    QueueWidget()       # your jobs in the queue, refreshed while there are any

The widgets poll Slurm from a background thread (so the kernel stays free to run other
cells) through the job API and Slurm's own commands, the same on the local Slurm and a
real cluster, and stop polling when the job has ended. Outside Jupyter (a terminal, a
script, no ipywidgets) :func:`watch` prints the job's progress as text until it ends.
ipywidgets is imported only when a widget is built.
"""
from __future__ import annotations

import getpass
import html
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from hpcnb.jobs import FINISHED_STATES, Job, SlurmError, parse_elapsed

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
_ACTIVE_FIRST = ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "PENDING")


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
    """``65`` -> ``1:05``, ``3725`` -> ``1:02:05``, ``90061`` -> ``1-01:01:01``; None -> ``-``."""
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


@dataclass
class JobSnapshot:
    """What Slurm says about a job at one moment (one squeue call, or sacct once it has left the queue)."""

    job_id: str
    state: str = "UNKNOWN"
    states: dict[str, str] = field(default_factory=dict)  # per array task (one entry for a plain job)
    elapsed: int | None = None  # seconds
    time_limit: int | None = None  # seconds; None: unlimited or unknown
    nodes: str = ""  # Slurm's node list text, e.g. node[1-2]
    reason: str = ""
    exit_code: str = ""  # "0:0" once finished
    name: str = ""
    taken: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> bool:
        return bool(self.states) and all(s in FINISHED_STATES for s in self.states.values())

    @property
    def is_array(self) -> bool:
        return "_" not in self.job_id and any("_" in k for k in self.states)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.states.values():
            out[s] = out.get(s, 0) + 1
        return out


def _base_state(text: str) -> str:
    return text.strip().split(" ")[0].rstrip("+")


def _expand(ident: str) -> list[str]:
    match = re.fullmatch(r"(\d+)_\[([\d,\-]+)(?:%\d+)?\]", ident)
    if not match:
        return [ident]
    out = []
    for part in match.group(2).split(","):
        first, _, last = part.partition("-")
        out += [f"{match.group(1)}_{i}" for i in range(int(first), int(last or first) + 1)]
    return out


def _summary(states: Mapping[str, str]) -> str:
    values = list(states.values())
    if not values:
        return "UNKNOWN"
    active = [s for s in values if s not in FINISHED_STATES]
    if active:
        return next((s for s in _ACTIVE_FIRST if s in active), active[0])
    return next((s for s in values if s != "COMPLETED"), "COMPLETED")


def _limit(text: str) -> int | None:
    return parse_elapsed(text) if text.strip() not in ("", "UNLIMITED", "INVALID", "Partition_Limit") else None


def _slurm(args: list[str]) -> tuple[int, str, str]:
    from hpcnb.backend import run

    res = run(args, timeout=60)
    return res.returncode, res.stdout, res.stderr


def snapshot(job: Job) -> JobSnapshot:
    """The job's state, times and nodes from one squeue call (sacct once it has left the queue).

    Raises :class:`hpcnb.jobs.SlurmError` when neither knows the job.
    """
    snap = JobSnapshot(job.id)
    code, out, _ = _slurm(["squeue", "-h", "-r", "-j", job.id, "-o", "%i|%T|%M|%l|%N|%r|%j"])
    rows = [line.split("|", 6) for line in out.splitlines() if line.count("|") >= 6] if code == 0 else []
    if rows and any(_base_state(r[1]) not in FINISHED_STATES for r in rows):
        elapsed: list[int] = []
        nodes: list[str] = []
        for ident, state, used, limit, nodelist, reason, name in rows:
            for one in _expand(ident.strip()):
                snap.states[one] = _base_state(state)
            seconds = parse_elapsed(used)
            if seconds is not None:
                elapsed.append(seconds)
            if nodelist.strip() and nodelist.strip() != "(null)":
                nodes.append(nodelist.strip())
            snap.time_limit = _limit(limit)
            snap.name = name.strip()
            if reason.strip() and reason.strip() != "None":
                snap.reason = reason.strip()
        snap.elapsed = max(elapsed) if elapsed else None
        snap.nodes = ",".join(dict.fromkeys(nodes))
        snap.state = _summary(snap.states)
        return snap
    code, out, err = _slurm(["sacct", "-X", "-n", "-P", "-j", job.id, "--format",
                             "JobID,State,Elapsed,Timelimit,NodeList,ExitCode,JobName"])
    rows = [line.split("|", 6) for line in out.splitlines() if line.count("|") >= 6] if code == 0 else []
    if not rows:
        raise SlurmError(f"Slurm knows no job {job.id} (neither squeue nor sacct lists it)", err, code)
    elapsed, nodes, codes = [], [], []
    for ident, state, used, limit, nodelist, exit_code, name in rows:
        for one in _expand(ident.strip()):
            snap.states[one] = _base_state(state)
        seconds = parse_elapsed(used)
        if seconds is not None:
            elapsed.append(seconds)
        if nodelist.strip() and nodelist.strip() not in ("None assigned", "(null)"):
            nodes.append(nodelist.strip())
        codes.append(exit_code.strip())
        snap.time_limit = _limit(limit)
        snap.name = name.strip()
    snap.elapsed = max(elapsed) if elapsed else None
    snap.nodes = ",".join(dict.fromkeys(nodes))
    snap.exit_code = codes[0] if len(set(codes)) == 1 else ",".join(codes)
    snap.state = _summary(snap.states)
    return snap


def _tail(job: Job, snap: JobSnapshot, lines: int) -> str:
    """The output's last lines, or a short note where there is none to show."""
    if snap.is_array:
        return f"(job array: {len(snap.states)} tasks, each with its own output: job.array_tasks())"
    if snap.state == "PENDING" and not snap.nodes:
        return ""
    try:
        return job.tail(lines)
    except FileNotFoundError:
        return "" if not snap.done else "(the output file does not exist on this machine)"
    except (SlurmError, ValueError, OSError) as err:
        return f"({err})"


def _default_poll() -> tuple[float, float]:
    try:
        from hpcnb.backend import which_slurm

        local = which_slurm() == "local"
    except Exception:
        local = False
    return 0.25, (1.0 if local else 5.0)


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


# ------------------------------------------------------------------------------ polling

class _Poller:
    """A daemon thread calling ``step()`` until it returns True, ``stop()`` or too many errors."""

    def __init__(self, step: Callable[[], bool], first: float, cap: float, name: str) -> None:
        self._step, self._first, self._cap, self._name = step, first, cap, name
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval = self._first
        while not self._stop.is_set():
            if self._step():
                return
            self._wake.wait(interval)
            if self._wake.is_set():
                self._wake.clear()
                interval = self._first
            else:
                interval = min(interval * 1.5, self._cap)

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running


# --------------------------------------------------------------------------- JobWidget

class JobWidget:
    """A live view of one job: state (coloured), elapsed / time limit, nodes, output tail, Cancel.

    Display it (last expression of a cell, or ``display(w)``). A background thread polls Slurm
    (from every 0.25 s, slowing to 1 s on the local Slurm, 5 s on a real one; ``poll=`` fixes
    it) and stops once the job has ended. ``w.state`` is the latest state, ``w.wait()`` blocks
    until polling has stopped, ``w.cancel()`` (or the button) runs scancel.
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
        first, cap = _default_poll()
        self._poller = _Poller(self._step, poll or first, poll or cap, f"hpcnb-watch-{self.job.id}")

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
        self.cancel_button = w.Button(description="Cancel", button_style="danger", icon="stop",
                                      tooltip=f"scancel {self.job.id}", layout=w.Layout(width="110px"))
        self.cancel_button.add_class("hpcnb-job-cancel")
        self.cancel_button.on_click(lambda _button: self.cancel())
        header = w.HBox([self.title, self.state_label, self.cancel_button],
                        layout=w.Layout(align_items="center"))
        times = w.HBox([self.progress, self.time_label, self.nodes_label],
                       layout=w.Layout(align_items="center"))
        self.widget = w.VBox([header, times, self.output, self.message],
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
        """Start (or restart) polling."""
        self._poller.start()

    def stop(self) -> None:
        """Stop polling (the job keeps running)."""
        self._poller.stop()

    @property
    def polling(self) -> bool:
        return self._poller.running

    def wait(self, timeout: float | None = None) -> str:
        """Block until polling stopped (the job ended); return the state. TimeoutError otherwise."""
        if not self._poller.join(timeout):
            raise TimeoutError(f"job {self.job.id} still {self.state} after {timeout:g} s")
        return self.state

    def _step(self) -> bool:
        """One poll; True when there is nothing more to watch."""
        try:
            snap = snapshot(self.job)
        except SlurmError as err:
            self._failures += 1
            self.error = str(err)
            self.message.value = f'<span style="color:#cf222e">{html.escape(str(err))}</span>'
            return (self._failures >= 5 and self.snapshot is None) or self._failures >= 30
        self._failures = 0
        tail = _tail(self.job, snap, self.tail_lines)
        self._apply(snap, tail)
        return snap.done

    def refresh(self) -> JobSnapshot | None:
        """Poll once now (also done by the background thread)."""
        self._step()
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
        if not self._poller.running:
            self.start()
        self._poller.wake()
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
        first, cap = _default_poll()
        self._first, self._cap = poll or first, poll or cap

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout, flush=True)

    def run(self, timeout: float | None = None) -> str:
        """Print progress until the job ends (or ``timeout`` s: TimeoutError); return the final state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval, last_line, last_print, failures = self._first, "", 0.0, 0
        while True:
            try:
                snap = snapshot(self.job)
                failures = 0
            except SlurmError:
                failures += 1
                if failures >= 5:
                    raise
                time.sleep(interval)
                continue
            self.snapshot, self.state = snap, snap.state
            key = f"{snap.state}|{snap.nodes}|{snap.counts()}"
            now = time.monotonic()
            if key != last_line or (self.heartbeat and now - last_print >= self.heartbeat):
                self._print(f"job {self.job.id}: {_status_line(snap)}")
                last_line, last_print = key, now
            if snap.done:
                break
            if deadline is not None and now >= deadline:
                raise TimeoutError(f"job {self.job.id} still {snap.state} after {timeout:g} s")
            time.sleep(interval)
            interval = min(interval * 1.5, self._cap)
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


def _queue_rows(user: str | None) -> list[Any]:
    from hpcnb.jobs import queue

    return queue(user=user)


def format_queue(rows: list[Any]) -> str:
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

    Refreshes in the background every ``poll`` s (2 s on the local Slurm, 10 s on a real one)
    until the queue has been empty for ``idle_stop`` s; Refresh starts it again.
    """

    def __init__(self, user: str | None = None, *, poll: float | None = None, idle_stop: float = 60.0,
                 autostart: bool = True) -> None:
        import ipywidgets as w

        self.user = user or getpass.getuser()
        self.rows: list[Any] = []
        self.error = ""
        self.idle_stop = idle_stop
        self._empty_since: float | None = None
        _, cap = _default_poll()
        interval = poll or (2.0 if cap <= 1.0 else 10.0)
        self._poller = _Poller(self._step, interval, interval, f"hpcnb-queue-{self.user}")
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
            self._poller.start()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = f"QueueWidget(user {self.user})"
        return bundle

    def _restart(self) -> None:
        self._empty_since = None
        self.refresh()
        self._poller.start()

    def _step(self) -> bool:
        self.refresh()
        if self.rows:
            self._empty_since = None
            return False
        now = time.monotonic()
        self._empty_since = self._empty_since or now
        return now - self._empty_since >= self.idle_stop

    def refresh(self) -> list[Any]:
        """Ask squeue now and redraw."""
        try:
            rows = _queue_rows(self.user)
            self.error = ""
        except SlurmError as err:
            self.error = str(err)
            self.message.value = f'<span style="color:#cf222e">{html.escape(str(err))}</span>'
            return self.rows
        self.rows = rows
        self.table.value = self._html(rows)
        ids = [r.job_id for r in rows if r.state not in FINISHED_STATES]
        if list(self.choice.options) != ids:
            keep = self.choice.value if self.choice.value in ids else (ids[0] if ids else None)
            self.choice.options = ids
            self.choice.value = keep
        self.cancel_button.disabled = not ids
        return rows

    @staticmethod
    def _html(rows: list[Any]) -> str:
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
        self._poller.stop()

    @property
    def polling(self) -> bool:
        return self._poller.running

    def close(self) -> None:
        self.stop()
        self.widget.close()


def watch_queue(user: str | None = None, *, mode: str = "auto") -> QueueWidget | None:
    """Your jobs: a :class:`QueueWidget` in Jupyter, else the table printed once."""
    if mode == "widget" or (mode == "auto" and in_jupyter() and _widgets_available()):
        return QueueWidget(user)
    print(format_queue(_queue_rows(user or getpass.getuser())))
    return None
