"""``make test-gpu`` (``ci/test-gpu.sh`` picks the Python, then runs ``python -m hpcnb.course.gpucheck``):
the course's GPU paths on one GPU of the site's GPU node, run by an instructor before a workshop.

Each step is bounded, and all of them together by :data:`BUDGET_S`: the CUDA-only unit tests,
lesson 7's benchmark, every job-side script through the local Slurm with ``--gres=gpu:1``, an NCCL
all-reduce across two nodes when the check runs inside an allocation of two or more, lesson 6's job, and lessons 6 and 7 under nbval where the course's venv (nbval) is installed. It
writes ``test-artifacts/gpu-report.md``: the card, driver and torch, each step's state and time,
lesson 7's table and lesson 6's verdicts. Without a GPU it says so, runs nothing and exits 0.

``--rehearse`` (``make test-gpu-rehearsal``) runs the other steps whether torch sees a GPU or not
(the two that only run the project's tests are left to ``make test``), within
:data:`REHEARSAL_BUDGET_S`, into ``test-artifacts/gpu-rehearsal.md``: on a machine without one
(CI, a laptop) it proves the steps, the scripts' command lines and the report, not the GPU.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "test-artifacts" / "gpu-report.md"
BUDGET_S = 360  # the whole check, on one H100/H200
REHEARSAL_BUDGET_S = 600  # a rehearsal on a CPU (about 100 s on 2 cores, 2026-12-02)
UNIT_TESTS = ("tests/test_precision.py", "tests/test_tuning.py", "tests/test_distributed.py",
              "tests/test_gpu_accounting.py")  # the CUDA-only tests and the CPU-faked ones beside them
#: left out of them: ``slow`` tests run on the CPU (torch.compile on the CPU: 51 s here), as make test does
UNIT_TESTS_MARKS = "not slow"


class Job(NamedTuple):
    """One job of the lessons' job-side scripts: ``srun`` runs ``before`` + this Python + ``-m module``."""

    name: str
    module: str  # the module and its arguments
    before: str = ""  # what comes before the Python in srun's command
    tasks: int = 1


CPU_ONLY = "env CUDA_VISIBLE_DEVICES= "  # the GPU hidden from this step: torch runs on the CPU
#: the lessons' job-side scripts on one GPU, as run.sh of the H200 reference (2026-11-27) ran them
JOBS = (
    Job("l08-single", "hpcnb.scripts.single_train --epochs 2 --out single"),
    Job("l08-ddp", "hpcnb.scripts.ddp_train --epochs 2 --out ddp"),
    Job("l08-ddp-node", "hpcnb.scripts.ddp_node_train --epochs 2 --out ddpnode"),
    Job("l09-lightning", "hpcnb.scripts.lightning_train --devices 1 --epochs 2 --out light"),
    Job("l10-horovod", "hpcnb.scripts.horovod_train --epochs 2 --out hvd"),
    Job("l11-scaling", "hpcnb.scripts.scaling_train --kind strong --steps 40"),
    Job("l12-ckpt", "hpcnb.scripts.ckpt_train --steps 20 --steps-per-run 10 --every 5 --step-seconds 0 --out ck"),
    Job("l12-ckpt-resume-cpu",  # a GPU checkpoint resumed on the CPU
        "hpcnb.scripts.ckpt_train --steps 20 --steps-per-run 5 --every 5 --step-seconds 0 --out ck", CPU_ONLY),
    Job("l12-ckpt-resume-gpu", "hpcnb.scripts.ckpt_train --steps 20 --every 5 --step-seconds 0 --out ck"),
    Job("l13-stragglers", "hpcnb.scripts.straggler_train --steps 20 --quiet --out times.json"),
    # sharding needs two ranks, and NCCL two GPUs: two CPU ranks save FSDP shards, the GPU loads them
    Job("l14-fsdp-cpu", "hpcnb.scripts.sharded_train --strategy fsdp --save shards", CPU_ONLY, tasks=2),
    Job("l14-load-gpu", "hpcnb.scripts.sharded_train --load shards"),
    Job("l15-ddp", "hpcnb.scripts.faulty_ddp --fault none"),
    Job("allreduce-1gpu", "hpcnb.scripts.allreduce_check --mib 64"),   # the step across nodes, on one GPU
)
ACROSS_NODES = "NCCL all-reduce across 2 nodes"
#: the job-side scripts JOBS leaves out, and why
NOT_ON_A_GPU = {"container_ddp": "gloo inside the course's Charliecloud image (lesson 3b): a CPU path"}
LESSON6 = "notebooks/06-single-device-tuning.ipynb"
LESSON7 = "notebooks/07-tf32-and-precision.ipynb"
SWEEPS = ("batch_size", "num_workers", "threads")  # lesson 6's rows left out of the verdicts
FORMATS = ("fp32", "tf32", "fp16", "bf16")
FAILURES = ("failed", "timeout", "not run")
NEEDED = {"hostlist": "python-hostlist", "psutil": "psutil", "platformdirs": "platformdirs"}  # the local Slurm's


@dataclass
class Step:
    name: str
    state: str  # ok, skipped (not installed here), and the failures: failed, timeout, not run (the budget spent)
    seconds: float
    note: str = ""
    output: str = ""


class Runner:
    """Runs steps one after another within one budget, each bounded by its own timeout too."""

    def __init__(self, env: dict[str, str], budget_s: float = BUDGET_S) -> None:
        self.env, self.steps, self.budget_s = env, [], budget_s
        self.deadline = time.monotonic() + budget_s

    def run(self, name: str, argv: list[str], timeout_s: float, cwd: Path = ROOT,
            env: dict[str, str] | None = None) -> Step:
        """Run one step (in the steps' environment, or ``env``)."""
        left = self.deadline - time.monotonic()
        if left < 5:
            return self.add(Step(name, "not run", 0.0, f"the {self.budget_s:.0f} s budget was spent"))
        limit, start = min(timeout_s, left), time.monotonic()
        print(f"== {name} ...", flush=True)
        # its own process group: on a timeout its children (kernels, srun) go with it
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                                env=self.env if env is None else env, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # a descendant that left the group holds the pipes
                proc.kill()
                out, err = "", ""
            return self.add(Step(name, "timeout", time.monotonic() - start, f"stopped after {limit:.0f} s", out + err))
        note = "" if proc.returncode == 0 else f"exit {proc.returncode}: {last_line(err or out)}"
        return self.add(Step(name, "ok" if proc.returncode == 0 else "failed", time.monotonic() - start, note, out + err))

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        print(f"== {step.name}: {step.state} in {step.seconds:.0f} s {step.note}".rstrip(), flush=True)
        return step


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def gpu_cards() -> tuple[list[str], str]:
    """``name, memory, driver`` of each GPU nvidia-smi lists, or none and why."""
    if shutil.which("nvidia-smi") is None:
        return [], "nvidia-smi not found"
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return [], "nvidia-smi did not answer in 30 s"
    cards = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return (cards, "") if done.returncode == 0 and cards else ([], f"nvidia-smi: {last_line(done.stderr + done.stdout)}")


def torch_cuda() -> tuple[bool, str]:
    """Does this Python's torch see a CUDA GPU; and torch's version (or why not)."""
    if importlib.util.find_spec("torch") is None:
        return False, "no torch in this Python"
    import torch

    return torch.cuda.is_available(), f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU build'})"


def lesson7_table(output: str) -> str:
    """Markdown of ``python -m hpcnb.lessons.precision``'s measured lines: TFLOP/s and error per n and format."""
    found: dict[int, dict[str, tuple[str, str]]] = {}
    for n, fmt, err, rate in re.findall(r"n=\s*(\d+)\s+(\w+)\s+measured.*?rel\. error\s+(\S+).*?([\d.]+) TFLOP/s", output):
        found.setdefault(int(n), {})[fmt] = (rate, err)
    seen = {f for row in found.values() for f in row}
    formats = [f for f in FORMATS if f in seen] + sorted(seen - set(FORMATS))
    if not found:
        return "no measured line (the output's end):\n\n```\n" + "\n".join(output.splitlines()[-15:]) + "\n```"
    head = ["n"] + [f"{f} TFLOP/s" for f in formats] + [f"rel. error {f}" for f in formats]
    rows = [[str(n)] + [found[n].get(f, ("", ""))[0] for f in formats] + [found[n].get(f, ("", ""))[1] for f in formats]
            for n in sorted(found)]
    return markdown_table(head, rows)


def lesson6_verdicts(folder: Path) -> str:
    """Markdown of lesson 6's results.csv (the sweeps left out) and summary.json's before/after."""
    results = folder / "results.csv"
    if not results.exists():
        return "no results.csv (lesson 6's job did not finish)"
    with results.open() as fh:
        rows = [[r.get("experiment", ""), r.get("setting", ""), r.get("precision", ""),
                 f"{float(r['samples_per_s']):,.0f}" if r.get("samples_per_s") else "", r.get("status", ""),
                 (r.get("note") or "")[:80]] for r in csv.DictReader(fh) if r.get("experiment") not in SWEEPS]
    text = markdown_table(["experiment", "setting", "precision", "samples/s", "status", "note"], rows)
    summary = folder / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        text += f"\n\nbefore: `{json.dumps(data.get('before'))}`\n\nafter: `{json.dumps(data.get('after'))}`"
    return text


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows])


def report(machine: dict[str, str], steps: list[Step], lesson7: str, lesson6: str) -> str:
    """The whole report, as Markdown."""
    table = markdown_table(["step", "state", "seconds", "note"],
                           [[s.name, s.state, f"{s.seconds:.0f}", s.note] for s in steps])
    failed = [s.name for s in steps if s.state in FAILURES]
    return "\n\n".join([
        f"# GPU check, {time.strftime('%Y-%m-%d %H:%M %Z')}",
        "\n".join(f"- {key}: {value}" for key, value in machine.items()),
        f"{len(steps) - len(failed)} of {len(steps)} steps passed or were skipped"
        + (f"; failed: {', '.join(failed)}" if failed else "") + f"; {sum(s.seconds for s in steps):.0f} s in all.",
        "## Steps\n\n" + table,
        "## Lesson 7: matrix products (`python -m hpcnb.lessons.precision`)\n\n" + lesson7,
        "## Lesson 6: the tuning job's verdicts\n\n" + lesson6,
    ]) + "\n"


def job_step(runner: Runner, name: str, command: str, work: Path, cpus: int = 2, timeout_s: float = 150,
             tasks: int = 1) -> Step:
    """One job through the local Slurm on one GPU; its note gets sacct's state and the GPU use NVML saw."""
    step = runner.run(name, ["sbatch", "--wait", "--parsable", "-J", name, "--gres=gpu:1", "-n", str(tasks),
                             "-c", str(cpus), "--mem=6G", "-t", "5", "-o", f"{name}-%j.out", "--wrap", command],
                      timeout_s, cwd=work)
    job_id = step.output.strip().split(";")[0].split("\n")[0]
    if job_id.isdigit():
        acct = subprocess.run(["sacct", "-n", "-P", "-j", f"{job_id}.0", "-o", "State,Elapsed,TRESUsageInMax"],
                              capture_output=True, text=True, timeout=30, env=runner.env)
        seen = ", ".join(field for field in acct.stdout.strip().split("|") if field)
        step.note = f"job {job_id}, step 0: {seen or 'not in sacct'}; {step.note}".rstrip("; ")
        out = next(work.glob(f"{name}-{job_id}.out"), None)
        step.output += out.read_text(errors="replace") if out else ""
    return step


def refusal(cards: list[str], why_no_card: str, cuda: bool, torch_text: str) -> int | None:
    """None where the check can run; else say why not and give the exit code (0: no GPU here)."""
    if not cuda:
        torch_says = torch_text if torch_text.startswith("no torch") else f"{torch_text}: torch.cuda.is_available() is False"
        if not cards:
            print(f"make test-gpu: no GPU visible ({why_no_card}; {torch_says}): nothing run")
            return 0
        print(f"make test-gpu: error: nvidia-smi lists {'; '.join(cards)} but {torch_says} ({sys.executable}): "
              "use a CUDA build of torch (GPU_PYTHON=...)", file=sys.stderr)
        return 1
    missing = [package for module, package in NEEDED.items() if importlib.util.find_spec(module) is None]
    if missing:
        print(f"make test-gpu: error: {sys.executable} lacks {', '.join(missing)} (the local Slurm needs them): "
              f"{sys.executable} -m pip install --user {' '.join(missing)} nvidia-ml-py", file=sys.stderr)
        return 1
    return None


def local_slurm_env() -> dict[str, str]:
    """The environment of every step: a private local Slurm first on PATH, this copy of hpcnb importable."""
    bin_dir = subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm-path"], capture_output=True, text=True,
                             check=True, timeout=60).stdout.strip()
    return {**os.environ, "HPCNB_STATE_DIR": tempfile.mkdtemp(prefix="hpcnb-gpu-state-"), "HPCNB_SLURM": "local",
            "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def run_steps(runner: Runner, work: Path, rehearse: bool = False) -> tuple[Step, Path]:
    """Every step, in order of importance (the budget may not reach the last); lesson 7's step and
    lesson 6's folder. A rehearsal skips the steps that only run the project's tests (make test runs
    them on the CPU)."""
    tests_step(runner, rehearse, "CUDA-only unit tests",
               ["-q", "-rs", "-m", UNIT_TESTS_MARKS, *UNIT_TESTS], 150)
    lesson7 = runner.run("lesson 7: python -m hpcnb.lessons.precision",
                         [sys.executable, "-m", "hpcnb.lessons.precision"], 100)
    for job in JOBS:
        if job.module.startswith("hpcnb.scripts.horovod") and importlib.util.find_spec("horovod") is None:
            runner.add(Step(job.name, "skipped", 0.0, "Horovod is not installed for this Python (ci/build-horovod.sh)"))
        else:
            job_step(runner, job.name, f"srun --kill-on-bad-exit=1 {job.before}{sys.executable} -m {job.module}", work,
                     tasks=job.tasks)
    across_nodes_step(runner, work)
    lesson6 = work / "lesson6"
    lesson6.mkdir()
    write_cells(ROOT / LESSON6, lesson6)
    job_step(runner, "l06-tune", f"srun {sys.executable} tune.py", lesson6, timeout_s=240)
    if importlib.util.find_spec("nbval") is None:
        runner.add(Step("lessons 6 and 7 under nbval", "skipped", 0.0, "no nbval: not the course's venv"))
    else:
        tests_step(runner, rehearse, "lessons 6 and 7 under nbval", [
            "--nbval-lax", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--nbval-cell-timeout=300",
            LESSON6, LESSON7], 300)
    return lesson7, lesson6


def across_nodes_step(runner: Runner, work: Path) -> Step:
    """Inside an allocation of two or more nodes (``salloc -N2 --gpus-per-node=1``, then ``make
    test-gpu``): one rank per node all-reduces through the allocation's own ``srun`` (NCCL between
    GPU nodes: the site's network and its plugin); elsewhere the step says how to get one."""
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)
    srun = shutil.which("srun")   # the allocation's Slurm (the user's PATH), not the check's local one
    if nodes < 2 or srun is None:
        return runner.add(Step(ACROSS_NODES, "skipped", 0.0, "not inside an allocation of 2 or more nodes: "
                               "salloc -N2 --gpus-per-node=1, then make test-gpu in it"))
    env = {**os.environ, "PYTHONPATH": runner.env.get("PYTHONPATH", "")}   # the allocation's Slurm, not the check's
    step = runner.run(ACROSS_NODES, [srun, "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=1",
                                     sys.executable, "-m", "hpcnb.scripts.allreduce_check"], 180, cwd=work, env=env)
    found = re.search(r"^ALLREDUCE (\{.*\})$", step.output, re.M)
    if found:
        result = json.loads(found[1])
        step.note = (f"{result['backend']}, {result['ranks']} ranks on {result['nodes']} nodes, sum "
                     f"{'right' if result['sum_right'] else 'WRONG'}, bus bandwidth {result['bus_gbs']:.1f} GB/s; "
                     + step.note).rstrip("; ")
    return step


def tests_step(runner: Runner, rehearse: bool, name: str, args: list[str], timeout_s: float) -> Step:
    """pytest with ``args``; in a rehearsal, skipped (make test runs the same tests on the CPU)."""
    if rehearse:
        return runner.add(Step(name, "skipped", 0.0, "a rehearsal: make test runs these on the CPU"))
    return runner.run(name, [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcnb.course.gpucheck", description=__doc__.split("\n")[1])
    parser.add_argument("--rehearse", action="store_true",
                        help="run the steps without a GPU (on the CPU), but the tests make test runs")
    rehearse = parser.parse_args(argv).rehearse
    cards, why_no_card = gpu_cards()
    cuda, torch_text = torch_cuda()
    code = None if rehearse else refusal(cards, why_no_card, cuda, torch_text)
    if code is not None:
        return code
    budget = REHEARSAL_BUDGET_S if rehearse else BUDGET_S
    runner, work = Runner(local_slurm_env(), budget), Path(tempfile.mkdtemp(prefix="hpcnb-gpu-jobs-"))
    nvml = "nvidia-ml-py installed" if importlib.util.find_spec("pynvml") else "no nvidia-ml-py: sacct shows no GPU use"
    machine = {"card (name, memory, driver)": "; ".join(cards) or "nvidia-smi: " + why_no_card, "torch": torch_text,
               "python": sys.executable, "CPUs": str(os.cpu_count()), "NVML (gres/gpuutil in sacct)": nvml,
               "budget": f"{budget} s", "job outputs": str(work)}
    if rehearse:
        machine = {"mode": "a rehearsal (--rehearse): the steps of a GPU node but the project's tests, run "
                           + ("on the GPU torch sees" if cuda else "on the CPU: its figures are the CPU's"), **machine}
    try:
        lesson7, lesson6 = run_steps(runner, work, rehearse)
    finally:
        subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], capture_output=True, env=runner.env,
                       timeout=60)
    report_file = REPORT.with_name("gpu-rehearsal.md") if rehearse else REPORT
    report_file.parent.mkdir(exist_ok=True)
    report_file.write_text(report(machine, runner.steps, lesson7_table(lesson7.output), lesson6_verdicts(lesson6)))
    steps_log = report_file.with_name("gpu-rehearsal-steps.log" if rehearse else "gpu-steps.log")
    steps_log.write_text("".join(f"=== {s.name}: {s.state}\n{s.output}\n" for s in runner.steps))
    print(f"make test-gpu: wrote {report_file.relative_to(ROOT)} (each step's output: {steps_log.name} beside it)")
    return 1 if any(s.state in FAILURES for s in runner.steps) else 0


def write_cells(notebook: Path, folder: Path) -> list[str]:
    """Write a notebook's ``%%writefile NAME`` cells into ``folder`` (lesson 6's tune.py); their names."""
    names = []
    for cell in json.loads(notebook.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and source.startswith("%%writefile "):
            first, _, body = source.partition("\n")
            names.append(first.split()[1])
            (folder / names[-1]).write_text(body)
    return names


if __name__ == "__main__":
    sys.exit(main())
