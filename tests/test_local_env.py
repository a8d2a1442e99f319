"""The local Slurm's job environment against complete captures from a real Slurm 22.05.8.

Scenario of the captures (tests/fixtures/captures-22.05/env_full_*): from an empty environment,
``sbatch -N2 -n4 --gpus-per-node=1`` whose batch shell runs ``srun env``.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import FIXTURES, run

CAPTURES = FIXTURES / "captures-22.05"
SHELL_VARS = {"PWD", "SHLVL", "_", "HOME", "OLDPWD", "PATH", "HPCNB_STATE_DIR"}
# Present locally on purpose: the local profile provides SLURM_TMPDIR (as Alliance Canada does);
# the name-resolution shim appears only where node names don't resolve natively.
LOCAL_EXTRAS = {"SLURM_TMPDIR", "LD_PRELOAD", "NSS_WRAPPER_HOSTS"}


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture(scope="module")
def gpu_job(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("envjob")
    script = folder / "job.sh"
    script.write_text("#!/bin/sh\nenv > batch.env\nsrun sh -c 'env > task_$SLURM_PROCID.env'\n")
    script.chmod(0o755)
    clean = {"PATH": os.environ["PATH"], "HPCNB_STATE_DIR": os.environ["HPCNB_STATE_DIR"]}
    done = run(["sbatch", "--wait", "-J", "fullenv", "-N2", "-n4", "--gpus-per-node=1", "job.sh"],
               cwd=folder, env=clean)
    assert done.returncode == 0, done.stderr
    return folder


def keys(env: dict[str, str]) -> set[str]:
    return set(env) - SHELL_VARS - LOCAL_EXTRAS


def test_batch_shell_has_exactly_the_real_variables(gpu_job: Path) -> None:
    real = read_env(CAPTURES / "env_full_sbatch_N2n4_batchstep_cleanenv.txt")
    local = read_env(gpu_job / "batch.env")
    assert keys(local) == keys(real)
    for name in ("ENVIRONMENT", "SLURM_JOB_NAME", "SLURM_NTASKS", "SLURM_NNODES", "SLURM_JOB_NODELIST",
                 "SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE", "SLURM_GPUS_PER_NODE", "CUDA_VISIBLE_DEVICES",
                 "SLURM_NODEID", "SLURM_PROCID", "SLURMD_NODENAME", "HOSTNAME", "SLURM_MEM_PER_CPU"):
        assert local[name] == real[name], name
    assert local["SLURM_TMPDIR"] and not Path(local["SLURM_TMPDIR"]).exists()  # removed after the job


@pytest.mark.parametrize("task", range(4))
def test_srun_tasks_have_exactly_the_real_variables(gpu_job: Path, task: int) -> None:
    real = read_env(CAPTURES / f"env_full_sbatch_N2n4_srun_task{task}.txt")
    local = read_env(gpu_job / f"task_{task}.env")
    assert keys(local) == keys(real)
    for name in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_GTIDS",
                 "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NODELIST",
                 "CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_DISTRIBUTION", "HOSTNAME"):
        assert local[name] == real[name], name


def test_salloc_shell_layer(workdir: Path) -> None:
    """salloc -n2: job-level variables only, job name 'interactive', inherited by its steps."""
    real_shell = read_env(CAPTURES / "salloc_shell.env")
    real_task = read_env(CAPTURES / "salloc_srun_task_0.env")
    done = run(["salloc", "-n2", "sh", "-c", "env > shell.env; srun -n1 sh -c 'env > task.env'"])
    assert done.returncode == 0, done.stderr
    assert re.search(r"salloc: Granted job allocation \d+", done.stderr)
    assert "salloc: Relinquishing job allocation" in done.stderr
    shell = read_env(workdir / "shell.env")
    slurm = {k for k in shell if k.startswith("SLURM_")} - LOCAL_EXTRAS
    assert slurm == set(real_shell)
    assert shell["SLURM_JOB_NAME"] == "interactive"
    task = read_env(workdir / "task.env")
    assert task["SLURM_JOB_NAME"] == "interactive"
    # these captures predate DefMemPerCPU in the reference config, hence no SLURM_MEM_PER_CPU there
    assert {k for k in task if k.startswith(("SLURM", "SRUN_"))} - LOCAL_EXTRAS - {"SLURM_MEM_PER_CPU"} == set(real_task)


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


def test_array_variables(workdir: Path) -> None:
    done = run(["sbatch", "--wait", "--array=3-7:2%2", "-c1", "-J", "envarr", "--wrap",
                "env > arr_$SLURM_ARRAY_TASK_ID.env"])
    assert done.returncode == 0, done.stderr
    for task in (3, 5, 7):
        real = read_env(CAPTURES / f"array_{task}.env")
        local = read_env(workdir / f"arr_{task}.env")
        assert {k for k in local if k.startswith("SLURM")} - LOCAL_EXTRAS == {k for k in real if k.startswith("SLURM")}
        for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
                     "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP"):
            assert local[name] == real[name], name
