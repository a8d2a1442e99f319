"""Real frameworks across the local Slurm's virtual nodes (gloo on CPU)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from conftest import run

JOBS = Path(__file__).parent / "jobs"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed (extra [dl])")


@needs_torch
def test_ddp_two_nodes_two_tasks_each(workdir: Path) -> None:
    import sys

    done = run(["sbatch", "--wait", "-N2", "--ntasks-per-node=2", "--time=2:00", "-o", "ddp-%j.out",
                "--wrap", f"srun {sys.executable} {JOBS / 'ddp_allreduce.py'}"], timeout=180)
    out = next(workdir.glob("ddp-*.out")).read_text()
    assert done.returncode == 0, out
    assert "world=4 nodes=2 master=node1:" in out and "sum=6" in out, out


def test_world_from_slurm_variables() -> None:
    from hpcnb.lessons.distributed import SlurmContextError, job_port, slurm_world

    with pytest.raises(SlurmContextError, match="srun"):
        slurm_world({})
    assert job_port(7) != job_port(8) and 20000 <= job_port(123456) < 60000
