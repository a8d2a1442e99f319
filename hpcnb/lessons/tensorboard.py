"""TensorBoard in the lessons: scalars written by rank 0, read back, and the board opened from the notebook.

A job writes with :func:`writer` (``torch.utils.tensorboard.SummaryWriter``, or ``None`` with one
line saying why where the site's Python has no ``tensorboard``); :func:`read_scalars` reads the
event files back (TensorBoard's own reader) so that a notebook can check and print them.

:func:`start` runs ``tensorboard`` beside the notebook's kernel, on 127.0.0.1 and a free port, and
returns a :class:`Board`, whose display is the way in from where the user sits:

* in JupyterLab with ``jupyter-server-proxy`` (a portal's JupyterHub or Open OnDemand, ``make lab``):
  the server's ``/proxy/<port>/``, below the server's own prefix (``JUPYTERHUB_SERVICE_PREFIX``),
  so the board opens in the browser's tab through the same login as the notebook;
* without it: the SSH tunnel lesson 5 teaches, to that port on this host.

The board ends with the kernel (``PR_SET_PDEATHSIG``) or with :meth:`Board.stop`.
"""
from __future__ import annotations

import atexit
import ctypes
import html
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

START_TIMEOUT_S = 90.0
NOT_INSTALLED = "tensorboard is not installed in this Python (pip install tensorboard): no scalars written"


def installed() -> bool:
    """Whether this Python has tensorboard (the board and the writer need it)."""
    return importlib.util.find_spec("tensorboard") is not None


def writer(logdir: str | os.PathLike, **kw: Any):
    """A ``SummaryWriter`` for ``logdir``, or ``None`` (saying why on stdout) without ``tensorboard``."""
    if not installed():
        print(NOT_INSTALLED, flush=True)
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(logdir), **kw)


def read_scalars(logdir: str | os.PathLike) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Every run below ``logdir`` (a folder holding event files) -> tag -> ``[(step, value), ...]``.

    A run written by several processes into one folder shows every point of each of them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = Path(logdir)
    runs: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for folder in sorted({p.parent for p in root.rglob("events.out.tfevents.*")}):
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        events.Reload()
        name = folder.relative_to(root).as_posix()
        runs[name] = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    return runs


def event_files(logdir: str | os.PathLike) -> dict[str, int]:
    """Run folder -> number of event files in it: one per process that wrote there."""
    root = Path(logdir)
    counts: dict[str, int] = {}
    for path in root.rglob("events.out.tfevents.*"):
        run = path.parent.relative_to(root).as_posix()
        counts[run] = counts.get(run, 0) + 1
    return dict(sorted(counts.items()))


def summary(logdir: str | os.PathLike) -> str:
    """One line per run and tag: points, first and last value; the event files per run."""
    files, runs = event_files(logdir), read_scalars(logdir)
    width = max((len(tag) for tags in runs.values() for tag in tags), default=0)
    lines = []
    for run, tags in runs.items():
        lines.append(f"{run}: {files.get(run, 0)} event file(s)")
        for tag, points in tags.items():
            lines.append(f"  {tag:{width}} {len(points):4} points, step {points[0][0]}: {points[0][1]:.4f}"
                         f" ... step {points[-1][0]}: {points[-1][1]:.4f}")
    return "\n".join(lines) or f"no event files below {logdir}"


SERVING = re.compile(rb"TensorBoard \S+ at http://[^/]+:(\d+)/")  # its line once it holds its port


def _served_port(log: IO[bytes]) -> int | None:
    """The port the board says it serves on (``--port 0``: the one the system gave it), or None yet.
    pread: the board writes through the same file offset, which a seek here would move."""
    found = SERVING.search(os.pread(log.fileno(), 1 << 16, 0))
    return int(found.group(1)) if found else None


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the kernel that started it ends (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def proxy_available() -> bool:
    """Whether this Python has ``jupyter-server-proxy`` (the notebook server's ``/proxy/<port>/``)."""
    return importlib.util.find_spec("jupyter_server_proxy") is not None


def server_prefix() -> str:
    """The notebook server's URL prefix: a portal's ``/user/NAME/``, else ``/``."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
    return prefix if prefix.endswith("/") else prefix + "/"


@dataclass
class Board:
    """A running ``tensorboard`` reading ``logdir`` on 127.0.0.1:``port``."""

    logdir: Path
    port: int
    process: subprocess.Popen = field(repr=False)

    @property
    def url(self) -> str:
        """The board as this host reaches it."""
        return f"http://127.0.0.1:{self.port}/"

    @property
    def proxy_path(self) -> str:
        """The board through the notebook server (``jupyter-server-proxy``)."""
        return f"{server_prefix()}proxy/{self.port}/"

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """End the board (SIGTERM, then SIGKILL after ``timeout``)."""
        if not self.running():
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)

    def how_to_open(self) -> str:
        """Where to open the board from, in words."""
        if proxy_available():
            return (f"TensorBoard reads {self.logdir} on this host, port {self.port}. In this JupyterLab, "
                    f"open {self.proxy_path} (jupyter-server-proxy: the same login as the notebook).")
        host = socket.gethostname()
        return (f"TensorBoard reads {self.logdir} on {host}, port {self.port} (127.0.0.1 only). From your "
                f"laptop: ssh -N -L 127.0.0.1:{self.port}:localhost:{self.port} {host} (through the login "
                f"node with -J, as in lesson 5), then open http://127.0.0.1:{self.port}/")

    def __repr__(self) -> str:
        return self.how_to_open()

    def _repr_html_(self) -> str:
        text = html.escape(self.how_to_open())
        if not proxy_available():
            return f"<p>{text}</p>"
        link = html.escape(self.proxy_path)
        return f'<p>{text}</p><p><a href="{link}" target="_blank">Open TensorBoard</a></p>'


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugins_listing", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start(logdir: str | os.PathLike, *, port: int | None = None, timeout: float = START_TIMEOUT_S) -> Board:
    """Run ``tensorboard --logdir LOGDIR`` on 127.0.0.1 beside this kernel; wait until it answers.

    Raises ``RuntimeError`` with the board's own output if it exits or does not answer in ``timeout`` s."""
    folder = Path(logdir).resolve()
    why = _cannot_start(folder)
    if why:
        raise (FileNotFoundError if installed() else RuntimeError)(why)
    log = tempfile.TemporaryFile()  # the board's output: its port, and why if it fails to start
    # port 0: the system gives the board a free port as it binds (one picked here first could be
    # taken by another process before the board binds it)
    process = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(folder), "--host", "127.0.0.1",
         "--port", str(port or 0), "--reload_interval", "5"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=_die_with_parent)
    board = Board(folder, port or 0, process)
    atexit.register(board.stop)
    deadline = time.monotonic() + timeout
    while not (board.port and _answers(board.port)):
        if not board.running() or time.monotonic() > deadline:
            board.stop()
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-8:]
            why = f"exited with {process.returncode}" if process.returncode else f"did not answer in {timeout:.0f} s"
            raise RuntimeError(f"tensorboard on port {board.port or '0'} {why}:\n" + "\n".join(tail))
        board.port = board.port or _served_port(log) or 0
        time.sleep(0.2)
    log.close()
    return board


def _cannot_start(folder: Path) -> str | None:
    """Why no board can run for ``folder`` here, or None."""
    if not installed():
        return "tensorboard is not installed in this kernel's Python (pip install tensorboard): no board here"
    if not folder.is_dir():
        return f"no such folder: {folder}: the job wrote no event files (see its output)"
    return None


def show(logdir: str | os.PathLike) -> Board | str:
    """:func:`start`, or where the board cannot run here, a line saying why (the lesson goes on)."""
    return _cannot_start(Path(logdir).resolve()) or start(logdir)
