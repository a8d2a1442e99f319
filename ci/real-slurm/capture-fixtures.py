#!/usr/bin/env python3
"""Capture reference outputs from a real Slurm started by ci/real-slurm.sh.

Usage (as root, on an idle cluster right after `ci/real-slurm.sh up [VERSION]`):
    python3 ci/real-slurm/capture-fixtures.py [--version 22.05|24.11] [OUTDIR]
VERSION defaults to $HPCNB_REAL_SLURM, else 22.05. OUTDIR defaults to tests/fixtures/captures-VERSION
(tests/fixtures/real-slurm-22.05 for 22.05, where its command cases have always been).

Command cases: every case becomes OUTDIR/<case>.txt:
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

Job environments (the same scenarios, and file names, as tests/fixtures/captures-22.05), each job
submitted from an environment holding only PATH, HOME and TMPDIR; files are `env` output, sorted:
    env_full_sbatch_N2n4_batchstep_cleanenv.txt, env_full_sbatch_N2n4_srun_task{0-3}.txt
                    sbatch -N2 -n4 --gpus-per-node=1: the batch shell and its `srun` tasks
    salloc_shell.env, salloc_srun_task_0.env   salloc -n2: its shell, and one `srun -n1` task
                    (SLURM_*/SRUN_* variables only)
    array_{3,5,7}.env          sbatch --array=3-7:2%2 -c1
    cpus_per_task_{batch,step,step_c1}.env, cpus_per_task_step_n2.txt, cpus_per_task_sacct.txt
                    sbatch -n1 -c2 (2 CPUs): the batch shell, `srun` without -c, `srun -c1`, and
                    `srun -n2` (fits only if srun does not inherit --cpus-per-task), sacct of its steps
    external_launcher.txt      `srun --external-launcher -n1 true` inside a batch job (23.11+)
The folder of the version's commands where it is not /usr/bin (for 24.11 the wrappers around its
chroot) is left out of PATH values.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB_TIMEOUT = 300

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
    ("srun_external_launcher_outside_job", ["srun", "--external-launcher", "-n1", "true"]),
]


def parse_args(argv):
    version = os.environ.get("HPCNB_REAL_SLURM") or "22.05"
    rest = []
    it = iter(argv)
    for arg in it:
        if arg == "--version":
            version = next(it, "")
        elif arg.startswith("--version="):
            version = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    default = "real-slurm-22.05" if version == "22.05" else f"captures-{version}"
    return version, rest[0] if rest else os.path.join(ROOT, "tests", "fixtures", default)


def bin_dir(version):
    """The folder of the version's commands (ci/real-slurm.sh bin VERSION)."""
    out = subprocess.run(["bash", os.path.join(ROOT, "ci", "real-slurm.sh"), "bin", version],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def run(argv, cwd, env, timeout=JOB_TIMEOUT):
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def capture_commands(outdir, scratch, env):
    results = []
    with open(os.path.join(scratch, "job.sh"), "w") as f:
        f.write("#!/bin/bash\ntrue\n")
    with open(os.path.join(scratch, "noshebang.sh"), "w") as f:
        f.write("echo hello\n")
    for name, argv in CASES:
        p = run(argv, scratch, env)
        case = {"case": name, "argv": argv, "stdout": p.stdout, "stderr": p.stderr, "exit_code": p.returncode}
        m = re.match(r"Submitted batch job (\d+)", p.stdout)
        if argv[0] == "sbatch" and m:
            time.sleep(3)
            q = run(["squeue", "-h", "-t", "all", "-j", m.group(1), "-o", "%i %T %r"], scratch, env)
            case["squeue_after_3s"] = q.stdout
            run(["scancel", m.group(1)], scratch, env)
        results.append(case)
        text = (f"$ {shlex.join(argv)}\n--- stdout ---\n{p.stdout}--- stderr ---\n{p.stderr}"
                f"--- exit code ---\n{p.returncode}\n")
        if "squeue_after_3s" in case:
            text += f"--- squeue -h -t all -j <jobid> -o '%i %T %r', 3 s later ---\n{case['squeue_after_3s']}"
        with open(os.path.join(outdir, name + ".txt"), "w") as f:
            f.write(text)
        print(f"{name}: exit {p.returncode}")
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")


# -- job environments ------------------------------------------------------------------------------
def sorted_env(path, commands, only=None):
    """`env` output, sorted, PATH without the commands' folder; only keys with a prefix in ``only``."""
    lines = []
    for line in open(path).read().splitlines():
        key, eq, value = line.partition("=")
        if not eq or (only and not key.startswith(only)):
            continue
        if key == "PATH" and commands != "/usr/bin":
            value = ":".join(p for p in value.split(":") if p != commands)
        lines.append(f"{key}={value}")
    return "\n".join(sorted(lines)) + "\n"


def job(workdir, env, argv, script=None):
    """Submit with ``sbatch --wait`` (script written to job.sh); returns the job id."""
    if script is not None:
        with open(os.path.join(workdir, "job.sh"), "w") as f:
            f.write(script)
        argv = [*argv, "job.sh"]
    p = run(["sbatch", "--wait", *argv], workdir, env)
    m = re.search(r"Submitted batch job (\d+)", p.stdout)
    if not m or p.returncode:
        raise SystemExit(f"sbatch {shlex.join(argv)} failed (exit {p.returncode}): {p.stdout}{p.stderr}")
    time.sleep(1)  # srun's files are closed after the job's end is recorded
    return m.group(1)


def final_sacct(job_id, cwd, env, fields, timeout=30):
    """sacct -P of a finished job once slurmdbd has its start record (until then a fast job's row
    is named "allocation" and lacks its request)."""
    end = time.time() + timeout
    while True:
        p = run(["sacct", "-P", "-j", job_id, "-o", fields], cwd, env)
        rows = [line.split("|") for line in p.stdout.splitlines()[1:]]
        if (rows and rows[0][1] != "allocation") or time.time() > end:
            return p
        time.sleep(0.5)


def capture_envs(outdir, version, commands):
    env = {"PATH": f"{commands}:/usr/sbin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "TMPDIR": "/tmp"}

    def keep(workdir, src, dest, only=None):
        with open(os.path.join(outdir, dest), "w") as f:
            f.write(sorted_env(os.path.join(workdir, src), commands, only))
        print(f"{dest}")

    with tempfile.TemporaryDirectory(prefix=f"hpcnb-capture-{version}-") as wd:
        job(wd, env, ["-J", "fullenv", "-N2", "-n4", "--gpus-per-node=1"],
            "#!/bin/sh\nenv > batch.env\nsrun sh -c 'env > task_$SLURM_PROCID.env'\n")
        keep(wd, "batch.env", "env_full_sbatch_N2n4_batchstep_cleanenv.txt")
        for task in range(4):
            keep(wd, f"task_{task}.env", f"env_full_sbatch_N2n4_srun_task{task}.txt")
    with tempfile.TemporaryDirectory(prefix=f"hpcnb-capture-{version}-") as wd:
        p = run(["salloc", "-n2", "sh", "-c", "env > shell.env; srun -n1 sh -c 'env > task.env'"], wd, env)
        if p.returncode:
            raise SystemExit(f"salloc failed (exit {p.returncode}): {p.stderr}")
        keep(wd, "shell.env", "salloc_shell.env", ("SLURM_", "SRUN_"))
        keep(wd, "task.env", "salloc_srun_task_0.env", ("SLURM", "SRUN_"))
    with tempfile.TemporaryDirectory(prefix=f"hpcnb-capture-{version}-") as wd:
        job(wd, env, ["--array=3-7:2%2", "-c1", "-J", "envarr", "--wrap", "env > arr_$SLURM_ARRAY_TASK_ID.env"])
        for task in (3, 5, 7):
            keep(wd, f"arr_{task}.env", f"array_{task}.env")
    with tempfile.TemporaryDirectory(prefix=f"hpcnb-capture-{version}-") as wd:
        job_id = job(wd, env, ["-J", "cpt", "-n1", "-c2"],
                     "#!/bin/sh\nenv > batch.env\nsrun env > step.env\nsrun -c1 env > step_c1.env\n"
                     "srun -n2 sh -c 'echo $SLURM_CPUS_PER_TASK' > step_n2.txt 2>&1\n"
                     "echo \"exit code $?\" >> step_n2.txt\n")
        for src, dest in (("batch", "batch"), ("step", "step"), ("step_c1", "step_c1")):
            keep(wd, f"{src}.env", f"cpus_per_task_{dest}.env")
        with open(os.path.join(wd, "step_n2.txt")) as f:
            text = re.sub(rf"\bjob {job_id}\b", "job <JOBID>", f.read())
        with open(os.path.join(outdir, "cpus_per_task_step_n2.txt"), "w") as f:
            f.write(text)
        p = final_sacct(job_id, wd, env, "JobID,JobName,NTasks,AllocCPUS,ReqCPUS,State")
        with open(os.path.join(outdir, "cpus_per_task_sacct.txt"), "w") as f:
            f.write(re.sub(rf"^{job_id}\b", "<JOBID>", p.stdout, flags=re.M))
        print("cpus_per_task_sacct.txt")
    with tempfile.TemporaryDirectory(prefix=f"hpcnb-capture-{version}-") as wd:
        job_id = job(wd, env, ["-J", "extl", "-n1", "-o", "out.txt"],
                     "#!/bin/sh\nsrun --external-launcher -n1 echo launched\necho \"exit code $?\"\n")
        shutil.copy(os.path.join(wd, "out.txt"), os.path.join(outdir, "external_launcher.txt"))
        print("external_launcher.txt")


def main():
    version, outdir = parse_args(sys.argv[1:])
    commands = bin_dir(version)
    os.makedirs(outdir, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_"))}
    env["LC_ALL"] = "C"
    env["PATH"] = f"{commands}:{env.get('PATH', '/usr/bin:/bin')}"
    version_out = run(["sinfo", "--version"], ROOT, env).stdout.split()
    if not version_out or not version_out[-1].startswith(version + "."):
        raise SystemExit(f"{commands}/sinfo is not Slurm {version} (sinfo --version: {' '.join(version_out)!r})")
    with tempfile.TemporaryDirectory(prefix="hpcnb-capture-") as scratch:
        capture_commands(outdir, scratch, env)
    capture_envs(outdir, version, commands)


if __name__ == "__main__":
    main()
