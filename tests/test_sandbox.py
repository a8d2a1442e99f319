"""hpcnb.course.sandbox: what code sees and may use inside the grader's bubblewrap sandbox (real bwrap).

The hostile submissions graded end to end (nbgrader) are in tests/test_grading_sandbox.py.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hpcnb.course import cgroup, sandbox
from hpcnb.course.grading import ROOT, SOLUTIONS_DIR

pytestmark = pytest.mark.skipif(sandbox.shutil.which("bwrap") is None, reason="bubblewrap is not installed")

LIMITS = sandbox.Limits(cpu_seconds=60, memory_bytes=2 << 30, processes=64, file_bytes=8 << 20,
                        disk_bytes=32 << 20, open_files=128)


def in_sandbox(code: str, limits: sandbox.Limits = LIMITS, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hpcnb.course.sandbox", "run", "--limits", json.dumps(dataclasses.asdict(limits)),
            "--", sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_what_the_sandbox_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCNB_TEST_SECRET", "tok-0123456789")
    code = f"""
        import errno, json, os, resource, socket
        def attempt(action):
            try:
                action()
                return "ok"
            except OSError as err:
                return errno.errorcode[err.errno]
        def write(path, size=1):
            with open(path, "wb") as fh:
                fh.write(b"x" * size)
        def fill(folder):
            for i in range(100):
                write(f"{{folder}}/f{{i}}", 1 << 20)
        print(json.dumps({{
            "uid": os.getuid(), "user": os.environ.get("USER"), "cwd": os.getcwd(),
            "env": sorted(os.environ),
            "repo": sorted(os.listdir({str(ROOT)!r})),
            "hidden": [p for p in [{str(SOLUTIONS_DIR)!r}, {str(ROOT / "tests")!r}, "/root/.ssh", "/etc/shadow",
                                   "/work/.library", "/var/run"] if os.path.exists(p)],
            "limits": [resource.getrlimit(getattr(resource, n))[0]
                       for n in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE")],
            "read_only": [attempt(lambda p=p: write(p)) for p in ("/usr/x", "/etc/x", "/x", {str(ROOT / "hpcnb" / "x")!r})],
            "big_file": attempt(lambda: write("/tmp/big", 9 << 20)),
            "fill_home": attempt(lambda: fill(os.environ["HOME"])),
            "net": attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=5)),
            "loopback": attempt(lambda: socket.create_server(("127.0.0.1", 0)).close()),
        }}))
    """
    done = in_sandbox(code)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    if os.geteuid() == 0:
        assert seen["uid"] == sandbox.pwd.getpwnam(sandbox.GRADER_USER).pw_uid != 0
    assert (seen["user"], seen["cwd"]) == (sandbox.STUDENT, sandbox.HOME)
    assert "HPCNB_TEST_SECRET" not in seen["env"] and "SSH_AUTH_SOCK" not in seen["env"]
    assert "tok-0123456789" not in done.stdout
    assert "solutions" not in seen["repo"] and "tests" not in seen["repo"] and "hpcnb" in seen["repo"]
    assert seen["hidden"] == []
    assert seen["limits"] == [60, 2 << 30, 64, 8 << 20, 128]
    assert seen["read_only"] == ["EROFS"] * 4
    assert seen["big_file"] == "EFBIG"
    assert seen["fill_home"] == "ENOSPC"
    assert seen["net"] == "ENETUNREACH"
    assert seen["loopback"] == "ok"  # torch DDP and the local Slurm need it


def test_user_namespaces_nest_but_open_nothing_the_sandbox_closes() -> None:
    """Jobs in a sandbox run on nodes apart and in containers, which need user namespaces; as root of
    one, a submission still cannot write, remount or see what the sandbox keeps from it."""
    code = f"""
        import subprocess
        from hpcnb.localslurm import apart
        print(apart.probe())
        inside = ("mount -o remount,rw / 2>&1 | head -n 1; touch /etc/passwd /usr/x 2>&1;"
                  "ls {SOLUTIONS_DIR} 2>&1; id -u")
        print(subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", inside],
                             capture_output=True, text=True).stdout)
    """
    done = in_sandbox(code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "apart", done.stdout
    assert "permission denied" in lines[1], done.stdout
    assert lines[2:4] == ["touch: cannot touch '/etc/passwd': Read-only file system",
                          "touch: cannot touch '/usr/x': Read-only file system"], done.stdout
    assert "No such file or directory" in lines[4] and lines[5] == "0", done.stdout


def test_processes_are_counted_per_sandbox_and_end_with_it() -> None:
    """One sandbox's fork bomb takes its own process slots only; a setsid double fork dies with it."""
    hog = """
        import os, time
        done_r, done_w = os.pipe()  # close-on-exec: empty once the sleep has replaced its copy
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "98761"])
            os._exit(0)
        os.close(done_w)
        os.read(done_r, 1)  # the double fork is done before the bomb takes every slot
        n = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                n += 1
        except OSError as err:
            print(n, err.strerror, flush=True)
        time.sleep(5)
    """
    first = subprocess.Popen([sys.executable, "-m", "hpcnb.course.sandbox", "run", "--limits",
                              json.dumps(dataclasses.asdict(LIMITS)), "--", sys.executable, "-c", textwrap.dedent(hog)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        forked, why = first.stdout.readline().split(" ", 1)
        assert 50 < int(forked) < 64 and "unavailable" in why  # the limit, not another's count
        assert first.poll() is None  # still holding its slots
        second = in_sandbox("""
            import os
            pids = [os.fork() or os._exit(0) for _ in range(40)]
            print(len(pids))
        """)
        assert second.returncode == 0 and second.stdout.strip() == "40", second.stderr
        assert escaped(), "the setsid double fork should be running by now"
    finally:
        first.wait(timeout=60)
    deadline = time.time() + 10
    while escaped() and time.time() < deadline:  # killed with the sandbox; reaped a moment later
        time.sleep(0.1)
    assert not escaped()


def escaped() -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "98761"]]


def test_limits_parse() -> None:
    assert sandbox.Limits.from_dict({"processes": "32"}).processes == 32
    with pytest.raises(ValueError, match="unknown sandbox limit"):
        sandbox.Limits.from_dict({"procs": 3})
    with pytest.raises(ValueError, match="processes: not a whole number"):
        sandbox.Limits.from_dict({"processes": "-1"})


def test_probe_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox.probe()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(sandbox.SandboxError, match="apt-get install bubblewrap"):
        sandbox.probe()


def test_staging_leaves_nothing_mounted() -> None:
    """The binds for an unprivileged user live in the launcher's own mount namespace."""
    before = Path("/proc/self/mounts").read_text()
    assert in_sandbox("print('hello')").stdout == "hello\n"
    assert Path("/proc/self/mounts").read_text() == before


def test_a_checkout_under_tmp_is_still_seen(tmp_path: Path) -> None:
    """hpcnb (or a venv) below /tmp is bound over the sandbox's private /tmp, not hidden by it."""
    import shutil

    checkout = tmp_path / "clone"
    shutil.copytree(ROOT / "hpcnb", checkout / "hpcnb", ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / "solutions").mkdir()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "hpcnb.course.sandbox", "run", "--", sys.executable, "-c",
            "import os, hpcnb; print(hpcnb.__file__, sorted(os.listdir(os.path.dirname(os.path.dirname(hpcnb.__file__)))))"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 1) == [str(checkout / "hpcnb" / "__init__.py"), "['hpcnb']\n"]


def test_cpu_seconds_stop_a_spinning_process() -> None:
    started = time.monotonic()
    done = in_sandbox("while True:\n    pass", dataclasses.replace(LIMITS, cpu_seconds=1), timeout=60)
    assert done.returncode in (128 + 9, 128 + 24), (done.returncode, done.stderr)  # SIGKILL or SIGXCPU
    assert time.monotonic() - started < 30


def test_tmpfs_share_the_disk_limit() -> None:
    """The RAM-backed home, /tmp and /dev/shm hold ``disk_bytes`` together, not each."""
    limits = sandbox.Limits(disk_bytes=1 << 30)
    argv = sandbox.bwrap_argv({}, {}, limits, {}, ["true"])
    sizes = [int(argv[i + 1]) for i, arg in enumerate(argv) if arg == "--size" and argv[i + 3] != "/run"]
    assert len(sizes) == 3 and sum(sizes) <= limits.disk_bytes


@pytest.mark.skipif(not cgroup.available(), reason="no cgroup can be made here: the limits are per process")
def test_memory_is_bounded_for_the_whole_sandbox() -> None:
    """Forked children, and files in the RAM-backed tmpfs, share one memory limit."""
    limits = dataclasses.replace(LIMITS, memory_bytes=512 << 20, disk_bytes=2 << 30)
    done = in_sandbox("""
        import os, time
        kids = []
        for _ in range(3):
            if (pid := os.fork()) == 0:
                data = b"x" * (200 << 20)
                time.sleep(3)
                os._exit(0)
            kids.append(pid)
        print("HELD", sum(os.waitpid(pid, 0)[1] == 0 for pid in kids), flush=True)
        written = 0
        try:
            for i in range(100):
                with open(f"{os.environ['HOME']}/f{i}", "wb") as fh:
                    fh.write(b"x" * (8 << 20))
                written += 8
        except OSError as err:
            print("TMPFS", err.strerror)
        print("WROTE", written, flush=True)
    """, limits)
    held = int(done.stdout.split("HELD ")[1].split()[0])
    assert held < 3, done.stdout + done.stderr
    wrote = done.stdout.split("WROTE ")[1].split()[0] if "WROTE" in done.stdout else "killed"
    assert wrote == "killed" or int(wrote) < 512, done.stdout + done.stderr
