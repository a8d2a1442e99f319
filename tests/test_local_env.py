"""The local Slurm's job environment against complete captures from a real Slurm 22.05.8 and 24.11.5.

Scenario of the captures (tests/fixtures/captures-VERSION/env_full_*): from an empty environment,
``sbatch -N2 -n4 --gpus-per-node=1`` whose batch shell runs ``srun env``; and salloc, array and
``--cpus-per-task`` scenarios. Each capture-based test runs once per version, on a local Slurm
behaving as that version (``hpcnb slurm reset --slurm-version``); 24.11's captures come from
``ci/real-slurm/capture-fixtures.py --version 24.11``.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import Lane, run

SHELL_VARS = {"PWD", "SHLVL", "_", "HOME", "OLDPWD", "PATH", "HPCNB_STATE_DIR"}
# Present locally on purpose: the local profile provides SLURM_TMPDIR (as Alliance Canada does);
# the name-resolution shim appears only where node names don't resolve natively.
LOCAL_EXTRAS = {"SLURM_TMPDIR", "LD_PRELOAD", "NSS_WRAPPER_HOSTS"}


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture(scope="module")
def gpu_job(lane: Lane, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("envjob")
    script = folder / "job.sh"
    script.write_text("#!/bin/sh\nenv > batch.env\nsrun sh -c 'env > task_$SLURM_PROCID.env'\n")
    script.chmod(0o755)
    clean = {"PATH": os.environ["PATH"], "HPCNB_STATE_DIR": lane.env["HPCNB_STATE_DIR"]}
    done = run(["sbatch", "--wait", "-J", "fullenv", "-N2", "-n4", "--gpus-per-node=1", "job.sh"],
               cwd=folder, env=clean)
    assert done.returncode == 0, done.stderr
    return folder


def keys(env: dict[str, str]) -> set[str]:
    return set(env) - SHELL_VARS - LOCAL_EXTRAS


def test_batch_shell_has_exactly_the_real_variables(lane: Lane, gpu_job: Path) -> None:
    real = read_env(lane.captures / "env_full_sbatch_N2n4_batchstep_cleanenv.txt")
    local = read_env(gpu_job / "batch.env")
    assert keys(local) == keys(real)
    for name in ("ENVIRONMENT", "SLURM_JOB_NAME", "SLURM_NTASKS", "SLURM_NNODES", "SLURM_JOB_NODELIST",
                 "SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE", "SLURM_GPUS_PER_NODE", "CUDA_VISIBLE_DEVICES",
                 "SLURM_NODEID", "SLURM_PROCID", "SLURMD_NODENAME", "HOSTNAME", "SLURM_MEM_PER_CPU"):
        assert local[name] == real[name], name
    assert local["SLURM_TMPDIR"] and not Path(local["SLURM_TMPDIR"]).exists()  # removed after the job


@pytest.mark.parametrize("task", range(4))
def test_srun_tasks_have_exactly_the_real_variables(lane: Lane, gpu_job: Path, task: int) -> None:
    real = read_env(lane.captures / f"env_full_sbatch_N2n4_srun_task{task}.txt")
    local = read_env(gpu_job / f"task_{task}.env")
    assert keys(local) == keys(real)
    for name in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_GTIDS",
                 "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NODELIST",
                 "CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_DISTRIBUTION", "HOSTNAME"):
        assert local[name] == real[name], name


def test_salloc_shell_layer(lane: Lane, workdir: Path) -> None:
    """salloc -n2: job-level variables only, job name 'interactive', inherited by its steps."""
    real_shell = read_env(lane.captures / "salloc_shell.env")
    real_task = read_env(lane.captures / "salloc_srun_task_0.env")
    done = lane.run(["salloc", "-n2", "sh", "-c", "env > shell.env; srun -n1 sh -c 'env > task.env'"])
    assert done.returncode == 0, done.stderr
    assert re.search(r"salloc: Granted job allocation \d+", done.stderr)
    assert "salloc: Relinquishing job allocation" in done.stderr
    shell = read_env(workdir / "shell.env")
    slurm = {k for k in shell if k.startswith("SLURM_")} - LOCAL_EXTRAS
    assert slurm == set(real_shell)
    assert shell["SLURM_JOB_NAME"] == "interactive"
    task = read_env(workdir / "task.env")
    assert task["SLURM_JOB_NAME"] == "interactive"
    # the 22.05 captures predate DefMemPerCPU in the reference config, hence no SLURM_MEM_PER_CPU there
    assert ({k for k in task if k.startswith(("SLURM", "SRUN_"))} - LOCAL_EXTRAS - {"SLURM_MEM_PER_CPU"}
            == set(real_task) - {"SLURM_MEM_PER_CPU"})


def test_conditional_variables(workdir: Path) -> None:
    """SLURM_NTASKS_PER_NODE only with --ntasks-per-node, SLURM_CPUS_PER_TASK only with -c, GPUs only if asked."""
    plain = run(["sbatch", "--wait", "--wrap", "env > plain.env"])
    rich = run(["sbatch", "--wait", "-N1", "--ntasks-per-node=2", "-c1", "--wrap", "env > rich.env"])
    assert plain.returncode == rich.returncode == 0
    plain_env, rich_env = read_env(workdir / "plain.env"), read_env(workdir / "rich.env")
    for name in ("SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_NTASKS", "CUDA_VISIBLE_DEVICES"):
        assert name not in plain_env, name
    assert rich_env["SLURM_NTASKS_PER_NODE"] == "2" and rich_env["SLURM_CPUS_PER_TASK"] == "1"
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        assert name not in plain_env and name not in rich_env


def test_array_variables(lane: Lane, workdir: Path) -> None:
    done = lane.run(["sbatch", "--wait", "--array=3-7:2%2", "-c1", "-J", "envarr", "--wrap",
                     "env > arr_$SLURM_ARRAY_TASK_ID.env"])
    assert done.returncode == 0, done.stderr
    for task in (3, 5, 7):
        real = read_env(lane.captures / f"array_{task}.env")
        local = read_env(workdir / f"arr_{task}.env")
        assert {k for k in local if k.startswith("SLURM")} - LOCAL_EXTRAS == {k for k in real if k.startswith("SLURM")}
        for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
                     "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP"):
            assert local[name] == real[name], name


def test_srun_inherits_cpus_per_task_as_the_version_does(lane: Lane, workdir: Path) -> None:
    """``sbatch -n1 -c2`` on a 2-CPU node: 24.11's srun inherits -c (SLURM_TRES_PER_TASK=cpu=2 everywhere;
    ``srun -n2`` no longer fits), 22.05's does not (``srun -n2`` runs two 1-CPU tasks)."""
    script = ("env > batch.env; srun env > step.env; srun -c1 env > step_c1.env; "
              "srun -n2 sh -c 'echo $SLURM_CPUS_PER_TASK' > step_n2.txt 2>&1; echo \"exit code $?\" >> step_n2.txt")
    done = lane.run(["sbatch", "--wait", "-J", "cpt", "-n1", "-c2", "--wrap", script])
    assert done.returncode == 0, done.stderr
    job_id = re.search(r"Submitted batch job (\d+)", done.stdout).group(1)
    for layer in ("batch", "step", "step_c1"):
        local, real = read_env(workdir / f"{layer}.env"), read_env(lane.captures / f"cpus_per_task_{layer}.env")
        for name in ("SLURM_CPUS_PER_TASK", "SLURM_TRES_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE"):
            assert local.get(name) == real.get(name), (layer, name)
    got = sorted(re.sub(rf"\bjob {job_id}\b", "job <JOBID>", (workdir / "step_n2.txt").read_text()).splitlines())
    assert got == sorted((lane.captures / "cpus_per_task_step_n2.txt").read_text().splitlines())


# srun's -c in an ``sbatch -n1 -c2`` job, by version (measured on the real lanes): SRUN_CPUS_PER_TASK=1
# is read by both, but 24.11 takes the job's SLURM_CPUS_PER_TASK/SLURM_TRES_PER_TASK over it
@pytest.mark.parametrize("variables, cpus", [({"SRUN_CPUS_PER_TASK": "1"}, {"22.05": "1", "24.11": "2"}),
                                             ({}, {"22.05": "2", "24.11": "2"})])
def test_srun_cpus_per_task_from_the_environment(lane: Lane, workdir: Path, variables: dict, cpus: dict) -> None:
    """Where srun's -c comes from; 24.11 also refuses a SLURM_CPUS_PER_TASK that disagrees with
    SLURM_TRES_PER_TASK (its fatal error)."""
    exports = " ".join(f"{k}={v}" for k, v in variables.items())
    script = (f"{exports} srun -n1 sh -c 'echo cpt=$SLURM_CPUS_PER_TASK'; "
              "SLURM_CPUS_PER_TASK=1 srun -n1 true; echo \"exit code $?\"")
    done = lane.run(["sbatch", "--wait", "-n1", "-c2", "-o", "out.txt", "--wrap", script])
    assert done.returncode == 0, done.stderr
    lines = (workdir / "out.txt").read_text().splitlines()
    assert lines[0] == f"cpt={cpus[lane.version]}"
    if lane.version == "24.11":
        assert lines[1:] == ["srun: fatal: cpus-per-task set by two different environment variables "
                             "SLURM_CPUS_PER_TASK=1 != SLURM_TRES_PER_TASK=cpu=2", "exit code 1"]
    else:
        assert lines[1:] == ["exit code 0"]


def test_the_resolver_decision_is_remembered_until_the_names_change(tmp_path, monkeypatch) -> None:
    """Whether node names need libnss-wrapper is found once (lookups cost every command some ms),
    kept private in the state directory, and found again for other names."""
    from hpcnb.localslurm import names, network

    monkeypatch.setenv("HPCNB_STATE_DIR", str(tmp_path))
    monkeypatch.setenv(network.SETTING, "shared")  # (with networks of their own the nodes need none)
    looked_up: list[str] = []
    monkeypatch.setattr(names, "resolves", lambda name: looked_up.append(name) or False)
    monkeypatch.setattr(names, "nss_wrapper_library", lambda: "/usr/lib/libnss_wrapper.so")
    cluster = type("C", (), {"nodes": {"node1": None, "node2": None}})()
    old = os.umask(0)
    try:
        first = names.job_env(cluster, {"LD_PRELOAD": "/x.so"})
        again = names.job_env(cluster, {})
    finally:
        os.umask(old)
    assert first == {"LD_PRELOAD": "/usr/lib/libnss_wrapper.so:/x.so", "NSS_WRAPPER_HOSTS": str(tmp_path / "hosts")}
    assert again["NSS_WRAPPER_HOSTS"] == str(tmp_path / "hosts") and looked_up == ["node1"]
    assert (tmp_path / "hosts").read_text() == "127.0.0.1 node1\n::1 node1\n127.0.0.1 node2\n::1 node2\n"
    for kept in ("hosts", "resolver.json"):
        assert (tmp_path / kept).stat().st_mode & 0o777 == 0o600, kept
    cluster.nodes = {"gpu1": None}
    names.job_env(cluster, {})
    assert looked_up == ["node1", "gpu1"] and "gpu1" in (tmp_path / "hosts").read_text()


def test_no_resolver_where_the_nodes_have_networks_of_their_own(tmp_path, monkeypatch) -> None:
    """There each task's /etc/hosts names every node: no LD_PRELOAD in the job's environment, not
    even the login node's own (the course kernel's), which a job submitted from there inherits."""
    from hpcnb.localslurm import apart, names

    monkeypatch.setenv("HPCNB_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(names, "resolves", lambda name: False)
    monkeypatch.setattr(names, "nss_wrapper_library", lambda: "/usr/lib/libnss_wrapper.so")
    monkeypatch.setattr(apart, "in_use", lambda: True)
    cluster = type("C", (), {"nodes": {"node1": None}})()
    assert names.job_env(cluster, {}) == {}
    login = {"LD_PRELOAD": "/usr/lib/libnss_wrapper.so:/x.so", "NSS_WRAPPER_HOSTS": str(tmp_path / "hosts"), "A": "1"}
    assert names.job_env(cluster, login) == {"LD_PRELOAD": "/x.so", "A": "1"}
    assert names.job_env(cluster, {**login, "LD_PRELOAD": "/usr/lib/libnss_wrapper.so"}) == {"A": "1"}


def test_a_damaged_state_file_does_not_stop_the_course_kernel(tmp_path, monkeypatch, capsys) -> None:
    """The kernel's environment (``hpcnb.backend.login_env``) without the node names' resolver, and
    a line saying why: the kernel starts all the same."""
    from hpcnb.backend import login_env

    (tmp_path / "slurm.db").write_text("garbage")
    monkeypatch.setenv("HPCNB_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("HPCNB_SLURM", "local")
    env = login_env({"PATH": "/usr/bin"})
    assert "NSS_WRAPPER_HOSTS" not in env and env["PATH"].endswith("/usr/bin")
    assert "node names will not resolve here" in capsys.readouterr().err
