"""Does the local Slurm slow down with history? Command latency at 0, 1k, 3k and 10k finished jobs.

    .venv/bin/python benchmarks/history.py [--sizes 0,1000,3000,10000] [--runs 9]

A private local Slurm runs one real job (``sbatch --wait``), then its finished row (with its steps)
is copied to make the history: the same rows a day of workshop arrays leaves, made in seconds.
Each size is timed with the history's jobs ended more than MinJobAge (300 s) ago, as they are
after a day, and ``squeue`` once more with them just ended (within MinJobAge: slurmctld still holds
them, as right after a large array). Prints a markdown table of medians (and the spread: min-max)
and the bounds: squeue <= 0.1 s (both cases), sacct -j ID <= 0.1 s, sbatch --wait --wrap true <= 0.15 s.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BOUNDS = {"squeue": 0.10, "squeue (just ended)": 0.10, "sacct -j ID": 0.10, "sacct (today's jobs)": None,
          "sbatch --wait --wrap true": 0.15}


def timed(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=120)
        times.append(time.perf_counter() - start)
    return times


def grow_history(state: Path, template_id: int, total: int) -> None:
    """Copy the template job (and its steps) until the state holds ``total`` finished jobs."""
    conn = sqlite3.connect(state / "slurm.db", timeout=60)
    have = conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    if total <= have:
        return
    columns = [r[1] for r in conn.execute("PRAGMA table_info(jobs)") if r[1] != "id"]
    step_columns = [r[1] for r in conn.execute("PRAGMA table_info(steps)") if r[1] != "job_id"]
    old = time.time() - 3600  # ended an hour ago: past MinJobAge
    top = conn.execute("SELECT MAX(id) FROM jobs").fetchone()[0]
    with conn:
        for job_id in range(top + 1, top + 1 + total - have):
            conn.execute(f"INSERT INTO jobs(id, {', '.join(columns)}) SELECT ?, {', '.join(columns)} FROM jobs "
                         "WHERE id=?", (job_id, template_id))
            conn.execute(f"INSERT INTO steps(job_id, {', '.join(step_columns)}) SELECT ?, {', '.join(step_columns)} "
                         "FROM steps WHERE job_id=?", (job_id, template_id))
        conn.execute("UPDATE jobs SET end_time=?, start_time=?, submit_time=? WHERE id>?", (old, old - 1, old - 2, top))
        conn.execute("UPDATE meta SET value=? WHERE key='next_job_id'", (str(top + 1 + total - have),))
    conn.close()


def set_history_end(state: Path, template_id: int, ago: float) -> None:
    """Make every job after the template end ``ago`` seconds ago."""
    conn = sqlite3.connect(state / "slurm.db", timeout=60)
    with conn:
        end = time.time() - ago
        conn.execute("UPDATE jobs SET end_time=?, start_time=?, submit_time=? WHERE id>?", (end, end - 1, end - 2, template_id))
    conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="0,1000,3000,10000")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from hpcnb.backend import local_bin_dir

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HPCNB_STATE_DIR": f"{tmp}/state", "HPCNB_SLURM": "local",
               "PATH": f"{local_bin_dir()}{os.pathsep}{os.environ['PATH']}"}
        cwd = Path(tmp)
        first = subprocess.run(["sbatch", "--parsable", "--wait", "-o", "/dev/null", "--wrap", "srun true"],
                               env=env, cwd=cwd, check=True, capture_output=True, text=True).stdout
        template = int(first.strip().split(";")[0])
        rows = []
        for size in sizes:
            grow_history(Path(tmp) / "state", template, max(size, 1))
            cases = {
                "squeue": ["squeue"],
                "sacct -j ID": ["sacct", "-j", str(template)],
                "sacct (today's jobs)": ["sacct"],
                "sbatch --wait --wrap true": ["sbatch", "--wait", "-o", "/dev/null", "--wrap", "true"],
            }
            results = {name: timed(argv, env, args.runs) for name, argv in cases.items()}
            set_history_end(Path(tmp) / "state", template, 1)
            results["squeue (just ended)"] = timed(["squeue"], env, args.runs)
            set_history_end(Path(tmp) / "state", template, 3600)
            rows.append((size, {name: results[name] for name in BOUNDS}))
        subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env=env, capture_output=True)
    print(f"History benchmark, {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cores; median (min-max) of {args.runs} runs, seconds\n")
    print("| finished jobs | " + " | ".join(BOUNDS) + " |")
    print("|---|" + "---|" * len(BOUNDS))
    for size, results in rows:
        cells = [f"{statistics.median(t):.3f} ({min(t):.3f}-{max(t):.3f})" for t in results.values()]
        print(f"| {size:,} | " + " | ".join(cells) + " |")
    print("| bound | " + " | ".join(f"<= {b:.2f}" if b else "-" for b in BOUNDS.values()) + " |")
    worst = rows[-1][1]
    over = [n for n, b in BOUNDS.items() if b and statistics.median(worst[n]) > b]
    print(f"\nat {rows[-1][0]:,} jobs: " + ("all within their bounds" if not over else f"over: {', '.join(over)}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
