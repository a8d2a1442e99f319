"""Time every lesson (and optionally every solution notebook) run alone, top to bottom.

    .venv/bin/python benchmarks/lesson_times.py                # notebooks/, one after another
    .venv/bin/python benchmarks/lesson_times.py solutions      # or any folders / notebooks
    .venv/bin/python benchmarks/lesson_times.py --on local,real   # and on the real Slurm (ci/real-slurm.sh up)

Each notebook runs with nbclient in a copy of its folder (the stored outputs are left alone),
against a private local Slurm (a temporary HPCNB_STATE_DIR, reset afterwards) and, with
``--on local,real``, against the real Slurm the machine has (HPCNB_SLURM=real). Prints a markdown
table with each notebook's wall time on each, the local one against the course's 90 s bar, the
ratio local/real, and the totals.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from hpcnb.course.kernels import ipc_kernel_manager

ROOT = Path(__file__).resolve().parent.parent
BAR_S = 90.0


def notebooks(args: list[str]) -> list[Path]:
    found: list[Path] = []
    for arg in args or ["notebooks"]:
        path = (ROOT / arg) if not Path(arg).is_absolute() else Path(arg)
        found += sorted(path.glob("*.ipynb")) if path.is_dir() else [path]
    return found


def run_one(path: Path, scratch: Path) -> tuple[float, str]:
    """Run a copy of ``path`` in a copy of its folder; returns (seconds, "ok" or the error)."""
    folder = scratch / path.parent.name
    if not folder.exists():
        shutil.copytree(path.parent, folder, ignore=shutil.ignore_patterns("work", ".ipynb_checkpoints"))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", kernel_manager_class=ipc_kernel_manager(),
                            resources={"metadata": {"path": str(folder)}})
    start = time.perf_counter()
    try:
        client.execute()
        status = "ok"
    except Exception as exc:  # report and go on with the next notebook
        status = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:80]}"
    return time.perf_counter() - start, status


def run_all(paths: list[Path], slurm: str, tmp: Path) -> dict[Path, tuple[float, str]]:
    """Each notebook on one Slurm ("local": a private one, reset afterwards; "real": HPCNB_SLURM=real)."""
    saved = dict(os.environ)
    os.environ["HPCNB_SLURM"] = slurm
    if slurm == "local":
        os.environ["HPCNB_STATE_DIR"] = str(tmp / "state")
    for name in [n for n in os.environ if n.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))]:
        del os.environ[name]
    results = {}
    try:
        for path in paths:
            results[path] = run_one(path, tmp / f"run-{slurm}")
            print(f"{slurm}: {path.name}: {results[path][0]:.1f} s {results[path][1]}", file=sys.stderr, flush=True)
    finally:
        if slurm == "local":
            subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], capture_output=True, timeout=60)
        os.environ.clear()
        os.environ.update(saved)
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", help="folders or notebooks (default: notebooks)")
    parser.add_argument("--on", default="local", help="local, real or local,real (default: local)")
    args = parser.parse_args(argv)
    sides = args.on.split(",")
    paths = notebooks(args.paths)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="hpcnb-lesson-times-") as tmp:
        times = {side: run_all(paths, side, Path(tmp)) for side in sides}
    print(f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, load {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after\n")
    both = sides == ["local", "real"]
    head = "".join(f" {side} s |" for side in sides) + (f" local ≤ {BAR_S:g} s |" if "local" in sides else "")
    print(f"| notebook |{head}{' local/real |' if both else ''} status |")
    print("|---|" + "---|" * (len(sides) + ("local" in sides) + both + 1))
    for path in paths:
        cells = "".join(f" {times[side][path][0]:.1f} |" for side in sides)
        if "local" in sides:
            cells += f" {'✅' if times['local'][path][0] <= BAR_S else '❌'} |"
        if both:
            cells += f" {times['local'][path][0] / times['real'][path][0]:.2f} |"
        status = "; ".join(f"{side}: {times[side][path][1]}" for side in sides)
        print(f"| {path.relative_to(ROOT)} |{cells} {status} |")
    totals = {side: sum(t for t, _ in times[side].values()) for side in sides}
    print("| **total** |" + "".join(f" {totals[side]:.1f} |" for side in sides)
          + (" |" if "local" in sides else "") + (f" {totals['local'] / totals['real']:.2f} |" if both else "") + " |")
    return 0 if all(status == "ok" for side in sides for _, status in times[side].values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
