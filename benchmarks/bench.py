"""Local Slurm and hpcnb latency benchmark; prints a markdown table (not a test).

    .venv/bin/python benchmarks/bench.py [--runs 20] [--array 200] [--nodes shared|shared-network]

It runs against a private local Slurm (a temporary HPCNB_STATE_DIR, the local commands first on
PATH) and resets it afterwards with ``python -m hpcnb.cli slurm reset``. Its virtual nodes are apart
(each its own hostname, ``/tmp`` and network) where this machine allows it; ``--nodes shared``
measures them shared (``HPCNB_NODES=shared``), for the cost of the isolation; ``--nodes
shared-network`` keeps them apart but on this machine's network (``HPCNB_NODE_NETWORK=shared``).
Reference figures are
from the real Slurm 22.05.8 of ``ci/real-slurm.sh`` on the same kind of 2-core machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE"}

SRUN_INNER = """
import json, subprocess, sys, time
times = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    subprocess.run(["srun", *sys.argv[2:], "true"], check=True)
    times.append(time.perf_counter() - t)
print(json.dumps(times))
"""


@dataclass
class Row:
    what: str
    kind: str  # "median" or "total"
    seconds: float
    target: float | None
    real: float | None
    low: float | None = None  # fastest run, where there are several

    def cells(self) -> list[str]:
        ok = "" if self.target is None else (" ✅" if self.seconds <= self.target else " ❌")
        low = "" if self.low is None else f" (min {self.low:.3f})"
        return [
            self.what,
            f"{self.kind} {self.seconds:.3f} s{ok}{low}",
            "—" if self.target is None else f"≤ {self.target:g} s",
            "—" if self.real is None else f"{self.real:g} s",
            "—" if self.real is None else f"{self.seconds / self.real:.2f}×",
        ]


def run(argv: list[str], env: dict[str, str], cwd: Path, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600, **kw)


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    res = run(argv, env, cwd)
    took = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr}")
    return took


def sbatch_wait(env: dict[str, str], cwd: Path, runs: int) -> list[float]:
    return [timed(["sbatch", "--wait", "--wrap", "true"], env, cwd) for _ in range(runs)]


def sbatch_then_squeue(env: dict[str, str], cwd: Path, runs: int) -> list[float]:
    """sbatch --parsable, then squeue back to back until the job shows a final state (or leaves)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        job = run(["sbatch", "--parsable", "--wrap", "true"], env, cwd).stdout.strip().split(";")[0]
        while True:
            state = run(["squeue", "-h", "-j", job, "-o", "%T"], env, cwd).stdout.strip()
            if not state or state in FINAL:
                break
        times.append(time.perf_counter() - start)
    return times


def api_submit_wait(env: dict[str, str], cwd: Path, runs: int) -> list[float]:
    """hpcnb.jobs.submit(...).wait(): what the lessons do (polls squeue, then sacct)."""
    code = (
        "import json, time\nfrom hpcnb.jobs import submit\nts = []\n"
        f"for _ in range({runs}):\n"
        "    t = time.perf_counter()\n"
        "    assert submit(wrap='true').wait(quiet=True) == 'COMPLETED'\n"
        "    ts.append(time.perf_counter() - t)\n"
        "print(json.dumps(ts))\n"
    )
    res = run([PY, "-c", code], env, cwd)
    if res.returncode != 0:
        raise SystemExit(f"submit+wait failed: {res.stderr}")
    return json.loads(res.stdout)


def array_all_done(env: dict[str, str], cwd: Path, size: int) -> float:
    return timed(["sbatch", "--wait", f"--array=1-{size}", "--wrap", "true"], env, cwd)


def srun_in_allocation(env: dict[str, str], cwd: Path, runs: int, *shape: str) -> list[float]:
    """``srun SHAPE true`` timed alone, ``runs`` times, inside one ``salloc SHAPE``."""
    res = run(["salloc", *shape, PY, "-c", SRUN_INNER, str(runs), *shape], env, cwd)
    if res.returncode != 0:
        raise SystemExit(f"salloc/srun failed: {res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def import_hpcnb(env: dict[str, str], cwd: Path, runs: int) -> list[float]:
    return [timed([PY, "-c", "import hpcnb"], env, cwd) for _ in range(runs)]


def nodes_mode(env: dict[str, str], cwd: Path) -> str:
    """``apart ...`` or ``shared: why``, as ``hpcnb slurm status`` says it."""
    status = run([PY, "-m", "hpcnb.cli", "slurm", "status"], env, cwd).stdout
    return next((line[len("nodes: "):] for line in status.splitlines() if line.startswith("nodes: ")), "unknown")


def environment(state: Path, nodes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SACCT_"))}
    env.update(HPCNB_STATE_DIR=str(state), HPCNB_SLURM="local")
    env.pop("HPCNB_PROFILE", None)
    env.pop("HPCNB_NODES", None)
    env.pop("HPCNB_NODE_NETWORK", None)
    if nodes == "shared":
        env["HPCNB_NODES"] = "shared"
    elif nodes == "shared-network":
        env["HPCNB_NODE_NETWORK"] = "shared"
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure what users get: commands load cached bytecode
    folder = subprocess.run([PY, "-m", "hpcnb.cli", "slurm-path"], env=env, cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    env["PATH"] = f"{folder}{os.pathsep}{env.get('PATH', os.defpath)}"
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="repetitions of the latency measurements")
    parser.add_argument("--array", type=int, default=200, help="tasks in the array measurement")
    parser.add_argument("--imports", type=int, default=10, help="repetitions of `import hpcnb`")
    parser.add_argument("--nodes", choices=("auto", "shared", "shared-network"), default="auto",
                        help="virtual nodes apart, each with its own network, where the machine allows it "
                             "(auto), shared, or apart on this machine's network")
    opts = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="hpcnb-bench-"))
    state, work = tmp / "state", tmp / "work"
    work.mkdir()
    env = environment(state, opts.nodes)
    rows: list[Row] = []
    load_before = os.getloadavg()[0]
    try:
        sbatch_wait(env, work, 2)  # start the controller; not measured
        nodes = nodes_mode(env, work)
        def median(what: str, times: list[float], target: float | None, real: float | None) -> Row:
            return Row(what, "median", statistics.median(times), target, real, min(times))

        rows.append(median(f"sbatch --wait --wrap true → COMPLETED (n={opts.runs})",
                           sbatch_wait(env, work, opts.runs), 0.07, 1.0))
        rows.append(median(f"sbatch --parsable + squeue polling → COMPLETED (n={opts.runs})",
                           sbatch_then_squeue(env, work, opts.runs), 0.10, 1.0))
        rows.append(median(f"hpcnb.jobs submit() + Job.wait() → COMPLETED (n={opts.runs})",
                           api_submit_wait(env, work, opts.runs), 0.10, 1.0))
        rows.append(Row(f"{opts.array}-task array: sbatch --wait → all done", "total",
                        array_all_done(env, work, opts.array), 3.0, 41.0 if opts.array == 200 else None))
        rows.append(median(f"srun -n 2 true inside salloc -n2 (n={opts.runs})",
                           srun_in_allocation(env, work, opts.runs, "-n2"), 0.15, 0.042))
        rows.append(median(f"srun -N2 -n2 true inside salloc -N2 -n2 (n={opts.runs})",
                           srun_in_allocation(env, work, opts.runs, "-N2", "-n2"), 0.20, 0.036))
        rows.append(median(f"srun -N2 -n2 true, its own allocation (n={opts.runs})",
                           [timed(["srun", "-N2", "-n2", "true"], env, work) for _ in range(opts.runs)], None, 0.042))
        rows.append(median(f"salloc -N2 -n2 true: grant, command, release (n={opts.runs})",
                           [timed(["salloc", "-N2", "-n2", "true"], env, work) for _ in range(opts.runs)], None, 0.012))
        rows.append(median(f"python -c 'import hpcnb', fresh interpreter (n={opts.imports})",
                           import_hpcnb(env, work, opts.imports), 0.15, None))
    finally:
        subprocess.run([PY, "-m", "hpcnb.cli", "slurm", "reset"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    header = ["what", "median / total", "target", "real Slurm 22.05", "ratio to real"]
    revision = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip() or os.environ.get("HPCNB_REVISION", "unknown")
    print(f"hpcnb benchmark, {time.strftime('%Y-%m-%d %H:%M')}, hpcnb {revision}, {platform.node()} "
          f"({os.cpu_count()} cores, load {load_before:.2f} before, Python {platform.python_version()}, "
          f"{platform.platform(terse=True)}), nodes {nodes}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")
    missed = [r.what for r in rows if r.target is not None and r.seconds > r.target]
    print(f"\nload average after: {os.getloadavg()[0]:.2f}" + ("; missed: " + "; ".join(missed) if missed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
