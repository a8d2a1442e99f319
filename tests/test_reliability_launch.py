"""No job dies at launch: first submissions of several notebooks at once, on a fresh state.

The NODE_FAIL seen in a course run (lessons 1 and 5 starting together) came from lesson 1's
stand-alone ``srun``: its ``poke`` started the controller as its own child, and at the end of its
step the srun (a subreaper) killed every descendant, the controller and the supervisor of lesson
5's batch job included.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reliability_helpers import Slurm, make_env, slurm  # noqa: F401 - fixture

ROUNDS = int(os.environ.get("HPCNB_LAUNCH_RACE_ROUNDS", "8"))


def test_controller_started_by_srun_outlives_its_step(slurm: Slurm) -> None:
    """The exact course case, made deterministic: a batch job launched by a controller that a
    stand-alone srun started survives the end of that srun."""
    done = slurm.run("srun", "bash", "-c", "sbatch --parsable -o batch.out --wrap 'sleep 2; echo survived'; sleep 1")
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.split()[-1].split(";")[0])
    assert slurm.wait_final([job_id], timeout=60)[job_id] == "COMPLETED", slurm.log()
    assert (Path.cwd() / "batch.out").read_text() == "survived\n"
    assert slurm.controller_pid() or slurm.db_lock_holder(), "the controller was killed with the srun"


def _first_cells(env: dict[str, str], cwd: Path) -> list[subprocess.CompletedProcess]:
    """What the first cells of four notebooks do, all at the same instant."""
    commands = [
        ["srun", "--ntasks=1", "printenv", "SLURMD_NODENAME"],  # lesson 1
        ["sbatch", "--parsable", "-o", "server-%j.out", "--wrap", "sleep 1; echo server"],  # lesson 5
        ["salloc", "-N1", "srun", "true"],  # lesson 4
        ["sbatch", "--parsable", "--wait", "-o", "wait-%j.out", "--wrap", "echo waited"],  # lesson 3
    ]
    with ThreadPoolExecutor(len(commands)) as pool:
        futures = [pool.submit(subprocess.run, cmd, cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=120, stdin=subprocess.DEVNULL) for cmd in commands]
        return [f.result() for f in futures]


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_first_submissions_together_never_node_fail(tmp_path: Path, round_: int) -> None:
    state = tmp_path / "state"
    instance = Slurm(state, make_env(state))
    try:
        results = _first_cells(instance.env, tmp_path)
        for res in results:
            assert res.returncode == 0, f"{res.args}: rc={res.returncode}\n{res.stderr}\n{instance.log()}"
        ids = [job_id for job_id, _ in instance.db_rows("SELECT id, state FROM jobs")]
        states = instance.wait_final(ids, timeout=60)
        assert set(states.values()) == {"COMPLETED"}, f"{states}\n{instance.log()}"
        assert "NODE_FAIL" not in instance.log()
    finally:
        instance.stop_everything()
        time.sleep(0.1)


def test_a_finished_jobs_environment_is_dropped(slurm: Slurm, monkeypatch: pytest.MonkeyPatch) -> None:
    """The submitter's whole environment (tokens included) is kept only while the job needs it."""
    env = {**slurm.env, "HPCNB_TEST_TOKEN": "secret-value", "HPCNB_ENV_KEPT_AFTER_END": "1"}
    done = slurm.run("sbatch", "--parsable", "--wait", "-o", "/dev/null", "--wrap", "true", env=env)
    job_id = int(done.stdout.split(";")[0])
    slurm.run("sbatch", "--wait", "-o", "/dev/null", "--wrap", "sleep 3", env=env)  # the controller looks each second
    req = slurm.db_rows("SELECT req FROM jobs WHERE id=?", (job_id,))[0][0]
    assert "secret-value" not in req and '"env"' not in req
    assert slurm.run("sacct", "-j", str(job_id), "-X", "-n", "-o", "State").stdout.split() == ["COMPLETED"]
