"""Time every lesson (and optionally every solution notebook) run alone, top to bottom.

    .venv/bin/python benchmarks/lesson_times.py                # notebooks/, one after another
    .venv/bin/python benchmarks/lesson_times.py solutions      # or any folders / notebooks

Each notebook runs with nbclient in a copy of its folder (the stored outputs are left alone),
against a private local Slurm (a temporary HPCNB_STATE_DIR, reset afterwards). Prints a markdown
table with each notebook's wall time against the course's 90 s bar, and the total.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

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
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
    start = time.perf_counter()
    try:
        client.execute()
        status = "ok"
    except Exception as exc:  # report and go on with the next notebook
        status = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:80]}"
    return time.perf_counter() - start, status


def main(argv: list[str]) -> int:
    paths = notebooks(argv)
    with tempfile.TemporaryDirectory(prefix="hpcnb-lesson-times-") as tmp:
        os.environ.update(HPCNB_STATE_DIR=str(Path(tmp) / "state"), HPCNB_SLURM="local")
        for name in [n for n in os.environ if n.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))]:
            del os.environ[name]
        load = os.getloadavg()[0]
        rows = []
        try:
            for path in paths:
                seconds, status = run_one(path, Path(tmp) / "run")
                rows.append((path.relative_to(ROOT), seconds, status))
                print(f"{path.name}: {seconds:.1f} s {status}", file=sys.stderr, flush=True)
        finally:
            subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], capture_output=True, timeout=60)
    print(f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, load {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after\n")
    print(f"| notebook | seconds | ≤ {BAR_S:g} s | status |\n|---|---|---|---|")
    for name, seconds, status in rows:
        print(f"| {name} | {seconds:.1f} | {'✅' if seconds <= BAR_S else '❌'} | {status} |")
    print(f"| **total** | {sum(r[1] for r in rows):.1f} | | |")
    return 0 if all(r[2] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
