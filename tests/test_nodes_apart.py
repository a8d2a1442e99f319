"""Virtual nodes that are apart (hpcnb/localslurm/apart.py): a task on node2 has node2's hostname
and its job's private /tmp and /dev/shm on node2, as on a real cluster with job_container/tmpfs;
shared folders stay shared."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run

from hpcnb.localslurm import apart

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"


@pytest.fixture(autouse=True)
def nodes_apart(local_slurm: Path) -> None:
    """Probed on this session's local Slurm (not at collection: that would touch the user's state)."""
    if apart.mode() != "apart":
        pytest.skip(f"nodes not apart here: {apart.mode()}")


def sbatch(workdir: Path, script: str, *options: str, env: dict[str, str] | None = None) -> str:
    """Run ``script`` as a batch job and wait; its output."""
    (workdir / "job.sh").write_text("#!/bin/bash\n" + script)
    done = run(["sbatch", "--wait", "-o", "out.txt", *options, "job.sh"], cwd=workdir, env=env)
    assert done.returncode == 0, done.stderr + (workdir / "out.txt").read_text()
    return (workdir / "out.txt").read_text()


def test_each_task_sees_its_own_nodes_hostname(workdir: Path) -> None:
    out = sbatch(workdir, "echo batch $(hostname)\n"
                          "srun -N2 -n2 -l python3 -c 'import os, socket; "
                          "print(socket.gethostname(), os.uname().nodename, os.environ[\"SLURMD_NODENAME\"])'\n",
                 "-N2", "-n2")
    assert "batch node1\n" in out
    assert sorted(line for line in out.splitlines() if line[0].isdigit()) == ["0: node1 node1 node1",
                                                                              "1: node2 node2 node2"], out


@pytest.mark.parametrize("folder", ["/tmp", "/dev/shm"])
def test_node_local_folders_are_private_to_each_node_and_job(workdir: Path, folder: str) -> None:
    """Exercise 2.3's mistake: data unpacked once into /tmp (or the RAM disk) in the batch shell is
    not on node2; nor is it there for the next job on node1."""
    data = f"{folder}/data-$SLURM_JOB_ID"
    out = sbatch(workdir, f'mkdir {data} && touch {data}/a {data}/b\n'
                          f'srun -N2 -n2 -l bash -c "ls {data} 2>/dev/null | wc -l"\n'
                          f'srun -N1 -n1 -w node1 bash -c "echo again \\$(ls {data} | wc -l)"\n'
                          'echo job $SLURM_JOB_ID\n',
                 "-N2", "-n2")
    counts = sorted(line for line in out.splitlines() if line[0].isdigit())
    assert counts == ["0: 2", "1: 0"], out  # task 0 on node1 sees the files, task 1 on node2 none
    assert "again 2" in out  # a later step on node1 sees what the batch shell left there
    job = int(out.split("job ")[1].split()[0])
    later = sbatch(workdir, f"ls -d {folder}/data-* 2>/dev/null | wc -l\n", "-w", "node1")
    assert later.split() == ["0"], f"the next job on node1 sees the last one's {folder}: {later}"
    left = [path for node in ("node1", "node2") for path in apart.private_folders(job, node)]
    give_up = time.monotonic() + 30  # removed by the supervisor just after it records the job's end
    while any(path.exists() for path in left) and time.monotonic() < give_up:
        time.sleep(0.1)
    assert not any(path.exists() for path in left), f"a job's /tmp or /dev/shm outlived it: {left}"


def test_login_tmp_is_not_on_the_nodes_but_the_working_folder_is(workdir: Path) -> None:
    login_only = Path("/tmp") / f"hpcnb-login-{uuid.uuid4().hex}"
    login_only.mkdir()
    try:
        (workdir / "here.txt").write_text("shared\n")
        out = sbatch(workdir, f"ls {login_only} >/dev/null 2>&1 && echo seen || echo unseen\ncat here.txt\n"
                              "srun -n1 cat here.txt\n")
    finally:
        login_only.rmdir()
    assert out.split() == ["unseen", "shared", "shared"], out


def test_a_step_whose_folder_is_not_on_its_node_starts_in_tmp(workdir: Path) -> None:
    out = sbatch(workdir, "mkdir /tmp/w-$SLURM_JOB_ID && cd /tmp/w-$SLURM_JOB_ID\n"
                          "srun -N2 -n2 -l pwd 2>&1\n", "-N2", "-n2")
    assert "slurmstepd-node2: error: couldn't chdir to `/tmp/w-" in out, out
    assert "': No such file or directory: going to /tmp instead" in out and "1: /tmp\n" in out, out
    assert re.search(r"^0: /tmp/w-\d+$", out, re.M), out


def test_shared_mode_on_request(workdir: Path) -> None:
    """HPCNB_NODES=shared (a cluster setting, read by the controller): one host again."""
    env = {**os.environ, "HPCNB_NODES": "shared"}
    status = run([sys.executable, "-m", "hpcnb.cli", "slurm", "status"], env=env)
    assert "nodes: shared: HPCNB_NODES=shared;" in status.stdout, status.stdout
    assert "nodes: apart (" in run([sys.executable, "-m", "hpcnb.cli", "slurm", "status"]).stdout


def test_shared_tops_keep_only_what_the_job_was_given() -> None:
    env = {"HOME": "/tmp/home-x/me", "PATH": "/usr/bin:/tmp/venv-y/bin", "EMPTY": "", "ROOT": "/tmp"}
    tops = apart.shared_tops("/tmp/pytest-of-me/pytest-1/test0", env)
    assert {"/tmp/home-x", "/tmp/venv-y", "/tmp/pytest-of-me"} <= set(tops)
    assert "/tmp" not in tops and all(top.count("/") == 2 for top in tops)


def test_shared_tops_keep_the_local_slurms_own_python(monkeypatch) -> None:
    """A clone in /tmp (the CI's fresh clone): a job that exports nothing still runs its commands' Python."""
    monkeypatch.setattr(sys, "prefix", "/tmp/clone-z/.venv")
    assert "/tmp/clone-z" in apart.shared_tops("/home/me", {})


def test_a_task_of_an_ordinary_user_trusts_the_folders_it_cannot_name() -> None:
    """In a task's user namespace only its user is mapped: root's /tmp and /home show as the overflow
    uid, and srun inside a job refused its own state folder for it (lesson 6 as a student)."""
    from hpcnb.localslurm import paths, procs

    uid = os.getuid() or 54321  # root: check as an ordinary user, whose task gets a user namespace
    top = Path(tempfile.mkdtemp(prefix="apart-user-", dir="/tmp"))
    state, private = top / "state", top / "node2-tmp"
    for folder in (state, private):
        folder.mkdir(mode=0o700)
    for folder in (top, state, private):
        os.chown(folder, uid, uid)
    try:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                if os.getuid() == 0:
                    os.setgroups([])
                    os.setgid(uid)
                    os.setuid(uid)
                    procs.libc_prctl()(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self is ours again, as after exec
                apart.enter(apart.NodeView("node2", str(private), (str(top),)))
                assert Path("/tmp").stat().st_uid != 0, "not in a user namespace"
                paths._check_trusted(state)
                status = 0
            except BaseException as err:  # noqa: BLE001 - reported through the exit status
                os.write(2, f"{type(err).__name__}: {err}\n".encode())
            os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the task refused its state folder"
    finally:
        shutil.rmtree(top, ignore_errors=True)


# -- a job's private /tmp and /dev/shm: out of other jobs' reach, and mounts it cannot undo (issue 40, item 4) --
# Job B (the same user) looks for job A's files by every path a job has: the state folder's copy of A's
# node folders, the same through every process's /proc/PID/root (the controller's, the supervisors', the
# nodes' network holders': all but A's own tasks, which the same user may reach as on a cluster with
# job_container/tmpfs, where /proc/PID/root of another job's task is open to whoever may ptrace it), and
# umount2 of its own /tmp and /dev/shm (which would show this machine's).
PROBE = r"""import ctypes, errno, os, sys
a, sweep = sys.argv[1], sys.argv[2] == "sweep"
nodes = os.environ.get("HPCNB_NODE_TMP") or os.environ["HPCNB_STATE_DIR"] + "/nodes"
targets = [f"{nodes}/node1/tmp_{a}/secret", f"{nodes}/node1/shm_{a}/secret"]
def reads(path):
    try:
        with open(path) as fh:
            return fh.read().strip() == "secret-" + a
    except OSError:
        return False
def of_job_a(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return f"SLURM_JOB_ID={a}".encode() in fh.read().split(b"\0")
    except OSError:
        return False
seen = [path for path in targets if reads(path)]
if sweep:
    pids = [pid for pid in os.listdir("/proc") if pid.isdigit() and not of_job_a(pid)]
    seen += [f"/proc/{pid}/root{path}" for pid in pids for path in targets if reads(f"/proc/{pid}/root{path}")]
print("seen:", len(seen), *seen[:4])
with open("/tmp/mine", "w") as fh:
    fh.write("b")
libc = ctypes.CDLL(None, use_errno=True)
for folder in ("/tmp", "/dev/shm"):
    for flags in (0, 2):  # 2: MNT_DETACH
        done = libc.umount2(folder.encode(), flags)
        print("umount2", folder, flags, f"refused {errno.errorcode.get(ctypes.get_errno(), '')}" if done else "DONE")
print("tmp still mine:", os.path.exists("/tmp/mine") and not os.path.exists("/tmp/secret"))
"""
DRIVER = r"""import os, subprocess, sys, time
def sbatch(*args):
    done = subprocess.run(["sbatch", "--parsable", "-w", "node1", "-n1", "--mem=64M", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
a = sbatch("-o", "a.out", "--wrap", 'echo secret-$SLURM_JOB_ID > /tmp/secret; echo secret-$SLURM_JOB_ID > '
           '/dev/shm/secret; touch ready; until [ -e go ]; do sleep 0.05; done')
give_up = time.monotonic() + 60
while not os.path.exists("ready") and time.monotonic() < give_up:
    time.sleep(0.05)
assert os.path.exists("ready"), "job A did not start"
try:
    sbatch("--wait", "-o", "b.out", "--wrap", f"python3 probe.py {a} {sys.argv[1]}")
finally:
    open("go", "w").close()
print(open("b.out").read(), end="")
"""


def _look_from_another_job(python: str, folder: Path, env: dict[str, str], sweep: bool,
                           user: str | None = None) -> str:
    """Run job A (its secrets in its /tmp and /dev/shm) and job B (the probe) from ``folder``; B's output."""
    (folder / "probe.py").write_text(PROBE)
    (folder / "driver.py").write_text(DRIVER)
    done = _as(user, env, python, "driver.py", "sweep" if sweep else "state", cwd=folder, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _as(user: str | None, env: dict[str, str], *command: str, **kw) -> subprocess.CompletedProcess[str]:
    """``command`` with exactly ``env``, as ``user`` (None: as this process's user)."""
    if user:
        command = (RUNUSER, "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *command)
    return run(list(command), env=env, **kw)


def _assert_private(out: str) -> None:
    assert "seen: 0" in out, f"job B read job A's private files:\n{out}"
    assert out.count(" refused ") == 4 and " DONE " not in out, f"a job undid its /tmp or /dev/shm:\n{out}"
    assert "tmp still mine: True" in out, out


def test_another_job_cannot_reach_a_jobs_private_folders_nor_unmount_its_own(workdir: Path) -> None:
    """As whoever runs the tests (root here: /proc/PID/root of any process is open to root, so the
    state folder's path is what is tried)."""
    _assert_private(_look_from_another_job(sys.executable, workdir, dict(os.environ), sweep=os.getuid() != 0))


@pytest.fixture
def ordinary_user() -> Iterator[tuple[str, Path]]:
    """A Unix user made for the test, with a folder of its own in /tmp and a Python of its own (the
    system's, seeing hpcnb and this venv's packages); removed afterwards with what it left running."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("needs root, useradd and /usr/bin/python3")
    name = f"hpn{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", name], check=True, capture_output=True)
    home = Path(tempfile.mkdtemp(prefix="apart-user-", dir="/tmp"))
    try:
        shutil.chown(home, name, name)
        made = run([RUNUSER, "-u", name, "--", SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(home / "venv")])
        assert made.returncode == 0, made.stderr
        site = next((home / "venv" / "lib").glob("python3*/site-packages"))
        for package in Path(sysconfig.get_paths()["purelib"]).iterdir():  # (the commands run without .pth files)
            (site / package.name).symlink_to(package)
        yield name, home
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], check=False)
        subprocess.run(["userdel", name], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("net", ["own", "shared"])
def test_another_job_of_an_ordinary_user_cannot_reach_a_jobs_private_folders(ordinary_user, net: str) -> None:
    """The same as an ordinary user, whose jobs hold CAP_SYS_ADMIN in their user namespace, and who
    may read /proc/PID/root of its own processes: every process of the machine is tried. The job's
    own srun still starts its tasks on both nodes, in mounts they cannot undo either. With the nodes'
    own network (the default) and without it (a portal's)."""
    name, home = ordinary_user
    venv = home / "venv" / "bin"
    env = {"HOME": str(home), "PATH": f"{venv}:/usr/bin:/bin", "HPCNB_SLURM": "local", "LANG": "C.UTF-8",
           "HPCNB_STATE_DIR": str(home / "state"), "HPCNB_BIN_DIR": str(home / "bin"), "HPCNB_NODE_NETWORK": net}
    made = _as(name, env, str(venv / "python3"), "-c", "from hpcnb.backend import local_bin_dir; print(local_bin_dir())",
               cwd=home)
    assert made.returncode == 0, made.stderr
    env["PATH"] = f"{made.stdout.strip()}:{env['PATH']}"
    (home / "step.py").write_text("import ctypes, socket\nlibc = ctypes.CDLL(None)\n"
                                  "print(socket.gethostname(), libc.umount2(b'/tmp', 0), libc.umount2(b'/dev/shm', 0))\n")
    try:
        out = _look_from_another_job(str(venv / "python3"), home, env, sweep=True, user=name)
        step = _as(name, env, "sbatch", "--wait", "-N2", "-n2", "-o", "step.out", "--wrap",
                   "srun -N2 -n2 -l python3 step.py", cwd=home, timeout=120)
        assert step.returncode == 0, step.stderr
    finally:
        _as(name, env, str(venv / "python3"), "-m", "hpcnb.cli", "slurm", "reset", cwd=home)
    _assert_private(out)
    assert sorted((home / "step.out").read_text().splitlines()) == ["0: node1 -1 -1", "1: node2 -1 -1"], \
        (home / "step.out").read_text()
