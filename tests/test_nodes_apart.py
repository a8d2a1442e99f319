"""Virtual nodes that are apart (hpcnb/localslurm/apart.py): a task on node2 has node2's hostname
and its job's private /tmp and /dev/shm on node2, as on a real cluster with job_container/tmpfs;
shared folders stay shared."""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import run

from hpcnb.localslurm import apart



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
