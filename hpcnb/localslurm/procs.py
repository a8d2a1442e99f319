"""Process plumbing: spawning with exact fds and env, process trees, signalling whole jobs."""
from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .apart import NodeView


class _LazyPsutil:
    """psutil, imported on first use: most commands (sbatch, squeue...) never need it."""

    def __getattr__(self, name: str):
        import psutil as real

        globals()["psutil"] = real
        return getattr(real, name)


psutil = _LazyPsutil()

_PR_SET_CHILD_SUBREAPER = 36
# what a supervisor waits for (sigtimedwait): blocked before it starts, so none is lost meanwhile
SUPERVISOR_SIGNALS = frozenset({signal.SIGCHLD, signal.SIGUSR2})


def become_subreaper() -> None:
    """Orphaned descendants (daemons, double forks) re-parent to us, so a job can't escape its tree."""
    prctl = libc_prctl()
    if prctl is not None:
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


@functools.cache
def libc_prctl() -> Any:
    """libc's ``prctl`` through ctypes (None where there is none). Found once: the controller calls
    this before it forks, so that no batch supervisor pays the ~3 ms of importing ctypes again."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _join_own_group(pid: int) -> None:
    """setpgid(pid, pid), from parent and child both, so neither races the other."""
    try:
        os.setpgid(pid, 0)
    except OSError:  # the child already exec'd (EACCES) or ended (ESRCH): it set its group itself
        pass


def hand_terminal(fd: int, holder: int, group: int) -> None:
    """If the terminal on ``fd`` has group ``holder`` in its foreground, give that to ``group``."""
    try:
        if not os.isatty(fd) or os.tcgetpgrp(fd) != holder:
            return
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            os.tcsetpgrp(fd, group)
        finally:
            signal.signal(signal.SIGTTOU, old)
    except OSError:
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
    own_group: bool = False,
    search: bool = True,
    view: NodeView | None = None,
) -> int:
    """fork + execve with fds 0-2 set, default signals, and ``pid_var`` set to the child's own pid.
    ``own_group`` puts the child in a process group of its own (salloc's command, signalled by killpg);
    ``argv[0]`` is looked up on ``env``'s PATH unless not ``search`` (then it is a path, as given).
    ``view``: the child runs as if on that virtual node (its hostname and ``/tmp``: :mod:`.apart`).

    ``rlimits`` (name -> soft limit, e.g. ``{"FSIZE": 1048576}``) are the submitting shell's
    limits, applied as Slurm's PropagateResourceLimits=ALL does (never above the hard limit here).
    """
    parent_group = os.getpgrp()
    pid = os.fork()
    if pid:
        if own_group:
            _join_own_group(pid)
        return pid
    try:
        if own_group:
            _join_own_group(0)
            hand_terminal(fds[0], parent_group, os.getpid())  # as salloc: the command owns the terminal, Ctrl-C included
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
        if view is not None:
            _on_node(view, cwd, error_prefix)
        else:
            os.chdir(cwd)
        if search:
            os.execvpe(argv[0], argv, env)
        os.execve(argv[0], argv, env)
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


def _on_node(view: NodeView, cwd: str, error_prefix: str) -> None:
    """In the child: enter ``view``'s node; change to ``cwd`` there, or to ``/tmp`` as slurmstepd
    does when the folder is not on that node. (``HOSTNAME`` stays as the job's environment has it: a
    task on node2 inherits the batch shell's ``node1``, as with a real Slurm.)"""
    from .apart import enter

    try:
        enter(view)
    except OSError as err:
        os.write(2, f"{error_prefix}: error: cannot start the task on {view.node}: {err.strerror}\n".encode())
        os._exit(1)
    try:
        os.chdir(cwd)
    except OSError as err:
        os.write(2, f"{error_prefix}: error: couldn't chdir to `{cwd}': {err.strerror}: going to /tmp instead\n"
                 .encode())
        os.chdir("/tmp")


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


#: The command line of the controller and of the batch supervisors it forks (a fork keeps it).
DAEMON_MODULE = "hpcnb.localslurm.controller"


def descendants(pid: int | None = None) -> list[psutil.Process]:
    """Every process below ``pid`` (default: this one), except the local Slurm's own daemons.

    A command that starts the controller (``srun``, ``salloc``, any command inside a job) is its
    parent, and a subreaper (a supervisor, salloc, a stand-alone srun) inherits it when that command
    exits. The controller and the supervisors it forks are not the job's: killing them with the job
    killed every other job's supervisor (NODE_FAIL at launch), so their subtrees are left out.

    The tree is walked through ``/proc/PID/task/*/children``: psutil's ``children()`` reads the
    ``stat`` of every process on the machine, once per call, and supervisors call this often."""
    root = pid or os.getpid()
    controller = _controller_pid()
    if not _has_children_files():
        return _descendants_by_scan(root, controller)
    found, todo = [], [root]
    while todo:
        for child in _children(todo.pop(0)):
            if _is_daemon_pid(child, controller):
                continue
            try:
                found.append(psutil.Process(child))
            except psutil.Error:  # it ended meanwhile (its own children re-parent to a subreaper)
                continue
            todo.append(child)
    return found


def _children(pid: int) -> list[int]:
    """The children of ``pid`` (of each of its threads), from /proc; none if it has gone."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as fh:
                kids.extend(int(k) for k in fh.read().split())
        except OSError:  # the thread ended
            pass
    return kids


_CHILDREN_FILES: bool | None = None


def _has_children_files() -> bool:
    """Does this kernel have /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN)?"""
    global _CHILDREN_FILES
    if _CHILDREN_FILES is None:
        _CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    return _CHILDREN_FILES


def _controller_pid() -> int | None:
    """The controller's pid, as it wrote it into its lock file when it took the lock."""
    from . import paths

    try:
        return int(paths.lock_path().read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _is_daemon_pid(pid: int, controller: int | None) -> bool:
    """Is ``pid`` the controller or a supervisor it forked? Known by who it is (the pid in the
    controller's lock file, or that pid's child), never by its command line alone: a job's
    process may call itself anything (``exec -a hpcnb.localslurm.controller sleep``)."""
    if controller is None or not _daemon_command_line(pid):
        return False
    return pid == controller or _parent(pid) == controller


def _daemon_command_line(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return DAEMON_MODULE.encode() in fh.read().split(b"\0")
    except OSError:
        return False


def _parent(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def _descendants_by_scan(pid: int, controller: int | None) -> list[psutil.Process]:
    """:func:`descendants` through psutil (a scan of every process), where /proc lacks children files."""
    try:
        tree = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    daemons = {proc.pid for proc in tree if _is_daemon_pid(proc.pid, controller)}
    if not daemons:
        return tree
    parent = {}
    for proc in tree:
        try:
            parent[proc.pid] = proc.ppid()
        except psutil.Error:
            parent[proc.pid] = None
    return [proc for proc in tree if not _below(proc.pid, daemons, parent)]




def _below(pid: int, daemons: set[int], parent: dict[int, int | None]) -> bool:
    """Is ``pid`` one of ``daemons`` or below one (walking up through ``parent``)?"""
    while pid is not None:
        if pid in daemons:
            return True
        pid = parent.get(pid)
    return False


def processes(pids: Iterable[int]) -> list[psutil.Process]:
    """The processes of these pids that still exist (zombies included)."""
    found = []
    for pid in pids:
        try:
            found.append(psutil.Process(pid))
        except psutil.Error:
            pass
    return found


def send(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def rss_by_step_node(procs: Iterable[psutil.Process], batch_node: str) -> dict[tuple[str, str], int]:
    """RSS per (step, node): srun tasks carry SLURM_STEP_ID and SLURMD_NODENAME in their environment;
    every other process of the job (the batch shell, srun itself) is the batch step's, on its node.

    A child whose memory is its parent's to the byte is counted once, with the parent: between
    ``vfork`` and ``exec`` (``subprocess`` in a 300 MB PyTorch process, sampled at that moment on a
    busy machine) the child *is* the parent's memory, which a real Slurm's cgroup counts once."""
    sampled: dict[int, tuple[int, tuple[int, int], psutil.Process]] = {}
    for proc in procs:
        try:
            mem = proc.memory_info()
            sampled[proc.pid] = (proc.ppid(), (mem.rss, mem.vms), proc)
        except (psutil.Error, OSError):
            continue
    usage: dict[tuple[str, str], int] = {}
    for parent, (rss, vms), proc in sampled.values():
        if parent in sampled and sampled[parent][1] == (rss, vms):
            continue
        key = step_and_node(proc, batch_node)
        if key is not None:
            usage[key] = usage.get(key, 0) + rss
    return usage


def step_and_node(proc: psutil.Process, batch_node: str) -> tuple[str, str] | None:
    """The (step, node) a process of the job belongs to (:func:`rss_by_step_node`); None if it is gone."""
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return None
    step = env.get("SLURM_STEP_ID")
    return (step, env.get("SLURMD_NODENAME", batch_node)) if step is not None else ("batch", batch_node)


def step_lookup(procs: Iterable[psutil.Process], batch_node: str) -> Callable[[int], str | None]:
    """The step (``batch``, ``0``...) of one of these processes by pid, read from its environment
    when asked: a task srun forked carries the batch step's environment until it execs."""
    by_pid = {proc.pid: proc for proc in procs}

    def step_of(pid: int) -> str | None:
        key = step_and_node(by_pid[pid], batch_node) if pid in by_pid else None
        return key[0] if key is not None else None

    return step_of


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


def gone(proc: psutil.Process) -> bool:
    """Has this process ended (exited, or a zombie waiting to be reaped)?"""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def alive(pid: int | None, ctime: float | None) -> bool:
    """Is this exact process (pid + :func:`create_time`) still running (and not a zombie)?"""
    fields = _stat_fields(pid) if pid else None
    if fields is None or fields[0] == b"Z":
        return False
    return ctime is None or abs(_start(fields) - ctime) <= 0.5


def create_time(pid: int) -> float | None:
    """When the process started, in seconds since boot (``/proc/PID/stat``). No wall clock is
    involved: psutil's epoch-based create_time() moves when the clock is stepped, which made a
    live supervisor look dead (NODE_FAIL)."""
    fields = _stat_fields(pid)
    return _start(fields) if fields is not None else None


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()
    except OSError:
        return None


def _start(fields: list[bytes]) -> float:
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks
