"""GPU accounting without a GPU: the local Slurm samples a step's GPUs with NVML (a fake ``pynvml``
here, tests/fixtures/fake_nvml) and sacct prints ``gres/gpumem``/``gres/gpuutil`` in
TRESUsageInAve/Max as Slurm 24.11 does with ``AccountingStorageTRES=gres/gpumem,gres/gpuutil``;
``Job.efficiency()`` reads them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpcnb.localslurm.gpuusage import GpuSampler
from hpcnb.slurm.gpus import format_gpu_usage, parse_gpu_usage

FAKE_NVML = Path(__file__).resolve().parent / "fixtures" / "fake_nvml"
GIB = 1024**3


class NVMLError(Exception):
    pass


def fake_nvml(utils: list[int], running: list[list[tuple[int, int | None]]]) -> SimpleNamespace:
    """An NVML with one GPU per utilisation; ``running[i]``: (pid, bytes) of the processes on GPU i."""
    return SimpleNamespace(
        NVMLError=NVMLError, nvmlDeviceGetCount=lambda: len(utils), nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda i: SimpleNamespace(gpu=utils[i]),
        nvmlDeviceGetComputeRunningProcesses=lambda i: [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in running[i]],
        nvmlShutdown=lambda: None)


def test_gpu_usage_is_written_and_read_as_sacct_prints_it() -> None:
    text = format_gpu_usage(1340 * 1024**2, 86.6)
    assert text == "gres/gpumem=1340M,gres/gpuutil=87"
    assert parse_gpu_usage(f"cpu=00:00:02,{text},mem=952K") == (1340 * 1024**2, 87.0)
    assert parse_gpu_usage("cpu=00:00:02,mem=952K") == parse_gpu_usage("") == (None, None)


def test_sampler_gives_each_step_the_gpus_its_processes_use() -> None:
    """Step 0 has a process on both GPUs (mean utilisation, summed memory); step 1 on GPU 1 only;
    a process of another job (pid 99) counts for no step; memory NVML cannot tell counts 0."""
    nvml = fake_nvml([90, 30], [[(10, 2 * GIB), (99, GIB)], [(11, GIB), (12, None)]])
    sampler = GpuSampler(nvml, [0, 1])
    step_of = {10: "0", 11: "0", 12: "1"}.get
    sampler.sample(step_of)
    nvml.nvmlDeviceGetUtilizationRates = lambda i: SimpleNamespace(gpu=[10, 50][i])
    sampler.sample(step_of)
    zero, one = sampler.steps["0"], sampler.steps["1"]
    assert (zero.samples, zero.util_ave, zero.util_max, zero.mem_ave, zero.mem_max) == (2, 45.0, 60.0, 3 * GIB, 3 * GIB)
    assert (one.samples, one.util_ave, one.util_max, one.mem_max) == (2, 40.0, 50.0, 0)
    assert set(sampler.steps) == {"0", "1"}


def test_a_process_counts_for_the_step_it_is_in_when_nvml_lists_it() -> None:
    """srun forks a task that carries the batch step's environment until it execs step 0's program,
    which then takes GPU memory: its step is the one it is in when NVML lists it, not before."""
    step_now = {10: "batch"}
    nvml = fake_nvml([37], [[(10, GIB)]])
    listed = nvml.nvmlDeviceGetComputeRunningProcesses

    def list_after_exec(handle: int) -> list[SimpleNamespace]:
        step_now[10] = "0"
        return listed(handle)

    nvml.nvmlDeviceGetComputeRunningProcesses = list_after_exec
    sampler = GpuSampler(nvml, [0])
    sampler.sample(step_now.get)
    assert set(sampler.steps) == {"0"}


def test_sampler_says_why_it_cannot_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    assert GpuSampler.open([]) == (None, "the job has no GPUs")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert GpuSampler.open([0]) == (None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)")

    def no_driver() -> None:
        raise NVMLError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(NVMLError=NVMLError, nvmlInit=no_driver))
    sampler, why = GpuSampler.open([0])
    assert sampler is None and why == "NVML does not start (NVML Shared Library Not Found): no NVIDIA driver here"
    one_gpu = fake_nvml([0], [[]])
    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(**vars(one_gpu), nvmlInit=lambda: None))
    assert GpuSampler.open([1, 2]) == (None, "NVML sees 1 GPU(s), none of the job's (1,2)")
    sampler, why = GpuSampler.open([0, 1])
    assert sampler is not None and why == "sampling GPU(s) 0 with NVML"

    def lost() -> int:
        raise NVMLError("GPU is lost")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(**{**vars(one_gpu), "nvmlDeviceGetCount": lost},
                                                               nvmlInit=lambda: None))
    assert GpuSampler.open([0]) == (None, "NVML cannot read the GPUs (GPU is lost)")


def test_a_gpu_jobs_step_is_accounted_from_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job on the local Slurm (24.11) with --gres=gpu:1 whose srun step holds 1 GiB of the (fake)
    GPU at 37 %: sacct prints it for that step only, and Job.efficiency() shows it."""
    from hpcnb.jobs import Job

    monkeypatch.setenv("HPCNB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PYTHONPATH", str(FAKE_NVML))  # the controller, and the supervisors it forks, get it
    monkeypatch.chdir(tmp_path)
    run = lambda args: subprocess.run(args, capture_output=True, text=True, timeout=120)  # noqa: E731
    made = run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset", "--slurm-version", "24.11"])
    assert made.returncode == 0, made.stderr
    try:
        done = run(["sbatch", "--wait", "--parsable", "--gres=gpu:1", "-t", "2", "--wrap",
                    f"srun env FAKE_NVML_MEM={GIB} {sys.executable} -c 'import time; time.sleep(2)'"])
        assert done.returncode == 0, done.stderr
        job_id = done.stdout.strip()
        sacct = run(["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,TRESUsageInAve,TRESUsageInMax"])
        assert sacct.stdout.splitlines() == [
            f"{job_id}||", f"{job_id}.batch||",
            f"{job_id}.0|gres/gpumem=1G,gres/gpuutil=37|gres/gpumem=1G,gres/gpuutil=37",
        ], sacct.stderr
        summary = Job(job_id).efficiency()
        assert (summary.gpus, summary.gpu_util, summary.gpu_mem) == (1, 37.0, GIB)
        assert "GPU utilisation (mean): 37%" in str(summary)
    finally:
        run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"])


def test_a_state_file_from_before_gpu_accounting_gains_the_columns(tmp_path: Path) -> None:
    import sqlite3

    from hpcnb.localslurm import db

    path = tmp_path / "slurm.db"
    db.connect(path).close()
    old = sqlite3.connect(path)
    for column in ("gpu_util_ave", "gpu_util_max", "gpu_mem_ave", "gpu_mem_max"):
        old.execute(f"ALTER TABLE steps DROP COLUMN {column}")
    old.commit()
    old.close()
    conn = db.connect(path)
    assert {"gpu_util_ave", "gpu_util_max", "gpu_mem_ave", "gpu_mem_max"} <= {
        r[1] for r in conn.execute("PRAGMA table_info(steps)")}
    conn.close()
