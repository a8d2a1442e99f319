"""The job API the lessons call: submit batch jobs, follow them, read their output and accounting.

Everything goes through Slurm's own commands (sbatch, squeue, sacct, scontrol, scancel), found
on the PATH that :func:`hpcnb.backend.slurm_env` arranges, so the same code drives the embedded
local Slurm and a real cluster::

    job = submit("train.sh", time="0:30", nodes=2)      # sbatch --time=0:30 --nodes=2 train.sh
    job.wait()                                          # progress bar; returns the final state
    print(job.tail())                                   # last lines of slurm-<id>.out
    job.accounting()                                    # sacct rows: job, .batch, .0 ...
    print(job.efficiency())                             # seff-like: CPU and memory used vs asked for
"""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcnb import poller
from hpcnb.job_errors import JobFailed, JobNotFound, SlurmError, SlurmWarning, SubmitError
from hpcnb.job_records import (
    ACCOUNTING_FORMAT,
    EFFICIENCY_FORMAT,
    FINISHED_STATES,
    QUEUE_FORMAT,
    STATE_FORMAT,
    AccountingRow,
    Efficiency,
    JobSnapshot,
    QueueRow,
    _accounted_whole,
    _expand_ids,
    _task_key,
    _tasks_of,
    parse_elapsed,
    parse_size,
)
from hpcnb.slurm.options import check_text, keyword_option, suggest
from hpcnb.slurm.states import base_state as _base_state
from hpcnb.slurm.times import format_limit

if TYPE_CHECKING:
    from hpcnb.jobscript import JobScript

__all__ = [
    "FINISHED_STATES",
    "AccountingRow",
    "Efficiency",
    "Job",
    "JobSnapshot",
    "JobFailed",
    "JobNotFound",
    "QueueRow",
    "SlurmError",
    "SlurmWarning",
    "SubmitError",
    "follow_queue",
    "parse_elapsed",
    "parse_size",
    "queue",
    "submit",
    "until",
]

COMMAND_TIMEOUT_S = 60.0
ACCOUNTING_LAG_S = 30.0  # how long a finished job's wait gives a real slurmdbd to record its end
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")


# ------------------------------------------------------------------------ running commands

def _missing_rows(expected: Mapping[str, str], accounted: Mapping[str, str]) -> list[str]:
    """The records of ``expected`` (JobID -> NodeList, "" = any) that sacct's ``accounted`` lacks."""
    return [f"{job_id} on {nodes}" if nodes else job_id for job_id, nodes in expected.items()
            if job_id not in accounted or (nodes and accounted[job_id] != nodes)]


def _slurm(args: list[str], *, cwd: Path | None = None, input: str | None = None,
           timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run one Slurm command (an argument list, no shell) with the chosen Slurm first on PATH."""
    from hpcnb.backend import slurm_env, submit_env, which_slurm

    env = submit_env() if args[0] in ("sbatch", "salloc") else slurm_env()  # a new job starts clean
    try:
        return subprocess.run(
            args, env=env, cwd=cwd, input=input, capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL if input is None else None,
        )
    except FileNotFoundError:
        raise SlurmError(
            f"`{args[0]}` is not on PATH (HPCNB_SLURM chose the {which_slurm()} Slurm): load your site's "
            "Slurm module, or set HPCNB_SLURM=local to use the embedded one"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(args)}` gave no answer within {timeout:g} s (is the controller up?)") from None


def _checked(args: list[str], **kw: Any) -> str:
    res = _slurm(args, **kw)
    if res.returncode != 0:
        raise SlurmError(f"`{' '.join(args)}` failed: {res.stderr.strip()}", res.stderr, res.returncode)
    return res.stdout


def _separator() -> str:
    """A field separator no job name can hold, new for each command: a name is anyone's text (on a
    shared cluster, any user's), so a name such as ``"x\\n42|...|FAILED"`` must not read as a row."""
    return f"|{secrets.token_hex(8)}|"


def _records(text: str, sep: str, fields: int) -> list[str]:
    """Slurm's lines of ``fields`` fields each, one per record: a job name holding a newline is
    printed across lines, which are joined back (a line lacking separators continues a record)."""
    records: list[str] = []
    part: str | None = None
    for line in text.removesuffix("\n").split("\n"):
        if part is None and sep not in line:
            if records:
                records[-1] += "\n" + line  # the rest of the last field (the name) of the row before
            continue
        part = line if part is None else f"{part}\n{line}"
        if part.count(sep) >= fields - 1:
            records.append(part)
            part = None
    return records


# ----------------------------------------------------------------------------- submit

_OPTION_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\Z")


def _option_args(options: Mapping[str, Any]) -> list[str]:
    """``ntasks_per_node=2`` -> ``--ntasks-per-node=2``; True -> a bare flag; None/False -> left out."""
    out: list[str] = []
    for key, value in options.items():
        if not _OPTION_KEY.match(key):
            raise ValueError(f"submit({key!r}=...): not an sbatch option name (letters, digits, '_' and '-')")
        if value is None or value is False:
            continue
        text = "" if value is True else _option_value(key, value)
        if len(key) == 1:
            out += [f"-{key}"] if value is True else [f"-{key}", text]
            continue
        flag = "--" + keyword_option(key)
        out.append(flag if value is True else f"{flag}={text}")
    return out


def _option_value(key: str, value: Any) -> str:
    """The option's text (timedelta -> Slurm time, lists comma-joined), refused if it holds a control character."""
    if isinstance(value, timedelta):
        value = format_limit(int(value.total_seconds()))
    elif isinstance(value, (list, tuple, set, frozenset)):
        value = ",".join(str(v) for v in value)
    return check_text(value, f"submit({key}=...)", where="an sbatch option")


def _hint(stderr: str, options: Mapping[str, Any]) -> str:
    """For sbatch's ``unrecognized option '--ntaks-per-node=2'``: which keyword it came from, and the fix."""
    match = re.search(r"unrecognized option '--([^='\s]+)", stderr)
    if not match:
        return ""
    flag = match.group(1)
    key = next((k for k in options if keyword_option(k) == flag), None)
    if key is None:
        return ""
    close = suggest(flag, "sbatch")
    fix = f"; did you mean {close.replace('-', '_')}=...?" if close else "; see `sbatch --help` for the options"
    return f"\n(submit({key}=...) became --{flag}{fix})"


def _write_script(script: JobScript, workdir: Path) -> Path:
    """Write the script as ``<name>.sbatch`` in ``workdir``, never over a different existing file."""
    text = script.render()
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", script.name or "job")
    number = 1
    while True:
        path = workdir / (f"{stem}.sbatch" if number == 1 else f"{stem}-{number}.sbatch")
        if not path.exists() or path.read_text() == text:
            return script.write(path)
        number += 1


def submit(
    script: str | os.PathLike[str] | JobScript | None = None,
    *,
    wrap: str | None = None,
    args: Iterable[Any] = (),
    cwd: str | os.PathLike[str] | None = None,
    **options: Any,
) -> Job:
    """Submit a batch job with ``sbatch --parsable`` and return its :class:`Job`.

    ``script``: a path to a job script, script text starting with ``#!`` (fed to sbatch on stdin),
    or a :class:`~hpcnb.jobscript.JobScript` (written to ``<name>.sbatch`` in ``cwd``). Or give
    ``wrap="command"`` instead. ``args`` go to the script; ``cwd`` is where sbatch runs (default: here),
    so relative paths and ``slurm-<id>.out`` land there. Every other keyword is an sbatch option:
    ``time="0:30", nodes=2, ntasks_per_node=2, array="1-4%2", dependency=f"afterok:{job.id}"``
    (``True`` for a flag, lists are comma-joined, a timedelta becomes a Slurm time).

    Raises :class:`SubmitError` with Slurm's own message when sbatch refuses the job.
    """
    from hpcnb.jobscript import JobScript

    if (script is None) == (wrap is None):
        raise ValueError("submit() needs exactly one of: a script (path, '#!' text or JobScript) or wrap='command'")
    workdir = Path(cwd) if cwd is not None else Path.cwd()
    if not workdir.is_dir():
        raise NotADirectoryError(f"submit(cwd={str(workdir)!r}): no such directory")
    extra = [check_text(a, f"submit(args[{i}])", where="a command-line argument") for i, a in enumerate(args)]
    argv = ["sbatch", "--parsable", *_option_args(options)]
    stdin_text = None
    script_path: Path | None = None
    if wrap is not None:
        if extra:
            raise ValueError("submit(wrap=...) takes no args=: put the arguments into the wrap command itself")
        wrap = check_text(wrap, "submit(wrap=...)", multiline=True, where="the wrap command")
        argv.append(f"--wrap={wrap}")
    elif isinstance(script, JobScript):
        script_path = _write_script(script, workdir)
        argv += ["--", str(script_path), *extra]
    elif isinstance(script, str) and script.startswith("#!"):
        if extra:
            raise ValueError("submit(script_text, args=...): sbatch reads script text from stdin and cannot "
                             "pass it arguments; write the script to a file or use JobScript")
        stdin_text = script
    else:
        path = check_text(os.fspath(script), "submit(script)", where="the sbatch command line")  # type: ignore[arg-type]
        script_path = workdir / path
        argv += ["--", path, *extra]  # after "--": a path such as "-job.sh" is never read as an option
    res = _slurm(argv, cwd=workdir, input=stdin_text)
    if res.returncode != 0:
        text = res.stderr.strip() or res.stdout.strip() or f"sbatch exited with {res.returncode}"
        raise SubmitError(text + _hint(res.stderr, options), res.stderr, res.returncode)
    first = res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""
    job_id = first.split(";")[0]
    if not job_id.isdigit():
        raise SubmitError(f"sbatch --parsable printed no job id: {res.stdout!r}", res.stderr, res.returncode)
    for line in res.stderr.strip().splitlines():
        warnings.warn(line, SlurmWarning, stacklevel=2)
    _watcher().changed()  # the queue has changed: whoever follows it hears soon
    return Job(job_id, script_path=script_path, workdir=workdir)


def _me() -> str:
    """The user Slurm knows this process as (its uid's name; ``$USER`` may say otherwise)."""
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _listed(user: str) -> list[QueueRow]:
    """``user``'s jobs in the queue ("": everyone's)."""
    sep = _separator()
    argv = ["squeue", "-h", "-o", QUEUE_FORMAT.replace("|", sep),
            *([] if not user else ["--me"] if user == _me() else ["-u", user])]
    return [row for line in _records(_checked(argv), sep, 11) if (row := QueueRow.parse(line, sep=sep))]


def _ask_slurm(keys: frozenset[poller.Key]) -> dict[poller.Key, Any]:
    """One poll (see :mod:`hpcnb.poller`): one squeue call for the user's jobs (as real Slurm's
    squeue asks slurmctld for one user's jobs alone), one sacct call for the jobs asked about
    that it does not list (ended, or someone else's). ``("job", id)`` -> :class:`JobSnapshot` (or
    :class:`JobNotFound`); ``("queue", user)`` -> that user's :class:`QueueRow` list ("": everyone)."""
    ids = sorted(key for kind, key in keys if kind == "job")
    users = {key for kind, key in keys if kind == "queue"}
    scope = "" if "" in users else _me()
    listed = _listed(scope) if ids or scope in users else []
    answers: dict[poller.Key, Any] = {("queue", scope): listed} if scope in users else {}
    for user in users - {scope}:  # another user's queue: its own call, so that its errors stay its own
        try:
            answers[("queue", user)] = [r for r in listed if r.user == user] if scope == "" else _listed(user)
        except SlurmError as err:
            answers[("queue", user)] = err
    tasks = {job_id: _tasks_of(job_id, listed) for job_id in ids}
    # a job that has left the queue, or an array all of whose listed tasks ended: sacct has it all
    gone = [job_id for job_id, rows in tasks.items() if all(r.state in FINISHED_STATES for r in rows.values())]
    if gone:
        sep = _separator()
        out = _checked(["sacct", "-X", "-n", "-P", f"--delimiter={sep}", "-j", ",".join(gone), "--format", STATE_FORMAT])
        accounted = [row for line in _records(out, sep, 12) if (row := QueueRow.parse(line, accounted=True, sep=sep))]
        for job_id in gone:
            tasks[job_id] = dict(sorted({**_tasks_of(job_id, accounted), **tasks[job_id]}.items(),
                                        key=lambda kv: _task_key(kv[0])))
    for job_id in ids:
        answers[("job", job_id)] = JobSnapshot.from_tasks(job_id, tasks[job_id]) if tasks[job_id] else JobNotFound(
            f"Slurm knows no job {job_id} (neither squeue nor sacct lists it)")
    return answers


def _fingerprint(value: Any) -> Hashable:
    """What counts as a change between two polls (not the elapsed time)."""
    if isinstance(value, JobSnapshot):
        return tuple(value.states.items()), value.nodes, value.reason
    return tuple((row.job_id, row.state, row.nodelist) for row in value)


def _settled(answer: poller.Answer) -> bool:
    """Need a later poll ask about it again? Not once the job has ended or is unknown (nor a queue)."""
    if answer.error is not None:
        return isinstance(answer.error, JobNotFound)
    return not isinstance(answer.value, JobSnapshot) or answer.value.done


def _watcher() -> poller.Watcher:
    """This kernel's one poller (see :mod:`hpcnb.poller`)."""
    return poller.shared(_ask_slurm, _fingerprint, _settled)


def queue(user: str | None = None) -> list[QueueRow]:
    """The jobs squeue shows (everyone's, like squeue; ``user=`` for one user's)."""
    if user:
        check_text(user, "queue(user)", where="the squeue command line")
    return list(_watcher().read(("queue", user or "")))


def follow_queue(user: str | None = None, listener: Callable[[poller.Answer], None] | None = None, *,
                 poll: float | None = None) -> poller.Subscription:
    """Follow ``user``'s jobs in the queue from the kernel's poller: each poll's rows go to
    ``listener`` (in the poller's thread) or to ``subscription.next()``; close it to stop."""
    if user:
        check_text(user, "follow_queue(user)", where="the squeue command line")
    return _watcher().follow(("queue", user or ""), listener, poll=poll)


def until(condition: Callable[[], Any], *, timeout: float = 120.0, poll: float = 0.2, what: str = "the condition",
          job: int | str | None = None) -> Any:
    """Poll ``condition()`` until it is true and return its value (lessons 1, 3, 4 and 5: wait for a
    job to reach a state, a checkpoint to appear). After ``timeout`` s raise TimeoutError saying
    ``what`` was awaited and, with ``job``, what squeue says of it: no wait hangs."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            seen = ""
            if job is not None:
                shown = _slurm(["squeue", "-j", str(job), "-o", "%i %T %r %N"])
                seen = f"; squeue -j {job}: {(shown.stdout + shown.stderr).strip() or '(nothing)'}"
            raise TimeoutError(f"waited {timeout:g} s for {what}{seen}")
        time.sleep(poll)
    return value


# --------------------------------------------------------------------------------- Job

class Job:
    """A Slurm job (or one array task, id ``7_3``), followed through squeue, sacct and scontrol.

    ``id`` is Slurm's id text: ``"12"``, or ``"7_3"`` for an array task. Its state comes from the
    kernel's one poller (:mod:`hpcnb.poller`), shared with every other job, wait and widget: fresh
    on the local Slurm, at most 2 s old on a real one. For an array job, ``state`` summarises its
    tasks (see :attr:`states`).
    """

    def __init__(self, job_id: int | str, *, script_path: Path | None = None, workdir: Path | None = None) -> None:
        text = str(job_id).strip()
        if not _JOB_ID.fullmatch(text):
            raise ValueError(f"Job({job_id!r}): a job id is a number like 12, or 7_3 for an array task")
        self.id = text
        self.script_path = script_path
        self.workdir = workdir
        self._output_path: Path | None = None
        _watcher().register(("job", text))  # asked about in every poll (one call for all) until it ends

    @classmethod
    def attach(cls, job_id: int | str) -> Job:
        """Follow a job submitted elsewhere (a terminal, another notebook). Raises JobNotFound."""
        job = cls(job_id)
        job.snapshot()
        return job

    # -- state ------------------------------------------------------------------------------
    def snapshot(self) -> JobSnapshot:
        """State, times, nodes and reason in one (squeue's, or sacct's once the job has left the
        queue). Raises :class:`JobNotFound` when neither knows the job."""
        return _watcher().read(("job", self.id))

    def follow(self, listener: Callable[[poller.Answer], None] | None = None, *,
               poll: float | None = None) -> poller.Subscription:
        """Follow the job from the kernel's poller: each poll's :class:`JobSnapshot` (or error) goes
        to ``listener`` (in the poller's thread) or to ``subscription.next()``; close it to stop."""
        return _watcher().follow(("job", self.id), listener, poll=poll)

    @property
    def states(self) -> dict[str, str]:
        """State per job id: ``{"12": "RUNNING"}``, or one entry per array task ``{"7_1": ..., "7_2": ...}``."""
        return dict(self.snapshot().states)

    @property
    def state(self) -> str:
        """The current state (``PENDING``, ``RUNNING``, ``COMPLETED`` ...); arrays: summarised over tasks."""
        return self.snapshot().state

    @property
    def is_array(self) -> bool:
        """True for a whole job array (not for one of its tasks)."""
        return self.snapshot().is_array

    @property
    def done(self) -> bool:
        return self.snapshot().done

    def array_tasks(self) -> list[Job]:
        """One :class:`Job` per task of an array job (``7_1``, ``7_2`` ...)."""
        tasks = [k for k in self.states if "_" in k]
        if "_" in self.id or not tasks:
            raise ValueError(f"job {self.id} is not a job array (submit one with array='1-4')")
        return [Job(t, workdir=self.workdir) for t in tasks]

    @property
    def reason(self) -> str:
        """Why it waits (``Priority``, ``Dependency``, ``JobArrayTaskLimit`` ...), or ``None``."""
        return self.snapshot().reason or "None"

    @property
    def nodes(self) -> list[str]:
        """The nodes it runs (or ran) on, expanded: ``["node1", "node2"]``; empty before it starts."""
        import hostlist

        text = self.snapshot().nodes
        return list(dict.fromkeys(hostlist.expand_hostlist(text))) if text else []

    # -- waiting ----------------------------------------------------------------------------
    def wait(self, timeout: float | None = None, poll: float | None = None, *, quiet: bool = False,
             check: bool = False) -> str:
        """Block until the job (every task of an array) has finished; return the final state.
        On a real Slurm it then gives the accounting up to 30 s to record the end (see
        :meth:`wait_accounted`), so that sacct read right after agrees with the queue.

        Shows a progress bar unless ``quiet``. The kernel's poller asks Slurm (see
        :mod:`hpcnb.poller`: from 0.05 s up to 1 s apart on the local Slurm, 2 s up to 10 s on a
        real one); ``poll`` fixes the seconds between its polls (at least 2 s on a real Slurm).
        Raises TimeoutError, with the states it saw, after ``timeout`` seconds (the job keeps
        running), and JobFailed with the output's last lines if ``check`` and the job did not end
        COMPLETED.
        """
        from hpcnb.backend import which_slurm

        snap = self._follow_to_end(timeout, poll, quiet)
        if which_slurm() == "real":  # what follows a wait reads sacct: let the accounting catch up
            try:
                self.wait_accounted(timeout=ACCOUNTING_LAG_S)
            except TimeoutError:
                pass  # a site without accounting, or a slow one: the queue's word stands
        if check and snap.state != "COMPLETED":
            failed = next((k for k, s in snap.states.items() if s != "COMPLETED"), self.id)
            culprit = self if failed == self.id else Job(failed, workdir=self.workdir)
            try:
                tail = culprit.tail()
            except (OSError, SlurmError) as err:
                tail = f"(output not readable: {err})"
            raise JobFailed(culprit, snap.state, culprit.exit_code, tail)
        return snap.state

    def _follow_to_end(self, timeout: float | None, poll: float | None, quiet: bool) -> JobSnapshot:
        """The poller's snapshots until the job has ended (a progress bar unless ``quiet``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = None if quiet else _Progress(self)
        seen: list[str] = []  # the states on the way, for the timeout's message
        failures, snap = 0, None
        try:
            with self.follow(poll=poll) as updates:
                while snap is None or not snap.done:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        now = snap.state if snap else "in an unknown state"
                        raise TimeoutError(
                            f"job {self.id} is still {now} after {timeout:g} s (seen: {', '.join(seen) or 'nothing'}): "
                            f"wait longer (job.wait(timeout=...)) or stop it with job.cancel()")
                    answer = updates.next(timeout=left)
                    if answer is None:
                        continue
                    if answer.error is not None:
                        failures += 1  # a busy controller may miss one answer; not three in a row
                        if failures >= 3:
                            raise answer.error
                        continue
                    failures, snap = 0, answer.value
                    if snap.state not in seen:
                        seen.append(snap.state)
                    if bar:
                        bar.update(snap.states)
        finally:
            if bar:
                bar.close()
        return snap

    # -- output -----------------------------------------------------------------------------
    @property
    def output_path(self) -> Path:
        """The file the job's stdout goes to (``StdOut`` of ``scontrol show job``)."""
        if self._output_path is None:
            out = _checked(["scontrol", "show", "job", self.id])
            records = [r for r in re.split(r"\n\s*\n", out) if r.strip()]
            if "_" not in self.id and (len(records) > 1 or "ArrayJobId=" in out):
                raise ValueError(f"job {self.id} is an array: each task has its own output, "
                                 f"e.g. job.array_tasks()[0].output_path")
            for line in out.splitlines():
                if line.strip().startswith("StdOut="):
                    self._output_path = Path(line.strip()[len("StdOut="):])
                    break
            else:
                raise SlurmError(f"job {self.id} has no StdOut (an salloc/srun job prints to its terminal)")
        return self._output_path

    def tail(self, n: int = 20) -> str:
        """The last ``n`` lines of the output file ("" while the job is still pending)."""
        path = self.output_path
        if not path.exists():
            if self.state == "PENDING":
                return ""
            raise FileNotFoundError(f"job {self.id}'s output {path} does not exist (not visible from this machine?)")
        return "".join(line + "\n" for line in _last_lines(path, n))

    # -- control and accounting -------------------------------------------------------------
    def cancel(self) -> bool:
        """scancel the job (every task of an array); False if it had already finished."""
        res = _slurm(["scancel", "--verbose", self.id])  # Slurm 22.05 says "already completing" only with -v
        _watcher().forget()
        if "already completing or completed" in res.stderr:
            return False
        if res.returncode == 0:
            return True
        raise SlurmError(f"scancel {self.id} failed: {res.stderr.strip()}", res.stderr, res.returncode)

    def accounting(self, steps: bool = True) -> list[AccountingRow]:
        """sacct's rows: the job's (one per array task), then its steps (``.batch``, ``.0`` ...)."""
        sep = _separator()
        argv = ["sacct", "-n", "-P", f"--delimiter={sep}", "-j", self.id, "--format", ACCOUNTING_FORMAT]
        if not steps:
            argv.insert(1, "-X")
        return [AccountingRow.parse(line, sep) for line in _records(_checked(argv), sep, 11)]

    def efficiency(self, settle: float = 30.0) -> Efficiency:
        """A seff-like summary from sacct (:class:`Efficiency`): CPU and memory used against the
        request, ``print()``-able, with :meth:`Efficiency.suggest_mem` for a rerun's ``--mem``.

        A real slurmdbd may record parts of a finished job a moment after its end (22.05, seen in CI:
        a step still running without MaxRSS, an empty ReqMem): this waits up to ``settle`` seconds
        for them."""
        deadline = time.monotonic() + settle
        while True:
            text = _checked(["sacct", "-n", "-P", "-j", self.id, "--format", EFFICIENCY_FORMAT])
            if _accounted_whole(text) or time.monotonic() >= deadline:
                return Efficiency.from_sacct(text)
            time.sleep(max(0.2, poller.pacing().gap))

    def wait_accounted(self, timeout: float = 60.0, steps: int = 0) -> str:
        """Block until sacct has the finished job's end, and return its state. A real slurmdbd may
        lag seconds behind the queue: just after the end it can still say PENDING (a salloc job
        then even named ``allocation``), show one row for a whole array, or one node of two. So
        the rows must also match what ``scontrol`` still knows of the job (ids and nodes); with
        ``steps``, sacct must also show that many numbered steps (it may record them after the
        job's end). Raises TimeoutError, with the states seen, after ``timeout``."""
        deadline, seen, expected = time.monotonic() + timeout, "nothing", None
        while True:
            res = _slurm(["sacct", "-X", "-n", "-P", "-j", self.id, "-o", "JobID,State,NodeList"])
            rows = [line.split("|") for line in res.stdout.splitlines() if line.count("|") == 2] \
                if res.returncode == 0 else []
            states = [_base_state(state) for _, state, _ in rows]
            if states and all(s in FINISHED_STATES for s in states):
                expected = self._records_known_to_scontrol() if expected is None else expected
                missing = _missing_rows(expected, {task: nodes for job_id, _, nodes in rows
                                                   for task in _expand_ids(job_id)})
                missing = missing or self._steps_missing(steps)
                if not missing:
                    return states[0] if len(set(states)) == 1 else ",".join(states)
                seen = f"{', '.join(states)}; not yet: {', '.join(missing)}"
            else:
                seen = ", ".join(states) or (res.stderr.strip() or "no row")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"sacct has no end for job {self.id} after {timeout:g} s (it says: {seen})")
            time.sleep(max(0.2, poller.pacing().gap))  # a real slurmdbd: no faster than the poller

    def _steps_missing(self, steps: int) -> list[str]:
        """[] once sacct shows ``steps`` numbered steps (``ID.0``, ``ID.1`` ...), else what it lacks."""
        if not steps:
            return []
        try:
            shown = sum((row.step or "").isdigit() for row in self.accounting())
        except SlurmError:  # sacct failed this once: the next poll asks again
            shown = 0
        return [] if shown >= steps else [f"{steps - shown} of {steps} steps"]

    def _records_known_to_scontrol(self) -> dict[str, str]:
        """sacct's JobID -> NodeList ("" if none) of each record ``scontrol`` still shows for the
        job (an array: one per task); empty once Slurm has forgotten the job (MinJobAge)."""
        res = _slurm(["scontrol", "-o", "show", "job", self.id])
        records: dict[str, str] = {}
        for line in res.stdout.splitlines() if res.returncode == 0 else []:
            fields = dict(re.findall(r"(?:^|\s)(JobId|ArrayJobId|ArrayTaskId|NodeList)=(\S*)", line))
            if "JobId" in fields:
                task = fields.get("ArrayTaskId", "")
                nodes = "" if fields.get("NodeList", "") in ("", "(null)") else fields["NodeList"]
                key = f"{fields['ArrayJobId']}_[{task}]" if task else fields["JobId"]  # unstarted: 2-3%1
                records.update(dict.fromkeys(_expand_ids(key), nodes))
        return records

    def _job_rows(self) -> list[AccountingRow]:
        return self.accounting(steps=False)

    @property
    def exit_code(self) -> int | None:
        """The script's exit code once finished (arrays: the highest over tasks); None before."""
        rows = self._job_rows()
        if not rows or any(r.state not in FINISHED_STATES for r in rows):
            return None
        return max(r.exit_code for r in rows)

    @property
    def elapsed(self) -> int | None:
        """Seconds run (so far); arrays: from the first task's start to the last task's end."""
        rows = self._job_rows()
        if len(rows) == 1:
            return rows[0].elapsed if rows[0].start else None
        starts = [r.start for r in rows if r.start]
        if not starts:
            return None
        ends = [r.end or datetime.now() for r in rows if r.start]
        return int((max(ends) - min(starts)).total_seconds())

    def __repr__(self) -> str:
        try:
            snap = self.snapshot()
        except (SlurmError, OSError) as err:
            return f"<Job {self.id}: state unknown ({err})>"
        if snap.is_array:
            return f"<Job {self.id} array: " + ", ".join(f"{n} {s}" for s, n in snap.counts().items()) + ">"
        return f"<Job {self.id} {snap.state}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)


# ---------------------------------------------------------------------------- helpers

def _last_lines(path: Path, n: int, block: int = 65536) -> list[str]:
    """The last ``n`` lines of a file, reading from its end (logs can be large)."""
    if n <= 0:
        return []
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        pos, data = fh.tell(), b""
        while pos > 0 and data.count(b"\n") <= n:
            step = min(block, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    return data.decode(errors="replace").splitlines()[-n:]


def _in_notebook() -> bool:
    kernel = sys.modules.get("ipykernel")
    shell = sys.modules.get("IPython")
    if kernel is None or shell is None:
        return False
    ip = shell.get_ipython()  # type: ignore[attr-defined]
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


class _Progress:
    """A tqdm bar over a job's tasks (one for a plain job), labelled with the current states."""

    def __init__(self, job: Job) -> None:
        if _in_notebook():
            from tqdm.auto import tqdm
        else:
            from tqdm import tqdm
        self._bar = tqdm(total=1, desc=f"job {job.id}", leave=True, dynamic_ncols=True,
                         bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} done [{elapsed}] {postfix}")
        self._label = ""

    def update(self, states: Mapping[str, str]) -> None:
        finished = sum(s in FINISHED_STATES for s in states.values())
        if self._bar.total != len(states):
            self._bar.total = len(states)
        counts: dict[str, int] = {}
        for s in states.values():
            counts[s] = counts.get(s, 0) + 1
        label = " ".join(s if len(states) == 1 else f"{s}={n}" for s, n in counts.items())
        if label != self._label:
            self._bar.set_postfix_str(label, refresh=False)
            self._label = label
        self._bar.n = finished
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()
