"""End-to-end behaviour of the local Slurm through its commands (no real Slurm needed)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run

from hpcnb.backend import local_bin_dir
from hpcnb.sites import SITES_DIR


def submit(*args: str) -> int:
    done = run(["sbatch", "--parsable", *args])
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def state(job_id: int | str) -> str:
    out = run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "--format", "State"]).stdout.splitlines()
    return out[0] if out else ""


def wait_state(job_id: int, wanted: tuple[str, ...], timeout: float = 30) -> str:
    end = time.time() + timeout
    while time.time() < end:
        current = state(job_id)
        if current.split()[0] in wanted:
            return current
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} stayed {state(job_id)}, wanted {wanted}")


def squeue_field(job_id: int, fmt: str) -> str:
    return run(["squeue", "-h", "-j", str(job_id), "-o", fmt]).stdout.strip()


def test_script_directives_and_command_line_precedence(workdir: Path) -> None:
    script = workdir / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=fromscript\n#SBATCH --time=1:00\n"
                      "#SBATCH -o out-%x-%j.txt\necho name=$SLURM_JOB_NAME\n#SBATCH --job-name=ignored\n")
    job = submit("-J", "fromcli", "--wait", "job.sh")
    out = workdir / f"out-fromcli-{job}.txt"
    assert out.read_text() == "name=fromcli\n"
    assert "TimeLimit=00:01:00" in run(["scontrol", "show", "job", str(job)]).stdout


def test_output_patterns(workdir: Path) -> None:
    job = submit("--wait", "-J", "pat", "-o", "%x_%j_%N_%u.log", "-e", "err_%j.log", "--wrap", "echo out; echo err >&2")
    user = run(["id", "-un"]).stdout.strip()
    assert (workdir / f"pat_{job}_node1_{user}.log").read_text() == "out\n"
    assert (workdir / f"err_{job}.log").read_text() == "err\n"


def test_failure_timeout_and_states(workdir: Path) -> None:
    failed = submit("--wrap", "exit 3")
    killed = submit("--wrap", "kill -9 $$")
    late = submit("--time=0:01", "--wrap", "sleep 30")
    assert wait_state(failed, ("FAILED",)) == "FAILED"
    assert wait_state(killed, ("FAILED",)) == "FAILED"
    assert wait_state(late, ("TIMEOUT",), timeout=20) == "TIMEOUT"
    rows = run(["sacct", "-n", "-P", "-j", f"{failed},{killed},{late}", "--format", "JobID,State,ExitCode"]).stdout
    assert f"{failed}|FAILED|3:0" in rows and f"{failed}.batch|FAILED|3:0" in rows
    assert f"{killed}|FAILED|0:9" in rows
    assert f"{late}|TIMEOUT|0:0" in rows and f"{late}.batch|CANCELLED|0:15" in rows


def test_scontrol_update_time_limit_takes_effect_on_a_running_job(workdir: Path) -> None:
    raised = submit("--time=0:08", "--wrap", "sleep 300")
    lowered = submit("--time=10:00", "--wrap", "sleep 300")
    wait_state(raised, ("RUNNING",))
    started = time.time()
    wait_state(lowered, ("RUNNING",))
    for job, limit in ((raised, "10:00"), (lowered, "0:02")):
        done = run(["scontrol", "update", f"JobId={job}", f"TimeLimit={limit}"])
        assert done.returncode == 0, done.stderr
    assert wait_state(lowered, ("TIMEOUT",), timeout=20) == "TIMEOUT"  # killed at its new limit
    time.sleep(max(0.0, started + 9 - time.time()))  # the raised job is now past its old limit
    assert squeue_field(raised, "%T %l") == "RUNNING 10:00"
    run(["scancel", str(raised)])


@pytest.mark.parametrize(("option", "message"), [
    ("--gres=gpu:a100:1", "Requested node configuration is not available"),
    ("--gpus=a100:1", "Requested node configuration is not available"),
    ("--gpus-per-node=a100:1", "Requested node configuration is not available"),
    ("--constraint=nosuchfeature", "Invalid feature specification"),
    ("--constraint=gpu&fast", "Invalid feature specification"),
    ("--constraint=gpu,nosuch", "Invalid feature specification"),
    ("--constraint=[gpu|v100", "Invalid feature specification"),
])
def test_unknown_gpu_types_and_features_are_refused_at_submission(workdir: Path, option: str, message: str) -> None:
    done = run(["sbatch", option, "--wrap", "true"])
    assert (done.returncode, done.stderr) == (1, f"sbatch: error: Batch job submission failed: {message}\n")


MIXED_NODE = """
[[nodes]]
names = "node3"
cpus = 2
memory_mb = 8000
gpus = 1
gpu_type = "a100"
features = ["gpu", "a100", "fast"]

[[gpu_types]]
name = "a100"
"""


PLACEMENTS = [
    (["--gres=gpu:a100:1"], "node3"),
    (["--gpus=v100:1", "-N2"], "node[1-2]"),
    (["-C", "fast"], "node3"),
    (["-C", "gpu&v100|fast", "-N3"], "node[1-3]"),
    (["-C", "[v100|a100]", "-N2"], "node[1-2]"),  # a matching OR: never node3 with another
    (["-C", "a100*1", "-N2"], "node[1,3]"),
    (["-C", "v100*2"], "node[1-2]"),  # a count asks for that many nodes
]


def test_gpu_types_and_constraints_choose_the_nodes(tmp_path: Path) -> None:
    profile = tmp_path / "local.toml"
    profile.write_text((SITES_DIR / "local.toml").read_text() + MIXED_NODE)
    env = {**os.environ, "HPCNB_STATE_DIR": str(tmp_path / "state"), "HPCNB_PROFILE": str(profile)}
    try:
        placed = []
        for options, _ in PLACEMENTS:
            done = run(["sbatch", "--parsable", "--wait", *options, "--wrap", "true"], env=env, cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            nodes = run(["sacct", "-n", "-X", "-P", "-j", done.stdout.strip(), "--format", "NodeList"], env=env)
            placed.append((options, nodes.stdout.strip()))
        assert placed == PLACEMENTS
        held = run(["sbatch", "--parsable", "--hold", "-C", "v100,gpu", "--wrap", "true"], env=env, cwd=tmp_path)
        shown = run(["squeue", "-h", "-j", held.stdout.strip(), "-o", "%f"], env=env).stdout
        assert shown == "v100&gpu\n"  # slurmctld keeps a comma as &
    finally:
        run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env=env)


def test_pending_reasons_resources_priority_and_fit(workdir: Path) -> None:
    big = submit("-N2", "--exclusive", "--wrap", "sleep 300")  # until cancelled: however slow the machine
    wait_state(big, ("RUNNING",))
    second = submit("-n1", "--wrap", "true")
    third = submit("-n1", "--wrap", "true")
    assert squeue_field(second, "%T %r") == "PENDING Resources"
    assert squeue_field(third, "%T %r") == "PENDING Priority"
    run(["scancel", str(big)])
    assert wait_state(third, ("COMPLETED",)) == "COMPLETED"
    never = run(["sbatch", "--gres=gpu:3", "--wrap", "true"])
    assert never.returncode == 1
    assert never.stderr == "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"


def test_array_throttle_and_squeue_collapse(workdir: Path) -> None:
    job = submit("--array=1-4%1", "-o", "a_%A_%a.out",  # each task waits for the test's go
                 "--wrap", "until [ -e go ]; do sleep 0.05; done; echo $SLURM_ARRAY_TASK_ID")
    lines = run(["squeue", "-h", "-o", "%i %t %r"]).stdout
    assert re.search(rf"{job}_\[\d(-\d)?%1\] PD JobArrayTaskLimit", lines), lines
    (workdir / "go").touch()
    for task in range(1, 5):
        assert wait_state(f"{job}_{task}", ("COMPLETED",)) == "COMPLETED"
    assert sorted(p.read_text() for p in workdir.glob(f"a_{job}_*.out")) == ["1\n", "2\n", "3\n", "4\n"]
    starts = run(["sacct", "-n", "-X", "-P", "-j", str(job), "--format", "Start,End"]).stdout.split()
    assert len(starts) == 4


def test_dependencies(workdir: Path) -> None:
    first = submit("--wrap", "until [ -e go ]; do sleep 0.05; done")  # runs until the test lets it end
    ok = submit(f"--dependency=afterok:{first}", "--wrap", "true")
    notok = submit(f"--dependency=afternotok:{first}", "--wrap", "true")
    try:
        assert squeue_field(ok, "%r") == "Dependency"  # from submission on, as slurmctld sets it
        (workdir / "go").touch()
        assert wait_state(ok, ("COMPLETED",)) == "COMPLETED"
        deadline, seen = time.time() + 20, ""
        while (seen := squeue_field(notok, "%T %r")) != "PENDING DependencyNeverSatisfied" and time.time() < deadline:
            time.sleep(0.05)  # the controller sets the reason on its next pass
        assert seen == "PENDING DependencyNeverSatisfied"
    finally:  # nothing left running or pending for the tests after this one
        (workdir / "go").touch()
        run(["scancel", str(notok)])
    assert state(notok).startswith("CANCELLED")
    name = "single"
    one = submit("-J", name, "--wrap", "until [ -e one-may-end ]; do sleep 0.05; done")  # as long as the test likes
    two = submit("-J", name, "--dependency=singleton", "--wrap", "true")
    try:
        assert squeue_field(two, "%r") == "Dependency"
    finally:
        (workdir / "one-may-end").touch()
    wait_state(two, ("COMPLETED",))
    assert run(["sacct", "-n", "-X", "-P", "-j", str(one), "--format", "End"]).stdout <= \
        run(["sacct", "-n", "-X", "-P", "-j", str(two), "--format", "Start"]).stdout


def test_hold_release_and_cancel_pending(workdir: Path) -> None:
    job = submit("--hold", "--wrap", "true")
    assert squeue_field(job, "%r") == "JobHeldUser"
    assert run(["scontrol", "release", str(job)]).returncode == 0
    assert wait_state(job, ("COMPLETED",)) == "COMPLETED"
    held = submit("-H", "--wrap", "true")
    assert run(["scancel", str(held)]).returncode == 0
    assert state(held) == f"CANCELLED by {run(['id', '-u']).stdout.strip()}"


def test_requeue_and_preempt_keep_the_job_id(workdir: Path) -> None:
    job = submit("-o", "rq.out", "--open-mode=append", "--wrap", "echo run $SLURM_RESTART_COUNT; sleep 30")
    wait_state(job, ("RUNNING",))
    time.sleep(0.3)
    assert run(["scontrol", "requeue", str(job)]).returncode == 0
    deadline = time.time() + 20
    while "run 1" not in (workdir / "rq.out").read_text() and time.time() < deadline:
        time.sleep(0.1)
    assert "Restarts=1" in run(["scontrol", "show", "job", str(job)]).stdout
    import sys

    assert run([sys.executable, "-m", "hpcnb.cli", "slurm", "preempt", str(job)]).returncode == 0
    while "run 2" not in (workdir / "rq.out").read_text() and time.time() < deadline:
        time.sleep(0.1)
    text = (workdir / "rq.out").read_text()
    assert text.startswith("run\n") or text.startswith("run \n")
    assert "run 1" in text and "run 2" in text and "DUE TO PREEMPTION" in text
    run(["scancel", str(job)])


def test_signal_before_time_limit_reaches_the_batch_shell(workdir: Path) -> None:
    job = submit("--time=0:03", "--signal=B:USR1@2", "-o", "sig.out",
                 "--wrap", "trap 'echo got USR1; exit 0' USR1; sleep 10 & wait")
    assert wait_state(job, ("COMPLETED",), timeout=15) == "COMPLETED"
    assert "got USR1" in (workdir / "sig.out").read_text()


def test_squeue_default_format_and_me(workdir: Path) -> None:
    job = submit("-J", "sq", "--wrap", "sleep 300")  # until cancelled
    wait_state(job, ("RUNNING",))
    out = run(["squeue", "--me"]).stdout.splitlines()
    assert out[0] == "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    assert re.match(rf"\s+{job}\s+debug\s+sq\s+\S+\s+R\s+\d+:\d\d\s+1 node1$", out[1]), out[1]
    run(["scancel", str(job)])


def test_sinfo_scontrol_and_hostnames() -> None:
    run(["scancel", "--me"])
    end = time.time() + 20
    while run(["squeue", "-h"]).stdout and time.time() < end:
        time.sleep(0.1)
    assert run(["scontrol", "show", "hostnames", "node[1-2],gpu[07-08]"]).stdout.split() == \
        ["node1", "node2", "gpu07", "gpu08"]
    info = run(["sinfo", "-o", "%P %D %c %m %G"]).stdout.splitlines()
    assert info == ["PARTITION NODES CPUS MEMORY GRES", "debug* 2 2 8000 gpu:v100:2", "short 2 2 8000 gpu:v100:2",
                    "long 2 2 8000 gpu:v100:2"]
    node = run(["scontrol", "show", "node", "node2"]).stdout
    assert "NodeName=node2" in node and "RealMemory=8000" in node and "Gres=gpu:v100:2" in node
    assert "AvailableFeatures=gpu,v100" in node


def test_salloc_and_srun_steps_are_accounted(workdir: Path) -> None:
    done = run(["salloc", "-N2", "-n2", "srun", "-l", "hostname"])
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines())[0].startswith("0: ")
    job = re.search(r"Granted job allocation (\d+)", done.stderr).group(1)
    rows = run(["sacct", "-n", "-P", "-j", job, "--format", "JobID,JobName,State,NNodes"]).stdout.split()
    assert rows[0] == f"{job}|interactive|COMPLETED|2" and rows[1].startswith(f"{job}.0|hostname|COMPLETED")
    bad = run(["srun", "-n2", "sh", "-c", "exit $SLURM_PROCID"])
    assert bad.returncode == 1 and "task 1: Exited with exit code 1" in bad.stderr


def test_salloc_hands_its_allocation_to_its_supervisor_in_the_same_process(workdir: Path) -> None:
    """salloc, granted, becomes its allocation's supervisor (hpcnb.localslurm.allocation) by exec: the
    command's parent is the very salloc process started, and ``ps`` still shows salloc's command
    line; nothing of the handover reaches the command's environment."""
    salloc = subprocess.Popen(["salloc", "-n1", "sh", "-c", 'echo "$PPID"; tr "\\0" " " </proc/$PPID/cmdline; echo; env'],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = salloc.communicate(timeout=120)
    assert salloc.returncode == 0, err
    parent, cmdline, *env = out.splitlines()
    assert int(parent) == salloc.pid
    assert Path(cmdline.split()[2]).name == "salloc" and cmdline.split()[3:5] == ["-n1", "sh"], cmdline
    assert not [line for line in env if line.startswith("HPCNB_ALLOCATION_HANDOFF")], env
    job = re.search(r"Granted job allocation (\d+)", err).group(1)
    assert run(["sacct", "-n", "-X", "-j", job, "-o", "State"]).stdout.split() == ["COMPLETED"]


def test_a_wrapper_older_than_the_handover_does_not_allocate_again(workdir: Path) -> None:
    """A handover met by a command's own main (a wrapper written before it existed): one clear error, no job."""
    before = run(["squeue", "-h", "-o", "%i"]).stdout
    stale = run([sys.executable, "-c", "import sys; from hpcnb.localslurm.commands import run_and_exit; "
                 "run_and_exit('salloc', sys.argv[1:])", "-n1", "true"],
                env={**os.environ, "HPCNB_ALLOCATION_HANDOFF": "99"})
    assert (stale.returncode, stale.stderr) == (1, "salloc: error: the local Slurm's commands are out of date: "
                                                "run `hpcnb slurm-path`\n")
    for value in ("99", "9" * 26, "abc"):   # a descriptor not open, past any descriptor, no number
        lost = run([sys.executable, "-m", "hpcnb.localslurm.allocation", "srun"],
                   env={**os.environ, "HPCNB_ALLOCATION_HANDOFF": value})
        assert lost.returncode == 1 and lost.stderr.startswith("srun: error: no allocation handed over"), lost.stderr
        assert lost.stderr.count("\n") == 1, lost.stderr
    assert run(["squeue", "-h", "-o", "%i"]).stdout == before
    from hpcnb import backend
    from hpcnb.localslurm.commands import HANDOFF

    assert f'if "{HANDOFF}" in os.environ:' in backend._WRAPPER  # the wrapper's copy of the name (it imports nothing)


def test_a_step_runs_on_the_nodes_it_names_or_leaves_out(workdir: Path) -> None:
    """srun -w/-x inside an allocation, as Slurm places the step; a node outside the job is refused."""
    (workdir / "job.sh").write_text("#!/bin/bash\n"
                                    "srun -N1 -n1 -w node2 printenv SLURMD_NODENAME\n"
                                    "srun -N1 -n1 -x node1 printenv SLURMD_NODENAME\n"
                                    "srun -N1 -n1 -w node3 true || echo refused\n"
                                    "srun -N1 -n1 -w node1 -x node1 true || echo refused\n"
                                    "srun -N2 -n2 -x node2 true || echo refused\n")
    done = run(["sbatch", "--wait", "-N2", "-n2", "-o", "out.txt", "job.sh"])
    assert done.returncode == 0, done.stderr
    lines = (workdir / "out.txt").read_text().splitlines()
    assert lines[:2] == ["node2", "node2"], lines
    assert re.fullmatch(r"srun: error: Unable to create step for job \d+: Requested node configuration is not "
                        r"available", lines[2]) and lines[3] == "refused", lines
    assert lines[4:] == ["srun: error: Requested node node1 is also in the excluded list.",
                         "srun: error: Job not submitted.", "refused",
                         "srun: error: Only allocated 1 nodes asked for 2",
                         "srun: error: Are required nodes explicitly excluded?", "refused"], lines


def test_srun_relays_each_task_line_whole(workdir: Path) -> None:
    """Tasks that write a line in two pieces: srun passes whole lines on, as slurmstepd does (-u: as written)."""
    job = submit("-n2", "-o", "lines.out", "--wrap",
                 "srun bash -c 'sleep 0.5; for i in $(seq 2000); do printf \"task $SLURM_PROCID line $i\"; printf \"\\n\" >&2; "
                 "printf \"\\n\"; done'")
    wait_state(job, ("COMPLETED",))
    lines = (workdir / "lines.out").read_text().split("\n")[:-1]
    assert all(re.fullmatch(r"task [01] line \d+|", line) for line in lines), [x for x in lines if "task" in x[5:]][:3]
    assert sum(1 for line in lines if line) == 4000


def test_srun_jobid_runs_a_step_in_a_running_job(workdir: Path) -> None:
    job = submit("-N2", "-n2", "--wrap", "sleep 30")
    wait_state(job, ("RUNNING",))
    done = run(["srun", f"--jobid={job}", "sh", "-c", 'echo "$SLURM_JOB_ID.$SLURM_STEP_ID $SLURMD_NODENAME"'])
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split("\n")[:-1]) == [f"{job}.0 node1", f"{job}.0 node2"]
    rows = run(["sacct", "-n", "-P", "-j", f"{job}.0", "--format", "JobID,NTasks,State"]).stdout.split()
    assert rows == [f"{job}.0|2|COMPLETED"]
    assert run(["scancel", str(job)]).returncode == 0
    wait_state(job, ("CANCELLED",))
    gone = run(["srun", f"--jobid={job}", "true"])
    assert gone.returncode == 1 and f"Expired or invalid job {job}" in gone.stderr


def test_sacct_selects_by_name_and_by_step(workdir: Path) -> None:
    first = submit("--wait", "-J", "sel-a", "--wrap", "srun true")
    second = submit("--wait", "-J", "sel-b", "--wrap", "true")
    named = run(["sacct", "-n", "-X", "-P", "--name=sel-a,sel-b", "-o", "JobID,JobName"]).stdout.split()
    assert named == [f"{first}|sel-a", f"{second}|sel-b"]
    steps = run(["sacct", "-n", "-P", "-j", f"{first}.0,{first}.batch", "-o", "JobID"]).stdout.split()
    assert steps == [f"{first}.batch", f"{first}.0"]


def test_test_only_queues_nothing(workdir: Path) -> None:
    before = run(["squeue", "-h", "-t", "all"]).stdout
    done = run(["sbatch", "--test-only", "-n2", "--wrap", "true"])
    assert done.returncode == 0 and re.match(r"sbatch: Job \d+ to start at \S+ using 2 processors", done.stderr)
    assert run(["squeue", "-h", "-t", "all"]).stdout == before


@pytest.mark.parametrize("args, message, code", [
    (["--time=abc"], "sbatch: error: Invalid --time specification\n", 255),
    (["--partition=nope"], "sbatch: error: invalid partition specified: nope\n"
     "sbatch: error: Batch job submission failed: Invalid partition name specified\n", 1),
    (["--ntaks-per-node=2"], "sbatch: unrecognized option '--ntaks-per-node=2'\n"
     "Try \"sbatch --help\" for more information\n", 255),
    (["--mem=100000"], "sbatch: error: Memory specification can not be satisfied\n"
     "sbatch: error: Batch job submission failed: Requested node configuration is not available\n", 1),
])
def test_bad_requests_answer_like_slurm(args, message, code, workdir: Path) -> None:
    done = run(["sbatch", *args, "--wrap", "true"])
    assert (done.returncode, done.stderr, done.stdout) == (code, message, "")


def test_a_state_file_from_before_total_cpu_gains_the_column(tmp_path: Path) -> None:
    """A state file an older hpcnb made (jobs without total_cpu) is upgraded on opening."""
    import sqlite3

    from hpcnb.localslurm import db

    path = tmp_path / "slurm.db"
    db.connect(path).close()
    old = sqlite3.connect(path)
    old.execute("ALTER TABLE jobs DROP COLUMN total_cpu")
    old.commit()
    old.close()
    conn = db.connect(path)
    assert "total_cpu" in {r[1] for r in conn.execute("PRAGMA table_info(jobs)")}
    conn.close()
    db.connect(path).close()  # and again: nothing left to add


def test_sacct_total_cpu_counts_the_jobs_processes(workdir: Path) -> None:
    """TotalCPU on the job's line: the CPU time of everything the script ran (here ~0.3 s of a busy loop)."""
    done = run(["sbatch", "--wait", "--parsable", "--wrap",
                "python3 -c 'import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass'"])
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    rows = run(["sacct", "-n", "-P", "-j", job, "-o", "JobID,TotalCPU"]).stdout.split()
    total = rows[0].split("|")[1]
    assert re.fullmatch(r"00:0\d\.\d{3}", total), rows
    assert 0.3 <= float(total.split(":")[1]) < 5, rows


def test_input_environment_variables_sit_between_the_script_and_the_command_line():
    """sbatch(1): environment variables override #SBATCH lines, the command line overrides both
    (the parity case test_input_environment_variables checks the same against a real Slurm)."""
    from hpcnb.localslurm.commands.options import build_request

    env = {"SBATCH_PARTITION": "short", "SBATCH_ACCOUNT": "proj", "SALLOC_PARTITION": "nope"}
    req, _ = build_request("sbatch", ["job.sh"], ["--partition=debug"], env)
    assert (req.partition, req.account) == ("short", "proj")
    req, _ = build_request("sbatch", ["-p", "debug", "job.sh"], None, env)
    assert req.partition == "debug"
    req, _ = build_request("srun", ["true"], None, {**env, "SLURM_PARTITION": "long"})
    assert (req.partition, req.account) == ("long", None)


def test_a_login_shell_job_finds_the_local_slurm_after_its_profile(workdir: Path) -> None:
    """#!/bin/bash -l (Piz Daint's guide): /etc/profile resets PATH, as on a cluster, where srun
    stays on it; the local srun must too, never another Slurm's. $0, arguments and exit code as sbatch's."""
    (workdir / "login.sh").write_text('#!/bin/bash -l\n#SBATCH --output=login.out\n'
                                      'echo "0=$0 args=$#:$2"; shopt -q login_shell && echo login\n'
                                      'command -v srun; srun -n1 true && echo step ok\nexit 3\n')
    done = run(["sbatch", "--wait", "login.sh", "a", "b c"])
    assert done.returncode == 3, done.stderr
    out = (workdir / "login.out").read_text().splitlines()
    assert re.fullmatch(r"0=\S+/jobs/\d+/slurm_script args=2:b c", out[0]), out
    assert out[1] == "login" and out[2].startswith(str(local_bin_dir())) and out[3] == "step ok", out


def test_a_cancel_reaches_a_main_process_between_its_fork_and_its_exec() -> None:
    """A batch script's process, forked by its supervisor, keeps the daemon's command line until it
    execs: ``procs.descendants`` took it for a supervisor and left it out, and a cancel that came in
    that window killed nothing (CI under load: an array task RUNNING 60 s after scancel). Now a
    daemon is known by who it is, not by its command line; the supervisor's kills also take its
    main processes by pid."""
    import subprocess
    import sys
    import types

    from hpcnb.localslurm import procs
    from hpcnb.localslurm.supervisor import Supervisor

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", procs.DAEMON_MODULE])
    try:
        deadline = time.monotonic() + 30
        while procs.DAEMON_MODULE.encode() not in Path(f"/proc/{child.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.01)
        assert child.pid in {p.pid for p in procs.descendants()}   # named like one, but no daemon's child
        job = types.SimpleNamespace(mains={child.pid: None})
        assert child.pid in {p.pid for p in Supervisor._job_tree(job)}
    finally:
        child.kill()
        child.wait()


BIG = "9" * 20  # past 64 bits


def test_numbers_past_slurms_bounds_answer_like_slurm(lane, workdir: Path) -> None:
    """Issue 26 items 6-8, as both real Slurms answer (measured on 22.05 and 24.11): huge limits,
    begin times and throttles are accepted and the job stays visible; huge ids name no job."""
    def sbatch(*args: str) -> subprocess.CompletedProcess[str]:
        return lane.run(["sbatch", "--parsable", *args, "--wrap", "true"], cwd=workdir)

    jobs = [sbatch("--hold", f"--begin=now+{BIG}"), sbatch(f"--begin=now+{BIG}"),
            sbatch("--hold", f"--time={BIG}"), sbatch("--hold", f"--array=0-3%{BIG}")]
    assert [(j.returncode, j.stderr) for j in jobs] == [(0, "")] * 4
    ids = [j.stdout.strip() for j in jobs]
    dep = sbatch("--hold", f"--dependency=afterok:{BIG}")
    if lane.version == "22.05":
        assert (dep.returncode, dep.stderr) == (0, "")
        ids.append(dep.stdout.strip())
    else:
        assert (dep.returncode, dep.stderr) == (1, "sbatch: error: Batch job submission failed: Job dependency problem\n")
    array = sbatch("--array=0-20000000")
    assert (array.returncode, array.stderr) == (1, "sbatch: error: Batch job submission failed: "
                                                   "Invalid job array specification\n")
    looked_up = lane.run(["squeue", "-j", BIG])
    assert (looked_up.returncode, looked_up.stderr) == (1, f"squeue: error: Invalid job id: {BIG}\n")
    assert lane.run(["scancel", BIG]).returncode == 0
    for field in (f"StartTime=now+{BIG}days", f"TimeLimit={BIG}", "JobName=\udcff"):
        done = lane.run(["scontrol", "update", f"JobId={ids[0]}", field])
        assert (done.returncode, done.stderr) == (0, ""), field
    shown = {i: lane.run(["scontrol", "show", "job", i]).stdout for i in ids[:3]}
    # the limit wraps to 0 minutes: sbatch reads that as none, scontrol update keeps it (22.05, measured)
    assert "TimeLimit=00:00:00" in shown[ids[0]] and "TimeLimit=UNLIMITED" in shown[ids[2]], shown
    assert "EligibleTime=9999-12-" in shown[ids[1]], shown  # a held job's is Unknown
    listed = lane.run(["squeue", "-h", "-o", "%i %l", "-j", ",".join(ids)])
    assert listed.returncode == 0 and f"{ids[2]} UNLIMITED" in listed.stdout.splitlines(), listed.stderr
    assert lane.run(["scancel", *ids]).returncode == 0
    accounted = lane.run(["sacct", "-X", "-n", "-P", "-o", "JobID,Eligible", "-j", ",".join(ids)])
    assert accounted.returncode == 0 and f"{ids[1]}|9999-12-" in accounted.stdout, accounted.stderr
    step = lane.run(["srun", f"--jobid={BIG}", "true"], cwd=workdir)
    assert step.returncode == 1 and (step.stderr == "srun: error: Numeric argument (9223372036854775807) to big "
                                     "for --jobid.\n" if lane.version == "22.05" else "job 0:" in step.stderr)
    health = lane.run([sys.executable, "-m", "hpcnb.cli", "slurm", "recover"])
    assert health.returncode == 0 and "healthy" in health.stdout, health.stdout + health.stderr


@pytest.mark.parametrize("limit", ["UNLIMITED", "0", "11"])
def test_a_limit_past_the_partitions_pends(limit: str, workdir: Path) -> None:
    """No limit (UNLIMITED, 0) is past a partition's MaxTime too (22.05, measured): it pends."""
    job = submit("-p", "short", "-t", limit, "--wrap", "true")
    try:
        deadline = time.time() + 30
        while squeue_field(job, "%r") == "None" and time.time() < deadline:
            time.sleep(0.1)
        assert squeue_field(job, "%T %r") == "PENDING PartitionTimeLimit"
    finally:
        run(["scancel", str(job)])


def test_srun_says_got_sigcont_before_forcing_termination_when_both_wait() -> None:
    """A job's end sends srun SIGCONT, then SIGTERM; on a busy machine both may be pending when its
    signal thread wakes, and Linux hands out the lower number (SIGTERM) first. srun's lines keep the
    order of the signals (seen in parity under load: 'got SIGCONT' was lost). In a process of its
    own: a process-directed SIGTERM would kill a test worker whose other threads do not block it."""
    script = """if True:
        import os, signal as sig, time
        from hpcnb.localslurm.commands.srun import SignalThread
        sig.pthread_sigmask(sig.SIG_BLOCK, SignalThread.FORWARDED | {SignalThread.WAKE})
        os.kill(os.getpid(), sig.SIGCONT)
        os.kill(os.getpid(), sig.SIGTERM)
        assert {sig.SIGCONT, sig.SIGTERM} <= sig.sigpending()
        thread = SignalThread(set()).start()
        deadline = time.monotonic() + 10
        while sig.sigpending() & {sig.SIGCONT, sig.SIGTERM} and time.monotonic() < deadline:
            time.sleep(0.01)
        thread.stop()
    """
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "srun: got SIGCONT\nsrun: forcing job termination\n"), done


def test_immediate_gives_up_as_slurm_does(workdir: Path) -> None:
    """``--immediate`` (=1): the controller refuses what cannot start at once (FAILED); ``--immediate=N``
    waits N seconds, then the job is cancelled (salloc.c, srun/allocate.c, job_mgr.c of 22.05 and
    24.11: their texts, exit 1). With ``--begin`` in the future, =1 is a dependency problem."""
    big = submit("-N2", "--exclusive", "--wrap", "sleep 300")
    wait_state(big, ("RUNNING",))
    try:
        now = run(["salloc", "--immediate", "-n1", "true"], timeout=60)
        assert (now.returncode, now.stderr) == (
            1, "salloc: error: Unable to allocate resources: Requested nodes are busy\n")
        started = time.monotonic()
        later = run(["salloc", "--immediate=2", "-n1", "true"], timeout=60)
        waited = time.monotonic() - started
        lines = later.stderr.splitlines()
        assert later.returncode == 1 and lines[-1] == "salloc: error: Unable to allocate resources: Connection timed out"
        job = re.match(r"salloc: Pending job allocation (\d+)$", lines[0])[1]
        assert lines[1] == f"salloc: job {job} queued and waiting for resources" and 2 <= waited < 30, (lines, waited)
        assert wait_state(int(job), ("CANCELLED",)).startswith("CANCELLED")
        step = run(["srun", "-I2", "-n1", "true"], timeout=60)
        assert (step.returncode, step.stderr.splitlines()[-1]) == (
            1, "srun: error: Unable to allocate resources: Requested nodes are busy")
        ahead = submit("-n1", "--wrap", "true")  # waits for resources, and comes first
        deadline = time.time() + 30
        while squeue_field(ahead, "%r") != "Resources":  # the controller's pass has looked at it
            assert time.time() < deadline, squeue_field(ahead, "%r")
            time.sleep(0.1)
        behind = run(["salloc", "-I", "-n1", "true"], timeout=60)
        assert (behind.returncode, behind.stderr) == (
            1, "salloc: error: Unable to allocate resources: Immediate execution impossible, insufficient priority\n")
    finally:
        run(["scancel", str(big)])
    begin = run(["salloc", "--immediate", "--begin=now+1hour", "-n1", "true"], timeout=60)
    assert (begin.returncode, begin.stderr) == (1, "salloc: error: Job submit/allocate failed: Job dependency problem\n")
    begin = run(["srun", "--immediate=1", "--begin=now+1hour", "-n1", "true"], timeout=60)
    assert (begin.returncode, begin.stderr) == (1, "srun: error: Unable to allocate resources: Job dependency problem\n")
    fits = run(["salloc", "--immediate", "-n1", "echo", "granted"], timeout=60)
    assert (fits.returncode, fits.stdout) == (0, "granted\n"), fits.stderr


def test_squeue_steps_as_the_real_squeue_prints_them(workdir: Path) -> None:
    """``squeue -s``/``--steps[=LIST]``: running steps, squeue.c's default step format, by step id
    (numbered steps before ``batch``, as SLURM_BATCH_SCRIPT sorts), filtered by a list or ``-j``."""
    job = submit("-N2", "-n2", "--wrap", "srun sleep 300")
    try:
        deadline = time.time() + 60
        while "0" not in run(["squeue", "-h", "-s", "-j", str(job), "-o", "%i"]).stdout.replace(f"{job}.", ""):
            assert time.time() < deadline, "the job's step did not start"
            time.sleep(0.2)
        done = run(["squeue", "--steps", "-j", str(job)])
        lines = done.stdout.splitlines()
        assert (done.returncode, lines[0]) == (0, "         STEPID     NAME PARTITION     USER      TIME NODELIST")
        user = run(["id", "-un"]).stdout.strip()[:8]
        assert re.fullmatch(rf" +{job}\.0 +sleep +debug +{user} +\d+:\d\d node\[1-2\]", lines[1]), lines
        assert re.fullmatch(rf" +{job}\.batch +batch +debug +{user} +\d+:\d\d node1", lines[2]), lines
        assert len(lines) == 3
        # a list item's step is a strtol(): "batch" reads as 0, as the real squeue reads it (parity)
        assert run(["squeue", f"--steps={job}.batch", "-h", "-o", "%i %A"]).stdout == f"{job}.0 2\n"
        assert run(["squeue", "-hs", f"{job}.0", "-o", "%i %A"]).stdout == f"{job}.0 2\n"
        bad = run(["squeue", "-s", f"{job}"])
        assert (bad.returncode, bad.stderr) == (1, f"squeue: error: Invalid job_step id: {job}.??\n")
    finally:
        run(["scancel", str(job)])
