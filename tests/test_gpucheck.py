"""``make test-gpu`` without a GPU: its no-GPU path for real, its pieces (steps, report, lesson 6's
and 7's tables) on the H200 run of 2026-11-27 (tests/fixtures/gpu-h200-2026-11-27)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from hpcnb.course import gpucheck
from hpcnb.course.gpucheck import Runner, Step

ROOT = Path(__file__).resolve().parent.parent
H200 = Path(__file__).resolve().parent / "fixtures" / "gpu-h200-2026-11-27"


def _path_without_nvidia_smi() -> str:
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "nvidia-smi").exists())


@pytest.mark.parametrize("gpu_python", [sys.executable, "python3"])
def test_make_test_gpu_without_a_gpu_says_so_and_runs_nothing(gpu_python: str) -> None:
    # CUDA_VISIBLE_DEVICES="": torch sees no GPU even on a GPU node, where make test must not start the check
    env = {**os.environ, "PATH": _path_without_nvidia_smi(), "GPU_PYTHON": gpu_python, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "test-gpu"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "make test-gpu: no GPU visible (nvidia-smi not found; " in done.stdout
    assert done.stdout.rstrip().endswith("): nothing run")
    assert "== " not in done.stdout  # no step ran


def test_a_gpu_that_torch_cannot_use_is_an_error(tmp_path: Path) -> None:
    """nvidia-smi sees a card, this Python's torch (a CPU build) does not: a broken node, not 'no GPU'."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771 MiB, 580.159.04'\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "hpcnb.course.gpucheck"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 1
    assert "nvidia-smi lists NVIDIA H200, 143771 MiB, 580.159.04 but torch" in done.stderr
    assert "torch.cuda.is_available() is False" in done.stderr and "GPU_PYTHON" in done.stderr


def test_steps_are_bounded_one_by_one_and_together(tmp_path: Path) -> None:
    runner = Runner(dict(os.environ), budget_s=30)
    ok = runner.run("ok", [sys.executable, "-c", "print('fine')"], 20, cwd=tmp_path)
    failed = runner.run("failed", [sys.executable, "-c", "import sys; sys.exit('broken: here is why')"], 20, cwd=tmp_path)
    slow = runner.run("slow", [sys.executable, "-c", "import subprocess, time; child = subprocess.Popen(['sleep', '60']); "
                                                   "print(child.pid, flush=True); time.sleep(60)"], 2, cwd=tmp_path)
    assert (ok.state, ok.output) == ("ok", "fine\n")
    assert (failed.state, failed.note) == ("failed", "exit 1: broken: here is why")
    assert (slow.state, slow.note) == ("timeout", "stopped after 2 s")
    child = int(slow.output)  # its child, which held the output pipe too, went with it
    try:
        gone, alive = psutil.wait_procs([psutil.Process(child)], timeout=30)  # SIGKILL lands a moment later
        assert not alive or alive[0].status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass
    runner.deadline = 0  # the budget spent: what is left is skipped, not run
    late = runner.run("late", [sys.executable, "-c", "raise SystemExit(1)"], 20, cwd=tmp_path)
    assert (late.state, late.note) == ("not run", "the 30 s budget was spent")
    assert [s.name for s in runner.steps] == ["ok", "failed", "slow", "late"]


def test_lesson7_table_from_the_h200_run() -> None:
    table = gpucheck.lesson7_table((H200 / "precision.txt").read_text()).splitlines()
    assert table[0] == "| n | fp32 TFLOP/s | tf32 TFLOP/s | bf16 TFLOP/s | rel. error fp32 | rel. error tf32 | rel. error bf16 |"
    assert "| 4096 | 50.5 | 379.1 | 728.8 | 4.09e-07 | 2.94e-04 | 2.87e-03 |" in table
    assert len(table) == 2 + 5  # n = 512 ... 8192
    cpu = gpucheck.lesson7_table("mode: cpu\nn= 512 tf32 emulated   rel. error 2.95e-04\n")
    assert cpu.startswith("no measured line") and "tf32 emulated" in cpu


def test_lesson6_verdicts_from_the_h200_run(tmp_path: Path) -> None:
    text = gpucheck.lesson6_verdicts(H200)
    assert "| precision | fp16 | fp16 | 5,665 | ok |  |" in text
    assert "| before_after | after | fp16 | 4,307 | ok | median of 3; range 4068-5254 samples/s |" in text
    assert "| batch_size |" not in text and "| num_workers |" not in text  # the sweeps are left out
    assert '"precision": "fp16"' in text.split("after: ")[1]
    assert gpucheck.lesson6_verdicts(tmp_path) == "no results.csv (lesson 6's job did not finish)"


def test_report_names_the_machine_every_step_and_the_failures() -> None:
    steps = [Step("CUDA-only unit tests", "ok", 12.4), Step("l08-ddp", "failed", 150.2, "exit 1: node1 | no"),
             Step("l10-horovod", "skipped", 0.0, "Horovod is not installed"), Step("l06-tune", "not run", 0.0)]
    text = gpucheck.report({"card (name, memory, driver)": "NVIDIA H200, 143771 MiB, 580.159.04"}, steps, "T7", "V6")
    assert "- card (name, memory, driver): NVIDIA H200, 143771 MiB, 580.159.04" in text
    assert "2 of 4 steps passed or were skipped; failed: l08-ddp, l06-tune; 163 s in all." in text
    assert "| l08-ddp | failed | 150 | exit 1: node1 / no |" in text  # a | in a note cannot break the table
    assert text.index("## Lesson 7") < text.index("T7") < text.index("## Lesson 6") < text.index("V6")


def test_write_cells_writes_a_notebooks_writefile_cells(tmp_path: Path) -> None:
    notebook = tmp_path / "l.ipynb"
    notebook.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ["%%writefile tune.py\n", "print('tune')\n"]},
        {"cell_type": "markdown", "source": ["%%writefile not-code.py\n"]},
        {"cell_type": "code", "source": ["x = 1\n"]}]}))
    assert gpucheck.write_cells(notebook, tmp_path) == ["tune.py"]
    assert (tmp_path / "tune.py").read_text() == "print('tune')\n"


def test_every_job_side_script_is_run_or_said_why_not() -> None:
    scripts = {p.stem for p in (ROOT / "hpcnb" / "scripts").glob("*.py") if p.stem != "__init__"}
    run = {job.module.split()[0].removeprefix("hpcnb.scripts.") for job in gpucheck.JOBS}
    assert scripts - run == set(gpucheck.NOT_ON_A_GPU), "a job-side script make test-gpu neither runs nor excuses"
    assert not run - scripts


def test_a_rehearsal_runs_the_steps_without_a_gpu_and_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--rehearse skips the no-GPU refusal and writes its own report, headed as what it is."""
    def one_step(runner: Runner, work: Path, rehearse: bool = False) -> tuple[Step, Path]:
        assert rehearse
        return runner.add(Step("a step", "ok", 1.0)), work
    monkeypatch.setattr(gpucheck, "gpu_cards", lambda: ([], "nvidia-smi not found"))
    monkeypatch.setattr(gpucheck, "torch_cuda", lambda: (False, "torch 2.13.0 (CUDA none: a CPU build)"))
    monkeypatch.setattr(gpucheck, "local_slurm_env", lambda: dict(os.environ))
    monkeypatch.setattr(gpucheck, "run_steps", one_step)
    monkeypatch.setattr(gpucheck, "ROOT", tmp_path)
    monkeypatch.setattr(gpucheck, "REPORT", tmp_path / "gpu-report.md")
    assert gpucheck.main([]) == 0 and not (tmp_path / "gpu-report.md").exists()  # no GPU: nothing run
    assert gpucheck.main(["--rehearse"]) == 0
    text = (tmp_path / "gpu-rehearsal.md").read_text()
    assert ("- mode: a rehearsal (--rehearse): the steps of a GPU node but the project's tests, run on the CPU: "
            "its figures are the CPU's") in text
    assert f"- budget: {gpucheck.REHEARSAL_BUDGET_S} s" in text and "| a step | ok | 1 |" in text
    assert (tmp_path / "gpu-rehearsal-steps.log").read_text() == "=== a step: ok\n\n"
    assert not (tmp_path / "gpu-report.md").exists()


def test_a_rehearsal_leaves_the_projects_own_tests_to_make_test(tmp_path: Path) -> None:
    runner = Runner(dict(os.environ), budget_s=60)
    skipped = gpucheck.tests_step(runner, True, "unit tests", ["--no-such-option"], 30)
    ran = gpucheck.tests_step(runner, False, "unit tests", ["--version"], 30)
    assert (skipped.state, skipped.note) == ("skipped", "a rehearsal: make test runs these on the CPU")
    assert ran.state == "ok" and "pytest" in ran.output


def test_the_step_across_nodes_runs_inside_an_allocation_of_two_and_says_how_elsewhere(tmp_path: Path) -> None:
    """make test-gpu inside ``salloc -N2``: one rank per node all-reduces through the allocation's
    srun (here the local Slurm's two nodes, gloo on their CPUs; NCCL on GPU nodes); outside one it
    is skipped with the way to get one (issue 39 item 7)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES")}
    outside = subprocess.run([sys.executable, "-c", CALL_ACROSS_NODES, str(tmp_path)], capture_output=True, text=True,
                             env=env, timeout=120)
    said = [line for line in outside.stdout.splitlines() if " | " in line]
    assert said[0].startswith("skipped | not inside an allocation of 2 or more nodes: salloc -N2"), outside
    inside = subprocess.run(["salloc", "-N2", "-n2", "--mem=3G", "--gpus-per-node=1", sys.executable, "-c", CALL_ACROSS_NODES,
                             str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    said = [line for line in inside.stdout.splitlines() if " | " in line]
    assert said and said[0].startswith("ok | gloo, 2 ranks on 2 nodes, sum right, bus bandwidth"), (inside.stdout,
                                                                                                  inside.stderr)


CALL_ACROSS_NODES = """
import os, sys
from pathlib import Path
from hpcnb.course import gpucheck
step = gpucheck.across_nodes_step(gpucheck.Runner(dict(os.environ), budget_s=280), Path(sys.argv[1]))
print(step.state, "|", step.note)
print(step.output)
"""
