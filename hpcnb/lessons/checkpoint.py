"""Lesson 12 (checkpointing, preemption): checkpoints that survive a kill at any moment, and
training jobs that survive preemption.

The pieces a long training run needs on a cluster:

* :func:`atomic_save` — ``torch.save`` to a temporary file in the same folder, flushed to disk,
  then renamed over the target. A job killed mid-write (time limit, preemption, node failure)
  leaves either the previous checkpoint or the new one, never a truncated file.
* :class:`Checkpointer` — numbered checkpoints ``ckpt-00000120.pt`` in one folder (the newest
  ``keep`` are kept); :meth:`Checkpointer.save` stores the step, the model, the optimizer and the
  random-number state, :meth:`Checkpointer.restore` puts them back and returns the step to go on
  from (0 for a fresh start).
* :func:`latest_checkpoint` / :func:`list_checkpoints` / :func:`load_checkpoint`.
* :class:`SignalGuard` — catches ``SIGUSR1`` (what ``#SBATCH --signal=B:USR1@60`` sends a minute
  before the time limit) and ``SIGTERM`` (what Slurm sends on preemption, ``scancel`` and at the
  limit). The handler only raises a flag; the training loop checks it between steps, saves, and
  calls :meth:`SignalGuard.finish`, which asks Slurm to requeue the job (``scontrol requeue
  $SLURM_JOB_ID``) after ``SIGUSR1`` and just exits after ``SIGTERM`` (Slurm requeues a
  preempted ``--requeue`` job itself).

A job-side loop::

    ck = Checkpointer("ckpt")
    start = ck.restore(model, optimizer)          # 0, or the step after the last checkpoint
    guard = SignalGuard()                         # SIGUSR1 and SIGTERM raise guard.triggered
    for step in range(start, total):
        train_step(step)
        if guard.triggered:
            ck.save(step + 1, model, optimizer)
            guard.finish()                        # requeue after SIGUSR1, then exit
    ck.save(total, model, optimizer)

``import hpcnb.lessons.checkpoint`` does not import torch; the functions that need it do.
"""
from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "measure_startup", "preempt", "requeue_demo_timing",
    "CHECKPOINT_NAME", "Checkpointer", "SignalGuard", "atomic_save", "latest_checkpoint",
    "list_checkpoints", "load_checkpoint", "requeue_job", "restart_count",
]

#: File name of the checkpoint taken after ``step`` steps.
CHECKPOINT_NAME = "ckpt-{step:08d}.pt"
_NAME_RE = re.compile(r"ckpt-(\d+)\.pt")
_TMP_MARK = ".tmp-"


# ----------------------------------------------------------------------------- saving

def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename is still atomic
    finally:
        os.close(fd)


def atomic_save(obj: Any, path: str | os.PathLike[str], *, fsync: bool = True) -> Path:
    """Save ``obj`` with ``torch.save`` so that ``path`` is never left half-written.

    The data goes to ``.<name>.tmp-<pid>`` in the same folder (same filesystem, so the rename is
    atomic), is flushed to disk (``fsync``), and then ``os.replace`` puts it in place. Whoever
    reads ``path`` — the next run of the job, after any kill — sees the old file or the new one.
    """
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{_TMP_MARK}{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        _fsync_dir(path.parent)
    return path


def _remove_stale_tmp(folder: Path) -> None:
    """Temporary files left by a process killed mid-write (their pid no longer runs)."""
    for tmp in folder.glob(f".*{_TMP_MARK}*"):
        pid = tmp.name.rsplit(_TMP_MARK, 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------- finding

def list_checkpoints(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(step, path)`` of every finished checkpoint in ``directory``, oldest first.

    Only names of the form ``ckpt-<step>.pt`` count; temporary files of an interrupted save
    (``.ckpt-*.tmp-<pid>``) are never listed.
    """
    folder = Path(directory)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _NAME_RE.fullmatch(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The checkpoint with the highest step in ``directory``, or None when there is none."""
    found = list_checkpoints(directory)
    return found[-1][1] if found else None


def load_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """Load one checkpoint (a dict) onto ``map_location`` (CPU by default)."""
    import torch

    return torch.load(Path(path), map_location=map_location, weights_only=False)


# ------------------------------------------------------------------------ Checkpointer

class Checkpointer:
    """Numbered, atomically written checkpoints of a training run in one folder.

    ``save(step, model, optimizer, **extra)`` writes ``ckpt-<step>.pt`` holding the step, the
    model's and optimizer's state dicts, torch's random-number state and any ``extra`` values
    (loss, epoch, sampler position ...), and deletes all but the newest ``keep`` checkpoints.
    ``restore(model, optimizer)`` loads the newest one into them and returns its step, or 0
    when the folder has none (a fresh start). ``extra`` of the restored checkpoint is in
    :attr:`restored_extra`, its path in :attr:`restored_from`.
    """

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"Checkpointer(keep={keep}): keep at least one checkpoint")
        self.directory = Path(directory)
        self.keep = keep
        self.restored_from: Path | None = None
        self.restored_extra: dict[str, Any] = {}

    def path_for(self, step: int) -> Path:
        return self.directory / CHECKPOINT_NAME.format(step=step)

    @property
    def latest(self) -> Path | None:
        return latest_checkpoint(self.directory)

    def save(self, step: int, model: Any, optimizer: Any = None, **extra: Any) -> Path:
        import torch

        if step < 0:
            raise ValueError(f"save(step={step}): the step is the number of steps done, >= 0")
        module = getattr(model, "module", model)  # a DDP wrapper saves its inner model
        state = {
            "step": int(step),
            "model": module.state_dict(),
            "optimizer": None if optimizer is None else optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "extra": extra,
        }
        path = atomic_save(state, self.path_for(step))
        _remove_stale_tmp(self.directory)
        for _, old in list_checkpoints(self.directory)[:-self.keep]:
            old.unlink(missing_ok=True)
        return path

    def restore(self, model: Any, optimizer: Any = None, map_location: Any = "cpu") -> int:
        import torch

        path = self.latest
        if path is None:
            self.restored_from, self.restored_extra = None, {}
            return 0
        state = load_checkpoint(path, map_location=map_location)
        getattr(model, "module", model).load_state_dict(state["model"])
        if optimizer is not None and state.get("optimizer") is not None:
            optimizer.load_state_dict(state["optimizer"])
        if state.get("torch_rng") is not None:
            torch.set_rng_state(state["torch_rng"])
        self.restored_from, self.restored_extra = path, dict(state.get("extra") or {})
        return int(state["step"])


# ----------------------------------------------------------------------- signals, requeue

def restart_count(env: dict[str, str] | None = None) -> int:
    """How many times Slurm has restarted this job (``SLURM_RESTART_COUNT``; unset on the first run)."""
    env = os.environ if env is None else env
    value = env.get("SLURM_RESTART_COUNT", "")
    return int(value) if value.isdigit() else 0


def requeue_job(job_id: str | None = None) -> bool:
    """``scontrol requeue <id>`` for this job (``SLURM_JOB_ID``); True when Slurm accepted it.

    Slurm then ends the running job (SIGTERM, then SIGKILL) and puts it back in the queue; when
    it runs again, ``SLURM_RESTART_COUNT`` is one higher. Needs ``--requeue`` or a cluster whose
    default allows requeueing batch jobs.
    """
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id:
        print("requeue_job: not inside a Slurm job (no SLURM_JOB_ID): nothing to requeue", file=sys.stderr)
        return False
    try:
        res = subprocess.run(["scontrol", "requeue", str(job_id)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        print(f"requeue_job: scontrol requeue {job_id} failed: {err}", file=sys.stderr)
        return False
    if res.returncode < 0:
        # scontrol was itself stopped by a signal: the requeue has begun to end this job, and
        # with it every process of the job (scontrol included) before it could report back
        return True
    if res.returncode != 0:
        print(f"requeue_job: scontrol requeue {job_id} failed: {res.stderr.strip()}", file=sys.stderr)
        return False
    return True


def requeue_demo_timing(startup_s: float | None = None, steps: int = 240) -> tuple[float, str, int]:
    """Lesson 12: (seconds per training step, ``--time``, ``--signal`` warning in s) for jobs of
    ``steps`` steps that must be warned and requeued within a few minutes. A real Slurm counts
    ``--time`` in minutes and may send the ``--signal`` up to 60 s early: 3-minute jobs warned 90 s
    before their end. The local Slurm keeps time to the second: 20 s jobs warned 8 s before their
    end; longer jobs, warned earlier, where the training script takes more than 2 s to start
    (``startup_s``, measured here when not given: a busy machine), so that a run that starts twice
    as slowly still trains some steps and has time to save and ask for its requeue. The steps take
    more than a whole run's time to the warning, so no run can do them all, however fast it starts."""
    from hpcnb.backend import which_slurm

    if which_slurm() != "local":
        return 0.5, "0:03:00", 90
    slow = max(0.0, (measure_startup() if startup_s is None else startup_s) - 2)
    warn = 8 + math.ceil(slow / 2)
    limit = 20 + math.ceil(3 * slow)
    step_s = math.ceil(1000 * (limit - warn + 4) / steps) / 1000
    return step_s, f"{limit // 60}:{limit % 60:02d}", warn


def measure_startup() -> float:
    """Seconds a fresh Python takes to import torch and the checkpoint helpers here, now (lesson 12)."""
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, hpcnb.lessons.checkpoint"], check=True, timeout=300,
                   capture_output=True)
    return time.monotonic() - began


def preempt(job_id: str | int) -> None:
    """Lesson 12: preempt a running job, as the scheduler does for a more urgent one. The local
    Slurm does what ``PreemptMode=REQUEUE`` does (``hpcnb slurm preempt``: SIGTERM, then requeue).
    On a real cluster only the scheduler preempts; the nearest thing a job's owner can do is
    ``scontrol requeue``: the job ends the same way and is queued again (held there until its credential expires: 121 s by default).
    Raises RuntimeError with Slurm's answer if the job could not be preempted."""
    from hpcnb.backend import which_slurm

    argv = ([sys.executable, "-m", "hpcnb.cli", "slurm", "preempt", str(job_id)] if which_slurm() == "local"
            else ["scontrol", "requeue", str(job_id)])
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise RuntimeError(f"could not preempt job {job_id}: {(res.stderr or res.stdout).strip()}")


def _signum(sig: int | str | signal.Signals) -> signal.Signals:
    if isinstance(sig, str):
        name = sig.upper()
        return signal.Signals[name if name.startswith("SIG") else "SIG" + name]
    return signal.Signals(sig)


class SignalGuard:
    """Turn SIGUSR1/SIGTERM into a flag the training loop checks between steps.

    A signal can arrive in the middle of a step, or of a save; saving from inside the handler
    could write a half-updated model. So the handler only records the signal (the first one
    wins, :attr:`signal`) and the loop reacts at the next safe point::

        if guard.triggered:
            ck.save(step + 1, model, optimizer)
            guard.finish()

    :meth:`finish` requeues the job (``scontrol requeue``) when the signal is one of
    ``requeue_on`` (default SIGUSR1: "the time limit is near, come back later"), then exits:
    0 after a requeue, ``128 + signal`` otherwise, like a process killed by that signal.
    Use it as a context manager to put the previous handlers back afterwards.
    """

    def __init__(self, signals: Iterable[int | str] = ("SIGUSR1", "SIGTERM"),
                 requeue_on: Iterable[int | str] = ("SIGUSR1",)) -> None:
        self.signals = tuple(_signum(s) for s in signals)
        self.requeue_on = frozenset(_signum(s) for s in requeue_on)
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)

    @property
    def triggered(self) -> bool:
        return self.received is not None

    @property
    def signal(self) -> str | None:
        """The name of the first signal received (``"SIGUSR1"``), or None."""
        return None if self.received is None else self.received.name

    @property
    def should_requeue(self) -> bool:
        return self.received in self.requeue_on

    def finish(self, requeue: bool | None = None) -> NoReturn:
        """Requeue (after a ``requeue_on`` signal, or when ``requeue=True``) and exit."""
        if requeue is None:
            requeue = self.should_requeue
        sys.stdout.flush()
        if requeue and requeue_job():
            sys.exit(0)
        sys.exit(128 + (int(self.received) if self.received is not None else 0))

    def ignore(self) -> None:
        """Ignore the guarded signals from now on: call it when the work is done.

        A signal that arrives while a finished program shuts down would otherwise kill it
        (Python puts the default action back while it exits; SIGUSR1's default is to
        terminate), and a job that had completed its work would end FAILED.
        """
        for sig in self.signals:
            self._previous.setdefault(sig, signal.getsignal(sig))
            signal.signal(sig, signal.SIG_IGN)

    def restore(self) -> None:
        """Put back the handlers that were there before."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def __enter__(self) -> SignalGuard:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()
