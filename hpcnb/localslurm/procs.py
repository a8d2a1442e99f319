"""Process plumbing: spawning with exact fds and env, process trees, signalling whole jobs."""
from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable


class _LazyPsutil:
    """psutil, imported on first use: most commands (sbatch, squeue...) never need it."""

    def __getattr__(self, name: str):
        import psutil as real

        globals()["psutil"] = real
        return getattr(real, name)


psutil = _LazyPsutil()

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphaned descendants (daemons, double forks) re-parent to us, so a job can't escape its tree."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def spawn(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    fds: tuple[int, int, int],
    new_session: bool,
    pid_var: str | None = None,
    error_prefix: str = "slurmstepd",
    rlimits: dict[str, int] | None = None,
) -> int:
    """fork + execve with fds 0-2 set, default signals, and ``pid_var`` set to the child's own pid.

    ``rlimits`` (name -> soft limit, e.g. ``{"FSIZE": 1048576}``) are the submitting shell's
    limits, applied as Slurm's PropagateResourceLimits=ALL does (never above the hard limit here).
    """
    pid = os.fork()
    if pid:
        return pid
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for sig in signal.valid_signals():  # nothing ignored or caught is inherited (SIGPIPE, SIGXFSZ...)
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    signal.signal(sig, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
        if rlimits:
            apply_rlimits(rlimits)
        if new_session:
            os.setsid()
        for target, fd in enumerate(fds):
            if fd != target:
                os.dup2(fd, target)
        os.closerange(3, 65536)
        if pid_var:
            env = {**env, pid_var: str(os.getpid())}
        os.chdir(cwd)
        os.execvpe(argv[0], argv, env)
    except BaseException as err:  # noqa: BLE001 - report and leave the child
        # as slurmstepd: exit with the errno; a relative path shown from the working directory, and a
        # script whose #! interpreter is missing reported as such (checked against a real 22.05)
        reason = getattr(err, "strerror", None) or str(err)
        name = argv[0]
        if "/" in name and not name.startswith("/"):
            name = os.path.join(cwd, name)
        what = name
        if isinstance(err, FileNotFoundError) and "/" in argv[0] and os.path.exists(name):
            try:
                with open(name, "rb") as fh:
                    what = f"bad interpreter({fh.readline()[2:].split()[0].decode(errors='replace')})"
            except (OSError, IndexError):
                pass
        try:
            os.write(2, f"{error_prefix}: error: execve(): {what}: {reason}\n".encode())
        finally:
            os._exit(err.errno if isinstance(err, OSError) and err.errno else 1)
    raise AssertionError("unreachable")


#: The limits Slurm propagates by default (PropagateResourceLimits=ALL).
PROPAGATED_RLIMITS = ("CPU", "FSIZE", "DATA", "STACK", "CORE", "RSS", "NPROC", "NOFILE", "MEMLOCK", "AS")


_SUBMITTER_RLIMITS: dict[str, int] | None = None


def own_file_limits() -> None:
    """Let this command write its state whatever ``ulimit -f`` the user set (the job still gets
    that limit: it is remembered first, for :func:`current_rlimits`)."""
    import resource

    global _SUBMITTER_RLIMITS
    if _SUBMITTER_RLIMITS is None:
        _SUBMITTER_RLIMITS = current_rlimits()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    except (ValueError, OSError):
        pass


def current_rlimits() -> dict[str, int]:
    """The submitting shell's soft limits, by Slurm's names (what sbatch records for the job)."""
    import resource

    if _SUBMITTER_RLIMITS is not None:
        return dict(_SUBMITTER_RLIMITS)
    found = {}
    for name in PROPAGATED_RLIMITS:
        res = getattr(resource, f"RLIMIT_{name}", None)
        if res is not None:
            found[name] = resource.getrlimit(res)[0]
    return found


def apply_rlimits(limits: dict[str, int]) -> None:
    import resource

    for name, soft in limits.items():
        res = getattr(resource, f"RLIMIT_{name}", None) if name in PROPAGATED_RLIMITS else None
        if res is None or not isinstance(soft, int):
            continue
        try:
            _, hard = resource.getrlimit(res)
            if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard):
                soft = hard
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError):
            pass


def descendants(pid: int | None = None) -> list[psutil.Process]:
    try:
        return psutil.Process(pid or os.getpid()).children(recursive=True)
    except psutil.Error:
        return []


def send(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def tree_rss(procs: Iterable[psutil.Process]) -> int:
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def rss_by_step_node(procs: Iterable[psutil.Process], batch_node: str) -> dict[tuple[str, str], int]:
    """RSS per (step, node): srun tasks carry SLURM_STEP_ID and SLURMD_NODENAME in their environment;
    every other process of the job (the batch shell, srun itself) is the batch step's, on its node."""
    usage: dict[tuple[str, str], int] = {}
    for proc in procs:
        try:
            rss = proc.memory_info().rss
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        step = env.get("SLURM_STEP_ID")
        key = (step, env.get("SLURMD_NODENAME", batch_node)) if step is not None else ("batch", batch_node)
        usage[key] = usage.get(key, 0) + rss
    return usage


def job_processes(job_id: int, state_dir: str) -> list[psutil.Process]:
    """Every process of this user carrying the job's marker in its environment (fallback cleanup)."""
    found = []
    me = os.getuid()
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.info["uids"].real != me or proc.pid == os.getpid():
                continue
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("SLURM_JOB_ID") == str(job_id) and env.get("SLURM_CONF", "").startswith(state_dir):
            found.append(proc)
    return found


def step_processes(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes of srun steps (they carry SLURM_STEP_ID), not the batch shell's own children."""
    found = []
    for proc in procs:
        try:
            if "SLURM_STEP_ID" in proc.environ():
                found.append(proc)
        except (psutil.Error, OSError):
            pass
    return found


def alive(pid: int | None, ctime: float | None) -> bool:
    """Is this exact process (pid + creation time) still running?"""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if ctime is not None and abs(proc.create_time() - ctime) > 0.5:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
