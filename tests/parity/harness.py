"""Run the same thing on the local Slurm and on a real Slurm, and normalise what comes back.

The real Slurm is one of the lanes of ``ci/real-slurm.sh``: 22.05 (the host's packages, the
default) or 24.11 (a Debian 13 chroot, its commands in wrappers), chosen by ``HPCNB_REAL_SLURM``.

Two :class:`Side` objects, ``local`` and ``real``, run commands with the same clean environment
(only ``PATH`` differs: the local Slurm's command folder first, or not at all), each in its own
working directory. :func:`on_both` runs one function for both sides at the same time (threads),
so a case costs the slower side's time, not the sum.

What differs from run to run is normalised by a per-case :class:`Norm`: job ids (numbered in
order, ``<J0>``, ``<J1>``, ...), working directories (``<WD>``), the local state directory,
pids, ports, the submit host and times. Everything else must be equal unless a test names the
difference in :data:`INTENTIONAL` (with its reason).
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcnb.job_records import _expand_ids as expand_array_ids
from hpcnb.slurm.states import FINAL

ROOT = Path(__file__).resolve().parent.parent.parent
JOBS = Path(__file__).resolve().parent / "jobs"
REAL_SLURM_SH = ROOT / "ci" / "real-slurm.sh"
VERSIONS = ("22.05", "24.11")  # the lanes of ci/real-slurm.sh
REAL_VERSION = os.environ.get("HPCNB_REAL_SLURM") or VERSIONS[0]
if REAL_VERSION not in VERSIONS:
    raise ValueError(f"HPCNB_REAL_SLURM={REAL_VERSION!r}: the real Slurm lanes are {', '.join(VERSIONS)}")


def real_bin(version: str) -> str:
    """The folder of a lane's commands (``ci/real-slurm.sh bin VERSION``)."""
    out = subprocess.run(["bash", str(REAL_SLURM_SH), "bin", version], capture_output=True, text=True, timeout=30)
    if out.returncode or not out.stdout.strip():
        raise RuntimeError(f"`ci/real-slurm.sh bin {version}` failed: {out.stderr.strip()}")
    return out.stdout.strip()


REAL_BIN = real_bin(REAL_VERSION)
UP = f"`bash ci/real-slurm.sh up {REAL_VERSION}` as root"
FINAL_STATES = FINAL

# Differences that are there on purpose. Tests refer to these keys; the report prints the reasons.
INTENTIONAL = {
    "oom": "No cgroups on the CI host: the real Slurm (proctrack/linuxproc + JobAcctGatherParams=OverMemoryKill) "
    "kills the job with SIGKILL and records FAILED 0:9; the local Slurm reports it as a cgroup site does "
    "(OUT_OF_MEMORY 0:125), which is what learners meet on real clusters.",
    "slurm_tmpdir": "The local site profile provides $SLURM_TMPDIR (a per-job node-local directory, as Alliance "
    "sites do through a TaskProlog); plain Slurm has no such variable.",
    "timelimit_latency": "The local Slurm enforces time limits to the second; the real slurmctld checks them "
    "every 30 s, so a --time=1 job ends 60-90 s after it starts (elapsed time is not compared).",
    "signal_latency": "--signal=B:USR1@N is sent exactly N s before the limit by the local Slurm; the real "
    "slurmctld sends it at one of its periodic checks, up to 60 s earlier than asked (as its man page "
    "warns): both deliver it to the batch shell before the time limit.",
    "scheduling_speed": "The local Slurm starts jobs at once; the real one within a second or so (timings and "
    "transient PENDING states are not compared).",
    "requeue_delay": "After scontrol requeue a real slurmctld holds the job until the old job credential "
    "has expired (EligibleTime = now + cred_expire + 1 s, 121 s by default, reason BeginTime); the local "
    "Slurm for one second.",
    "backfill_year": "A job with no time limit that the real backfill scheduler starts (as it does a requeued "
    "job once its hold ends) shows TimeLimit=365-00:00:00; the local Slurm has a single scheduler and keeps "
    "UNLIMITED.",
    "scheduler": "scontrol's Scheduler= says which real scheduler started the job: Main when it fitted at "
    "submission, Backfill when the next backfill pass got there first (timing); the local Slurm has one "
    "scheduler and says Main: not compared.",
    "node_stats": "Live node statistics (CPULoad, FreeMem, OS, BootTime, SlurmdStartTime, LastBusyTime, "
    "Port) describe the host, not the virtual node: normalised.",
    "local_settings": "The local Slurm's own settings (HPCNB_STATE_DIR, HPCNB_CONTROLLER_IDLE, ...: "
    "hpcnb.localslurm.envvars.LOCAL_SETTINGS) reach every job and step whatever --export says: they stand for the "
    "cluster's configuration, which a real slurmd reads from slurm.conf. A job with --export=NONE or =<names> "
    "shows them; a real one has no such variables.",
    "node_profile": "What the node's own login profile sets (Debian's Lmod from /etc/profile.d: LMOD_*, "
    "MODULEPATH, BASH_ENV, the module function) is the machine's software, not Slurm's: the local Slurm's "
    "virtual nodes are the host, which has Lmod (lesson 3b), and the 24.11 lane's nodes a chroot without it. "
    "Jobs that load a login environment (--export=NONE, --get-user-env) show it: left out on both sides.",
    "alloc_node": "scontrol's AllocNode:Sid names the submitting host and session as slurmctld saw them "
    "(real: localhost:<sid>, or the login node's address on the nodes' network); the local Slurm records "
    "the host name and session 0: normalised.",
}

# a real srun whose step waits for the last one's resources to be released says so: timing
STEP_RETRY = re.compile(r"step creation temporarily disabled, retrying|Step created for (job|StepId)")

_LOCK = threading.Lock()


def real_slurm_reason() -> str | None:
    """Why the real Slurm of this lane can't be used (None when it is up and both nodes answer)."""
    scontrol = Path(REAL_BIN) / "scontrol"
    if not scontrol.exists():
        return f"the real Slurm {REAL_VERSION} is not installed or not up ({scontrol} missing); run {UP}"
    env = clean_env(f"{REAL_BIN}:/usr/bin:/bin")
    try:
        version = subprocess.run([f"{REAL_BIN}/sinfo", "--version"], env=env, capture_output=True, text=True,
                                 timeout=30).stdout.split()
        ping = subprocess.run([str(scontrol), "ping"], env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"`scontrol ping` on the real Slurm {REAL_VERSION} failed ({err}); run {UP}"
    if not version or not version[-1].startswith(REAL_VERSION + "."):
        return f"{REAL_BIN}/sinfo is not Slurm {REAL_VERSION} (`sinfo --version`: {' '.join(version)!r})"
    if "is UP" not in ping.stdout:
        return f"the real Slurm {REAL_VERSION} is not up (`scontrol ping` says it is down); run {UP}"
    nodes = subprocess.run([f"{REAL_BIN}/sinfo", "-h", "-N", "-o", "%N %T"], env=env, capture_output=True,
                           text=True, timeout=30).stdout.split("\n")
    usable = [n for n in nodes if n.split()[-1:] and n.split()[-1] in ("idle", "mixed", "allocated", "completing")]
    if len({n.split()[0] for n in usable}) < 2:
        return f"the real Slurm {REAL_VERSION}'s nodes are not both usable (sinfo -N: {nodes!r}); rerun {UP}"
    return None


def clean_env(path: str) -> dict[str, str]:
    """The environment every command of both sides starts from (no SLURM_*, same locale)."""
    keep = ("HOME", "USER", "LOGNAME", "SHELL", "TERM")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.setdefault("HOME", "/root")
    env.update(PATH=path, LANG="C.UTF-8", LC_ALL="C", PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1")
    return env


@dataclass
class Result:
    argv: list[str]
    stdout: str
    stderr: str
    rc: int

    def __str__(self) -> str:
        return f"$ {' '.join(self.argv)}\n[rc={self.rc}]\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


@dataclass
class Side:
    """One Slurm: how to run its commands, and where its cases work."""

    name: str  # "local" or "real"
    root: Path  # the parent of every case's working directory
    env: dict[str, str]
    state_dir: Path | None = None  # the local Slurm's private state
    submitted: list[int] = field(default_factory=list)  # cancelled (if still there) at the end

    def workdir(self, case: str) -> Path:
        path = self.root / case
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def run(self, argv: list[str] | str, cwd: Path, timeout: float = 120, input: str | None = None,
            env: dict[str, str] | None = None) -> Result:
        args = ["bash", "-c", argv] if isinstance(argv, str) else list(argv)
        proc = subprocess.run(args, cwd=cwd, env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, input=input, stdin=None if input is not None else subprocess.DEVNULL)
        return Result(args, proc.stdout, proc.stderr, proc.returncode)

    def ok(self, argv: list[str] | str, cwd: Path, **kw) -> Result:
        res = self.run(argv, cwd, **kw)
        assert res.rc == 0, f"{self.name}: command failed\n{res}"
        return res

    # -- jobs ---------------------------------------------------------------------------------
    def sbatch(self, args: list[str], cwd: Path, script: str | None = None, name: str = "job.sh",
               env: dict[str, str] | None = None) -> int:
        """Submit (``script`` is written to ``cwd/name`` and appended; ``env`` added to the
        submitting environment); returns the job id."""
        self.wait_no_completing(cwd)
        argv = ["sbatch", "--parsable", *args]
        if script is not None:
            (cwd / name).write_text(script)
            (cwd / name).chmod(0o755)
            argv.append(name)
        res = self.ok(argv, cwd, env=env)
        job_id = int(res.stdout.strip().split(";")[0])
        self.submitted.append(job_id)
        return job_id

    def states(self, job_id: int, cwd: Path) -> dict[str, str]:
        """``{jobid text: state}`` of the job (or every task of an array), as squeue shows them;
        from sacct once the job has left the queue (MinJobAge, 300 s after its end)."""
        res = self.run(["squeue", "-h", "-t", "all", "-r", "-j", str(job_id), "-o", "%i %T"], cwd)
        out = {}
        for line in res.stdout.splitlines():
            if line.strip():
                jid, state = line.split()[:2]
                out[jid] = state
        if not out:
            res = self.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "--format", "JobID,State"], cwd)
            for line in res.stdout.splitlines():
                jid, _, state = line.partition("|")
                if state.split()[:1] and state.split()[0] in FINAL_STATES:
                    out[jid] = state.split()[0]
        return out

    def wait_state(self, job_id: int, cwd: Path, wanted: set[str] | Callable[[dict[str, str]], bool],
                   timeout: float = 120) -> dict[str, str]:
        """Poll squeue until every task of the job is in ``wanted`` (or the predicate holds)."""
        end = time.time() + timeout
        states: dict[str, str] = {}
        while time.time() < end:
            states = self.states(job_id, cwd)
            if states and (wanted(states) if callable(wanted) else all(s in wanted for s in states.values())):
                return states
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: job {job_id} not in {wanted} after {timeout}s: {states}")

    def wait_done(self, job_id: int, cwd: Path, timeout: float = 180) -> dict[str, str]:
        """Wait until the job has ended and its accounting record (job and steps) is final."""
        tasks = {task for text in self.wait_state(job_id, cwd, FINAL_STATES, timeout) for task in expand_array_ids(text)}
        end = time.time() + 30
        rows: list[list[str]] = []
        while time.time() < end:
            res = self.run(["sacct", "-n", "-P", "-j", str(job_id), "--format", "JobID,State,JobName,Timelimit"], cwd)
            rows = [line.split("|") for line in res.stdout.splitlines() if line.strip()]
            # tasks that never started share one row, 7_[2-4%1]; an array task not recorded yet
            if not tasks <= {task for r in rows for task in expand_array_ids(r[0])}:
                time.sleep(0.2)
                continue
            # slurmdbd lists a fast job as "allocation", without its request (time limit, ReqTRES...),
            # until the job's start record arrives, which may be after its end
            complete = all(r[2] != "allocation" and r[3] for r in rows if "." not in r[0])
            if rows and complete and all(r[1].split()[0] in FINAL_STATES for r in rows):
                return self.states(job_id, cwd)
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: accounting of job {job_id} not final after 30 s: {rows}")

    def wait_no_completing(self, cwd: Path, timeout: float = 60) -> None:
        """Wait until no job is COMPLETING: a real scheduler skips a node whose last job is still
        completing, so a job submitted then may land on other nodes than on the local Slurm."""
        end = time.time() + timeout
        while time.time() < end:
            if not self.run(["squeue", "-h", "-t", "CG", "-o", "%i"], cwd).stdout.strip():
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: jobs still COMPLETING after {timeout}s")

    def job_ids(self, job_id: int, cwd: Path) -> list[int]:
        """The raw ids of a job, or of every task of an array (its own id included)."""
        res = self.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "--format", "JobIDRaw"], cwd)
        ids = {int(x) for x in res.stdout.split() if x.isdigit()}
        return sorted(ids | {job_id})

    def sacct(self, job_id: int, cwd: Path, fmt: str, extra: tuple[str, ...] = ()) -> list[dict[str, str]]:
        res = self.ok(["sacct", "-P", "-j", str(job_id), "--format", fmt, *extra], cwd)
        lines = res.stdout.splitlines()
        head = lines[0].split("|")
        return [dict(zip(head, line.split("|"))) for line in lines[1:]]

    def scontrol_job(self, job_id: int | str, cwd: Path) -> dict[str, str]:
        res = self.ok(["scontrol", "show", "job", str(job_id)], cwd)
        return parse_keyvals(res.stdout)


def settled_text(path: Path, quiet: float = 0.5, timeout: float = 15) -> str | None:
    """A finished job's output file once nothing writes to it any more (None if there is none).

    A job's end is recorded before every writer has let go of its output: a real srun forwards
    its tasks' last lines and its own messages after slurmctld has the job's end, so a file read
    at once can miss lines or catch one half written. Compared only once its size holds still."""
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            stat = path.stat()
        except FileNotFoundError:
            stat = None
        now = (stat.st_size, stat.st_mtime_ns) if stat else None
        if now == last:
            break
        last = now
        time.sleep(quiet)
    return path.read_text() if path.exists() else None


WAITING = re.compile(r"Pending job allocation|queued and waiting|has been allocated resources")


def without_waiting(text: str) -> str:
    """srun's or salloc's stderr less the lines that say it had to wait for a node (a node still
    busy with another case's job): when resources come is timing, not what a case compares."""
    return "".join(line for line in text.splitlines(keepends=True) if not WAITING.search(line))


# A job cancelled while an srun step runs: scancel's SIGTERM ends its batch shell (batch step CANCELLED
# 0:15), or, when the shell's srun dies of the signal first, the shell exits 143 itself (FAILED 15:0).
# Which comes first is a race on a real Slurm (seen on 24.11 and on 22.05 under load); the local Slurm
# always gives the first, and the second is compared as the first.
BATCH_RACED = re.compile(r"^([^|\n]*\.batch\|)FAILED\|(15:0\b|(?![0-9]+:[0-9]+))", re.M)


def batch_race_as_cancelled(text: str) -> str:
    """sacct rows (``JobID|State[|ExitCode]...``) with a batch step that lost that race read as CANCELLED."""
    return BATCH_RACED.sub(lambda m: f"{m.group(1)}CANCELLED|{'0:15' if m.group(2) else ''}", text)


def parse_keyvals(text: str) -> dict[str, str]:
    """``scontrol show`` output -> {key: value} (tokens split on spaces; ``Key=`` gives '')."""
    out: dict[str, str] = {}
    for token in text.split():
        key, eq, value = token.partition("=")
        if eq:
            out[key] = value
        elif out:  # a value with spaces (e.g. OS=Linux 6.1 #1 SMP): glue it to the previous key
            last = next(reversed(out))
            out[last] += " " + token
    return out


def parse_env0(data: bytes | str) -> dict[str, str]:
    text = data.decode() if isinstance(data, bytes) else data
    env = {}
    for item in text.split("\0"):
        if "=" in item:
            key, _, value = item.partition("=")
            env[key] = value
    return env


def backfill_year(text: str) -> str:
    """A real job the backfill scheduler started with no time limit says 365 days, not UNLIMITED
    (INTENTIONAL["backfill_year"]); whether backfill or the main scheduler starts it is timing."""
    text = text.replace("|365-00:00:00|525600|", "|UNLIMITED|UNLIMITED|")  # sacct Timelimit,TimelimitRaw
    return "UNLIMITED" if text == "365-00:00:00" else text


def on_both(sides: dict[str, Side], fn: Callable[[Side], Any]) -> dict[str, Any]:
    """Run ``fn(side)`` for the local and the real side at once; re-raise the first error."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(fn, side) for name, side in sides.items()}
        return {name: fut.result() for name, fut in futures.items()}


# -- normalisation -------------------------------------------------------------------------------
TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
SPOOL_SCRIPT = re.compile(r"(?:<STATE>|/)\S*/slurm_script\b")
DATE_LINE = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}$", re.M)


@dataclass
class Norm:
    """What to replace in one side's results so that they compare with the other side's."""

    side: Side
    workdirs: list[Path] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)

    def add_ids(self, *ids: int) -> None:
        self.ids = sorted(set(self.ids) | set(ids))

    def job(self, text: str) -> str:
        """A job id text (``7``, ``7_3``, ``7.batch``, ``7_[1-3%2]``) with its leading id numbered."""
        def sub(match: re.Match) -> str:
            num = int(match.group(0))
            return f"<J{self.ids.index(num)}>" if num in self.ids else f"<J?{num}>"

        return re.sub(r"^\d+", sub, text)

    def dep(self, text: str) -> str:
        """A dependency (``afterok:7(failed),afterany:8_2``) with its job ids numbered."""
        return re.sub(r"(?<=:)(\d+)", lambda m: self.job(m.group(1)), text)

    def path(self, text: str) -> str:
        for wd in self.workdirs:
            text = text.replace(str(wd), "<WD>")
        state = self.side.env.get("HPCNB_STATE_DIR")  # set alike on both sides
        if state:
            text = text.replace(state, "<STATE>")
        # job ids inside file names: slurm-7.out, x-7-node1.out, 7_3.err, job_7
        for num in sorted(self.ids, key=lambda n: -len(str(n))):
            text = re.sub(rf"(?<![0-9A-Za-z.:]){num}(?![0-9A-Za-z:])", f"<J{self.ids.index(num)}>", text)
        return text

    def text(self, text: str) -> str:
        """Command output: paths, job ids, timestamps and date lines normalised."""
        text = TIME_RE.sub("<TIME>", self.path(text))
        text = SPOOL_SCRIPT.sub("<SPOOL>/slurm_script", text)  # where slurmd keeps the script: site config
        return DATE_LINE.sub("<DATE>", text)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """A task's environment, normalised (see ENV_RULES), without the node's login profile
        (INTENTIONAL["node_profile"])."""
        out = {}
        for key, value in env.items():
            if _from_node_profile(key, value):
                continue
            rule = ENV_RULES.get(key)
            if rule is None:
                value = self.path(value) if "/" in value else value
            else:
                value = rule(self, value)
            out[key] = value
        return _job_times(out)


_LMOD_NAMES = re.compile(r"(LMOD_\w*|__LMOD_\w*|_ModuleTable\w*|MODULEPATH\w*|MODULESHOME|LOADEDMODULES|_LMFILES_"
                         r"|BASH_FUNC_(module|ml)%%)")


def _from_node_profile(key: str, value: str) -> bool:
    """Set by the node's login profile (Debian's Lmod), not by Slurm: INTENTIONAL["node_profile"]."""
    return bool(_LMOD_NAMES.fullmatch(key)) or (key in ("BASH_ENV", "MANPATH") and "/lmod/" in value)


def _job_times(env: dict[str, str]) -> dict[str, str]:
    """SLURM_JOB_START_TIME/END_TIME (24.11): when the job started is timing; how long it may run is not."""
    start, end = env.get("SLURM_JOB_START_TIME", ""), env.get("SLURM_JOB_END_TIME", "")
    if start.isdigit():
        env["SLURM_JOB_START_TIME"] = "<START>"
        if end.isdigit():
            env["SLURM_JOB_END_TIME"] = f"<START>+{int(end) - int(start)}"
    return env


def _path_var(norm: Norm, value: str) -> str:
    """PATH without the folder that only one side has first (the local commands, or a chrooted lane's)."""
    ours = {norm.side.env.get("HPCNB_LOCAL_BIN"), REAL_BIN if REAL_BIN != "/usr/bin" else None}
    parts = [p for p in value.split(":") if p not in ours]
    return ":".join(parts)


# an address in the nodes' network of a Slurm: the real lanes' 10.78.V.i (ci/real-slurm.sh), the
# local Slurm's 10.77.0.i (hpcnb/localslurm/network.py)
ADDRESS = re.compile(r"\b10\.7[78]\.\d+\.(\d+)\b")


def node_address(value: str) -> str:
    """An address of a node or of the login node, named by what it stands for: ``<node2>``, or
    ``<login node>`` (the real lanes' 10.78.V.254; the local Slurm's login node is not in its
    nodes' network: 127.0.0.1)."""
    found = ADDRESS.fullmatch(value)
    if value in ("127.0.0.1", "localhost") or (found and found.group(1) == "254"):
        return "<login node>"
    return f"<node{found.group(1)}>" if found else value


def name_addresses(text: str) -> str:
    """Every address of the nodes' network in ``text`` named by :func:`node_address`."""
    return ADDRESS.sub(lambda found: node_address(found.group(0)), text)


ENV_RULES: dict[str, Callable[[Norm, str], str]] = {
    "SLURM_JOB_ID": lambda n, v: n.job(v),
    "SLURM_JOBID": lambda n, v: n.job(v),
    "SLURM_ARRAY_JOB_ID": lambda n, v: n.job(v),
    "SLURM_TASK_PID": lambda n, v: "<PID>" if v.isdigit() else v,
    "SLURM_SRUN_COMM_PORT": lambda n, v: "<PORT>" if v.isdigit() else v,
    "SLURM_SRUN_COMM_HOST": lambda n, v: node_address(v),
    "SLURM_WORKING_CLUSTER": lambda n, v: ":".join(node_address(x) if i == 1 else x for i, x in enumerate(v.split(":"))),
    "SLURM_LAUNCH_NODE_IPADDR": lambda n, v: node_address(v),
    "SLURM_STEP_LAUNCHER_PORT": lambda n, v: "<PORT>" if v.isdigit() else v,
    "SLURM_CONF": lambda n, v: "<SLURM_CONF>" if v.endswith("slurm.conf") else v,
    "SLURM_SUBMIT_HOST": lambda n, v: "<SUBMIT_HOST>" if v == socket.gethostname() else v,
    "PATH": _path_var,
    "HPCNB_LOCAL_BIN": lambda n, v: "<LOCAL_BIN>",
    "_": lambda n, v: n.path(v),
}


def local_settings(local: dict[str, str], real: dict[str, str]) -> list[str]:
    """Take out of a local job's environment the local Slurm's own settings that the real job
    lacks (--export=NONE or =<names>: INTENTIONAL["local_settings"]); returns their names."""
    from hpcnb.localslurm.envvars import LOCAL_SETTINGS

    kept = sorted(name for name in LOCAL_SETTINGS if name in local and name not in real)
    for name in kept:
        del local[name]
    return kept


def env_diff(local: dict[str, str], real: dict[str, str]) -> list[str]:
    """Readable differences between two normalised environments ([] when equal)."""
    out = []
    for key in sorted(set(local) | set(real)):
        if key not in real:
            out.append(f"only local: {key}={local[key]}")
        elif key not in local:
            out.append(f"only real:  {key}={real[key]}")
        elif local[key] != real[key]:
            out.append(f"differs:    {key}: local={local[key]!r} real={real[key]!r}")
    return out


# -- the record of every case (for the report) ----------------------------------------------------
RECORDS: list[dict[str, Any]] = []


def short(value: Any, limit: int = 90) -> str:
    if isinstance(value, dict):
        return f"{len(value)} names"
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def record(case: str, local: Any, real: Any, verdict: str, note: str = "") -> None:
    with _LOCK:
        RECORDS.append({"case": case, "version": REAL_VERSION, "local": short(local), "real": short(real),
                        "verdict": verdict, "note": note})


def describe_diff(local: Any, real: Any) -> str:
    if isinstance(local, dict) and isinstance(real, dict):
        return "\n".join(env_diff({k: str(v) for k, v in local.items()}, {k: str(v) for k, v in real.items()}))
    if isinstance(local, list) and isinstance(real, list):
        import difflib

        return "\n".join(difflib.unified_diff([str(x) for x in real], [str(x) for x in local], "real", "local",
                                              lineterm=""))
    return f"local: {local!r}\nreal:  {real!r}"


def compare(case: str, local: Any, real: Any, note: str = "") -> None:
    """Assert equality and record the case (with the differences, when there are some)."""
    equal = local == real
    detail = "" if equal else describe_diff(local, real)
    record(case, local, real, "equal" if equal else "DIFFERENT", note or short(detail, 300))
    if not equal:
        raise AssertionError(f"{case}: local and real Slurm differ\n{detail}")


def intentional(case: str, key: str, local: Any, real: Any, want_local: Any, want_real: Any) -> None:
    """A difference on purpose: each side must show its own expected value."""
    ok = local == want_local and real == want_real
    record(case, local, real, f"intentional ({key})" if ok else "UNEXPECTED", INTENTIONAL[key])
    assert local == want_local, f"{case}: local gave {local!r}, expected {want_local!r} ({INTENTIONAL[key]})"
    assert real == want_real, f"{case}: real gave {real!r}, expected {want_real!r} ({INTENTIONAL[key]})"


def python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable
