"""A sandbox for untrusted notebook code: a Jupyter kernel inside bubblewrap, as an unprivileged user.

The grader (:mod:`hpcnb.course.grading`) executes each submission with :class:`SandboxedExecute`, nbgrader's
Execute preprocessor whose kernel :class:`SandboxKernelManager` starts here (both, the grader's side, in
:mod:`hpcnb.course.sandbox_jupyter`; this module is the launcher and the kernel inside). Only the kernel runs
inside; nbgrader and nbclient stay outside, so the notebook file (hidden tests of cells not yet run),
the source notebooks, the gradebook and the results never enter the sandbox: a cell's code reaches
the kernel when it runs, as in any Jupyter session.

``python -m hpcnb.course.sandbox run [...] -- COMMAND`` (the kernel's launch command) runs as the grader:

* as root it binds what the sandbox needs into a private staging area (``/root`` is closed to
  other users), then becomes the user ``hpcnb-grader`` (created if missing); otherwise it stays the
  user it is, and bubblewrap's user namespace keeps everything else out of sight just the same;
* it execs ``bwrap`` with new user, mount, pid, network (only a loopback that is up), IPC, UTS and
  cgroup namespaces and ``--die-with-parent``; user namespaces nest inside it, as on a cluster's
  compute nodes (the local Slurm's nodes apart and Charliecloud need them: without them a job's
  ``/tmp`` would be shared by its nodes and a mistake that fails on a cluster would pass here), bounded
  by the sandbox's limits; the root holds read-only
  binds of ``/usr``, a few ``/etc`` files, the Python prefixes and the ``hpcnb`` package (not the
  course checkout: no ``solutions/``, no tests), the course's container image (lesson 3b), a generated ``/etc/passwd``, ``/etc/group`` and
  ``/etc/hosts``, and size-limited tmpfs for the home, ``/tmp`` and ``/dev/shm``; the rest is
  read-only. The environment is rebuilt from nothing (no tokens, agents or paths of the grader);
* before, the launcher enters a cgroup of its own where one can be made (:mod:`hpcnb.course.cgroup`):
  memory (tmpfs included) and processes are then bounded for the whole sandbox;
* inside, ``prlimit`` sets :class:`Limits` (CPU seconds, address space, processes and threads,
  file size, open files; no core files) on the command. Processes are counted per sandbox: each
  has its own user namespace, so one submission's fork bomb leaves the next one alone;
* when the command ends, the pid namespace ends: every process it left behind (a ``setsid``
  double fork included) is killed, and the tmpfs (with whatever it held) is gone.

Code that submits Slurm jobs gets a private local Slurm (``HPCNB_SLURM=local``, its state in the
sandbox's home): it lives and dies with the sandbox, and never sees the grader's jobs.

The kernel talks ZeroMQ over ``ipc`` sockets in the sandbox's ``/run/kernel``, which the grader
reaches through ``/proc/PID/root`` (no network is shared). What the feedback then tells the student:

* output beyond ``SandboxedExecute.max_output_bytes`` per cell, or ``max_notebook_output_bytes`` per
  notebook, is dropped with a note (:mod:`hpcnb.course.outputs`: what counts; display updates count
  too: each copy of the data they replace, charged to the running cell); messages
  over MAX_MESSAGE_BYTES are refused and at most MAX_QUEUED_MESSAGES wait (ZeroMQ; both in :mod:`.kernels`), so a flood
  costs the grader little memory (a message of many parts: the grader's heap is bounded,
  ``outputs.bound_grader_memory``), and output that never arrived is noted too;
* a cell past its time limit: copies of the kernel made by ``os.fork()`` are stopped (said how
  many), the kernel is interrupted, and only a kernel that then never answers ends the notebook;
* processes still running after the last cell are listed in a note, then stopped with the sandbox.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import pwd
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

from hpcnb.course import cgroup, outputs

GRADER_USER = "hpcnb-grader"
STUDENT = "student"
HOME = f"/home/{STUDENT}"
HOSTNAME = "sandbox"
KERNEL_DIR = "/run/kernel"  # the kernel's connection file and ipc sockets, inside
CONNECTION_FILE = f"{KERNEL_DIR}/connection.json"
START_TIMEOUT = 60.0  # seconds for bwrap to report its pid namespace
DEFAULT_CPU_SECONDS = 3600
KERNEL_OUTPUT_BYTES = 1 << 20  # per stream and cell, kept by the kernel: its messages stay below MAX_MESSAGE_BYTES
INTERRUPT_GRACE = 10.0  # seconds at least for an interrupted kernel to answer
INTERRUPT_AGAIN = 3.0  # seconds without an answer after which a fork bomb's kernel is interrupted again
ETC_FILES = (
    "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf",
    "fonts", "mime.types", "protocols", "services", "host.conf", "gai.conf", "bash.bashrc", "profile",
    "inputrc", "os-release", "debian_version", "ssh/ssh_config", "ssh/ssh_config.d", "ssl/certs",
    "ssl/openssl.cnf", "timezone", "matplotlibrc",
    "profile.d", "lmod",  # a login shell's `module` (Lmod): jobs with --export=NONE or #!/bin/bash -l
)
TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # links into /usr, or folders


class SandboxError(RuntimeError):
    """The sandbox cannot be set up on this machine (no bwrap, no user namespaces ...)."""


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use. ``memory_bytes`` and ``processes`` bound the whole sandbox (its
    tmpfs included) where a cgroup can be made (:mod:`hpcnb.course.cgroup`), and each process
    anyway (rlimits: address space; processes and threads of the sandbox's user); the other
    rlimits are per process. ``disk_bytes``: the writable tmpfs (home, /tmp, /dev/shm) together.
    ``cpu_seconds`` None: the notebook's time limit when grading, else DEFAULT_CPU_SECONDS."""

    cpu_seconds: int | None = None
    memory_bytes: int = 8 << 30
    processes: int = 512
    file_bytes: int = 512 << 20
    disk_bytes: int = 1 << 30
    open_files: int = 1024

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Limits:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown sandbox limit(s): {', '.join(sorted(unknown))}")
        bad = [k for k, v in values.items() if v is not None and not str(v).isdigit()]
        if bad:
            raise ValueError(f"sandbox limit(s) {', '.join(sorted(bad))}: not a whole number of seconds, bytes "
                             "or processes")
        return cls(**{k: None if v is None else int(v) for k, v in values.items()})

    def tmpfs_sizes(self) -> tuple[int, int, int]:
        """Sizes of the home, /tmp and /dev/shm tmpfs: RAM-backed, ``disk_bytes`` in all."""
        return self.disk_bytes // 2, self.disk_bytes // 4, self.disk_bytes // 4

    def prlimit_args(self) -> list[str]:
        return [f"--cpu={self.cpu_seconds or DEFAULT_CPU_SECONDS}", f"--as={self.memory_bytes}",
                f"--nproc={self.processes}", f"--fsize={self.file_bytes}", f"--nofile={self.open_files}", "--core=0"]


# ------------------------------------------------------------------ the grader's user

def grader_ids() -> tuple[int, int] | None:
    """(uid, gid) of ``hpcnb-grader``, created if missing, when running as root; else None
    (the sandbox then runs as the current user, in its own user namespace)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(GRADER_USER)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                               "/nonexistent", "--shell", "/usr/sbin/nologin", GRADER_USER],
                              capture_output=True, text=True)
        try:  # another grader may have made it at the same moment
            entry = pwd.getpwnam(GRADER_USER)
        except KeyError:
            raise SandboxError(f"cannot create the user {GRADER_USER}: {made.stderr.strip()}") from None
    return entry.pw_uid, entry.pw_gid


# ------------------------------------------------------------------ what the sandbox sees

def _python_dirs() -> list[Path]:
    """The Python prefixes and the hpcnb package: what the kernel imports."""
    import hpcnb

    found: list[Path] = []
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        found.append(Path(prefix))
    found.append(Path(hpcnb.__file__).resolve().parent)
    return sorted({p for p in found if p.exists() and not _under(p, Path("/usr"))})


def _container_images() -> list[Path]:
    """The folder of the course's Charliecloud image (world-readable), where it is built."""
    from hpcnb.lessons import containers

    found = containers.image()
    return [found.parent] if found else []


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def bind_sources() -> list[Path]:
    """Host paths bound read-only at the same place in the sandbox."""
    paths = [Path("/usr")]
    paths += [Path("/etc") / name for name in ETC_FILES if (Path("/etc") / name).exists()]
    paths += [Path("/sys/devices/system/cpu")] if Path("/sys/devices/system/cpu").is_dir() else []
    dirs = [p for p in [*_python_dirs(), *_container_images()] if not any(_under(p, q) for q in paths)]
    return paths + [p for p in dirs if not any(q != p and _under(p, q) for q in dirs)]


def sandbox_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment inside: nothing is inherited."""
    import hpcnb

    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": HOME, "USER": STUDENT, "LOGNAME": STUDENT, "SHELL": "/bin/bash", "LANG": "C.UTF-8",
        "TMPDIR": "/tmp", "TERM": "dumb", "MPLBACKEND": "Agg",
        # hpcnb from a checkout that is not installed: its parent folder holds only hpcnb inside
        "PYTHONPATH": str(Path(hpcnb.__file__).resolve().parent.parent),
        "HPCNB_SLURM": "local", "HPCNB_STATE_DIR": f"{HOME}/.hpcnb/slurm",
        "HPCNB_SANDBOX": "1",
    }
    env.update(extra or {})
    return env


def _text_files(uid: int, gid: int) -> dict[str, str]:
    return {
        "/etc/passwd": (f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                        f"{STUDENT}:x:{uid}:{gid}:{STUDENT}:{HOME}:/bin/bash\n"
                        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
        "/etc/group": f"root:x:0:\n{STUDENT}:x:{gid}:\nnogroup:x:65534:\n",
        "/etc/hosts": f"127.0.0.1 localhost {HOSTNAME}\n::1 localhost ip6-localhost ip6-loopback {HOSTNAME}\n",
    }


def bwrap_argv(sources: dict[Path, str], data_fds: dict[str, int], limits: Limits, env: dict[str, str],
               command: list[str], info_fd: int | None = None) -> list[str]:
    """The bwrap command line: ``sources`` maps each sandbox path to the host path bound there."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--die-with-parent",
            "--new-session", "--hostname", HOSTNAME]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    home, tmp, shm = (str(size) for size in limits.tmpfs_sizes())
    # the writable places first: a bind below one (a venv in /tmp) stays
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", shm, "--tmpfs", "/dev/shm",
             "--size", tmp, "--tmpfs", "/tmp", "--size", home, "--tmpfs", HOME,
             "--size", str(1 << 20), "--tmpfs", "/run", "--dir", KERNEL_DIR]
    for name in TOP_LEVEL:
        top = Path("/") / name
        if top.is_symlink():
            argv += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            argv += ["--ro-bind", str(top), str(top)]
    for dest, src in sources.items():
        argv += ["--ro-bind", src, str(dest)]
    for dest, fd in data_fds.items():
        # /etc's files are plain files of the (then read-only) root: a container runtime inside binds
        # /etc/hosts and /etc/passwd into its image, which a bind of bwrap's deleted copy refuses (ENOENT)
        argv += ["--perms", "0644", "--file", str(fd), dest] if dest.startswith("/etc/") \
            else ["--ro-bind-data", str(fd), dest]
    argv += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", HOME, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", "prlimit", *limits.prlimit_args(), "--", *command]


# ------------------------------------------------------------------ the launcher (as the grader)

_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18


def _libc_call(name: str, *args: Any) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}{args}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _libc_call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _stage(paths: list[Path]) -> dict[Path, str]:
    """As root: a private mount namespace where each path is bound read-only below a fresh tmpfs on
    /tmp that the unprivileged user can walk; returns {sandbox path: staged path}."""
    _libc_call("unshare", _CLONE_NEWNS)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    handles = {p: (os.open(p, os.O_PATH), p.is_dir()) for p in paths}  # in this namespace, before
    _mount("hpcnb-stage", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")  # /tmp is covered
    staged: dict[Path, str] = {}
    for index, (path, (fd, is_dir)) in enumerate(handles.items()):
        target = f"/tmp/{index}"
        if is_dir:
            os.mkdir(target)
        else:
            Path(target).touch()
        _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
        _mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        os.close(fd)
        staged[path] = target
    return staged


def _memfd(text: str) -> int:
    fd = os.memfd_create("hpcnb-sandbox", 0)
    os.write(fd, text.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run(command: list[str], limits: Limits, *, env: dict[str, str] | None = None,
        connection_file: str | None = None, info_file: str | None = None, discard_output: bool = False,
        test_connection_file: str | None = None) -> NoReturn:
    """Become ``bwrap`` running ``command`` in the sandbox (this process is replaced).
    ``discard_output``: the command's stdout and stderr go to /dev/null, not to ours (a kernel
    copies what it prints there, and the grader reads ours). ``test_connection_file``: passed
    inside as an open descriptor only, for the kernel to hand on to the test kernel
    (:mod:`hpcnb.course.testkernel`)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    ids = grader_ids()
    uid, gid = ids or (os.getuid(), os.getgid())
    data = {dest: _memfd(text) for dest, text in _text_files(uid, gid).items()}
    if connection_file is not None:
        data[CONNECTION_FILE] = os.open(connection_file, os.O_RDONLY)
    info_fd = os.open(info_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if info_file else None
    passed = [os.open(test_connection_file, os.O_RDONLY)] if test_connection_file else []
    if passed:
        env = {**(env or {}), "HPCNB_TEST_KERNEL_FD": str(passed[0])}
    paths = bind_sources()
    cgroup.enter(f"{cgroup.PREFIX}{os.getpid()}", limits.memory_bytes, limits.processes)
    sources = _stage(paths) if ids else {p: str(p) for p in paths}
    if ids:
        _, most = resource.getrlimit(resource.RLIMIT_NPROC)  # the user namespace's ceiling: the count
        resource.setrlimit(resource.RLIMIT_NPROC, (most, most))  # per sandbox is set inside (prlimit)
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    for fd in [*data.values(), *([info_fd] if info_fd is not None else []), *passed]:
        os.set_inheritable(fd, True)
    if discard_output:
        command = ["sh", "-c", 'exec "$@" >/dev/null 2>&1', "sh", *command]
    argv = bwrap_argv(sources, data, limits, sandbox_env(env), command, info_fd)
    outputs.lift_grader_bound()  # the grader's heap bound is not the kernel's
    os.execve(bwrap, argv, {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})


def probe(timeout: float = 60.0) -> None:
    """Start a trivial sandbox; raise SandboxError saying why when it cannot work here."""
    if shutil.which("bwrap") is None:
        raise SandboxError("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    argv = [sys.executable, "-m", "hpcnb.course.sandbox", "run", "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"a trivial sandbox did not finish within {timeout:g} s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
        raise SandboxError(f"bubblewrap cannot build the sandbox here: {said}")


# ------------------------------------------------------------------ the kernel (inside)

def kernel(argv: list[str]) -> None:
    """The sandbox's kernel: hpcnb's (PATH finds the local Slurm first), with two changes that make
    a hostile or careless notebook cheaper to grade (the grader does not rely on them):

    * a copy of the kernel made by ``os.fork()`` in a cell that gets back to the kernel's loop (a
      fork bomb's child) exits instead of lingering as a mute kernel holding a process slot;
    * each stream keeps at most KERNEL_OUTPUT_BYTES per cell, so an interrupted flood of output is
      not serialised and sent for minutes before the kernel can answer."""
    from ipykernel.iostream import OutStream
    from jupyter_client.session import Session

    from hpcnb.backend import slurm_env
    from hpcnb.course.testkernel import start_beside

    os.environ.update(slurm_env())
    start_beside()  # the test kernel, when the grader asked for one: before any code of the notebook's
    send, write = Session.send, OutStream.write

    def send_or_leave(self: Session, *args: Any, **kwargs: Any) -> Any:
        if self.check_pid and os.getpid() != self.pid:
            os._exit(1)
        return send(self, *args, **kwargs)

    def capped_write(self: OutStream, string: str) -> int | None:
        cell = frozenset(self.parent_header.items())
        if getattr(self, "_hpcnb_cell", None) != cell:
            self._hpcnb_cell, self._hpcnb_written = cell, 0
        before = self._hpcnb_written
        self._hpcnb_written += len(string)
        if self._hpcnb_written <= KERNEL_OUTPUT_BYTES or not isinstance(string, str):
            return write(self, string)
        if before <= KERNEL_OUTPUT_BYTES:
            write(self, f"\n[hpcnb sandbox: this cell wrote more than {KERNEL_OUTPUT_BYTES >> 20} MiB to "
                        f"{self.name}: the rest was dropped]\n")
        return len(string)

    Session.send = send_or_leave  # type: ignore[method-assign]
    OutStream.write = capped_write  # type: ignore[method-assign]
    from ipykernel.kernelapp import launch_new_instance

    sys.argv = [sys.argv[0], *argv]
    launch_new_instance()


# ------------------------------------------------------------------ command line

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcnb.course.sandbox", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run", help="run COMMAND in the sandbox (replaces this process with bwrap)")
    go.add_argument("--limits", default="{}", help="JSON object of Limits fields")
    go.add_argument("--env", default="{}", help="JSON object of extra variables inside")
    go.add_argument("--connection-file", help="a kernel connection file, seen inside as " + CONNECTION_FILE)
    go.add_argument("--info-file", help="where bwrap writes its pid namespace's pid (JSON)")
    go.add_argument("--discard-output", action="store_true", help="COMMAND's stdout and stderr to /dev/null")
    go.add_argument("--test-connection-file", help="the test kernel's connection file, passed as a descriptor")
    go.add_argument("cmd", nargs=argparse.REMAINDER)
    sub.add_parser("probe", help="exit 0 if a sandbox can be built here, else say why")
    sub.add_parser("kernel", help="(inside the sandbox) the Jupyter kernel", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "kernel":
        kernel(rest)
        return 0
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "probe":
            probe()
            print("the sandbox works here")
            return 0
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser.error("run: no COMMAND given")
        run(cmd, Limits.from_dict(json.loads(args.limits)), env=json.loads(args.env),
            connection_file=args.connection_file, info_file=args.info_file, discard_output=args.discard_output,
            test_connection_file=args.test_connection_file)
    except (SandboxError, OSError, ValueError) as err:
        print(f"hpcnb.course.sandbox: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
