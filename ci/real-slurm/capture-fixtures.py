#!/usr/bin/env python3
"""Capture reference outputs from the real Slurm started by ci/real-slurm.sh.

Usage (as root, on an idle cluster right after `ci/real-slurm.sh up`):
    python3 ci/real-slurm/capture-fixtures.py [OUTDIR]
OUTDIR defaults to tests/fixtures/real-slurm-22.05.

Every case becomes OUTDIR/<case>.txt:
    $ <command line>
    --- stdout ---
    <stdout, verbatim>
    --- stderr ---
    <stderr, verbatim>
    --- exit code ---
    <n>
and, where sbatch accepted the job, a last section with the job's state and reason three
seconds later (`squeue -t all`, so finished jobs show too); the job is then cancelled. OUTDIR/cases.json holds the same
data (argv, stdout, stderr, exit code) for tests to load without parsing text.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTDIR = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fixtures", "real-slurm-22.05")

# name -> argv; sbatch cases run in a scratch directory holding job.sh and noshebang.sh
CASES = [
    ("sinfo", ["sinfo"]),
    ("squeue", ["squeue"]),
    ("scontrol_show_node_node1", ["scontrol", "show", "node", "node1"]),
    ("scontrol_show_partition", ["scontrol", "show", "partition"]),
    ("sbatch_time_abc", ["sbatch", "--time=abc", "--wrap", "true"]),
    ("sbatch_partition_nope", ["sbatch", "--partition=nope", "--wrap", "true"]),
    ("sbatch_nodes_3", ["sbatch", "-N", "3", "--wrap", "true"]),
    ("sbatch_ntasks_negative", ["sbatch", "--ntasks=-1", "--wrap", "true"]),
    ("sbatch_cpus_per_task_0", ["sbatch", "--cpus-per-task=0", "--wrap", "true"]),
    ("sbatch_gres_gpu_3", ["sbatch", "--gres=gpu:3", "--wrap", "true"]),
    ("sbatch_mem_100000", ["sbatch", "--mem=100000", "--wrap", "true"]),
    ("sbatch_array_5-1", ["sbatch", "--array=5-1", "--wrap", "true"]),
    ("sbatch_array_throttle_0", ["sbatch", "--array=1-3%0", "--wrap", "true"]),
    ("sbatch_dependency_missing_job", ["sbatch", "--dependency=afterok:999999", "--wrap", "true"]),
    ("sbatch_unknown_option", ["sbatch", "--ntaks-per-node=2", "--wrap", "true"]),
    ("sbatch_no_shebang", ["sbatch", "noshebang.sh"]),
    ("sbatch_missing_script", ["sbatch", "does-not-exist.sh"]),
    ("sbatch_wrap_and_script", ["sbatch", "--wrap", "true", "job.sh"]),
]


def main():
    os.makedirs(OUTDIR, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_"))}
    env["LC_ALL"] = "C"
    results = []
    with tempfile.TemporaryDirectory(prefix="hpcnb-capture-") as scratch:
        with open(os.path.join(scratch, "job.sh"), "w") as f:
            f.write("#!/bin/bash\ntrue\n")
        with open(os.path.join(scratch, "noshebang.sh"), "w") as f:
            f.write("echo hello\n")
        for name, argv in CASES:
            p = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True)
            case = {"case": name, "argv": argv, "stdout": p.stdout, "stderr": p.stderr, "exit_code": p.returncode}
            m = re.match(r"Submitted batch job (\d+)", p.stdout)
            if argv[0] == "sbatch" and m:
                time.sleep(3)
                q = subprocess.run(["squeue", "-h", "-t", "all", "-j", m.group(1), "-o", "%i %T %r"],
                                   env=env, capture_output=True, text=True)
                case["squeue_after_3s"] = q.stdout
                subprocess.run(["scancel", m.group(1)], env=env)
            results.append(case)
            text = (f"$ {shlex.join(argv)}\n--- stdout ---\n{p.stdout}--- stderr ---\n{p.stderr}"
                    f"--- exit code ---\n{p.returncode}\n")
            if "squeue_after_3s" in case:
                text += f"--- squeue -h -t all -j <jobid> -o '%i %T %r', 3 s later ---\n{case['squeue_after_3s']}"
            with open(os.path.join(OUTDIR, name + ".txt"), "w") as f:
                f.write(text)
            print(f"{name}: exit {p.returncode}")
    with open(os.path.join(OUTDIR, "cases.json"), "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
