"""The local Slurm answers as Slurm 22.05 does where programs read the answer: srun in an ended or
unknown job, srun --kill-on-bad-exit, and the squeue/sacct formats batchspawner, dask-jobqueue and
submitit parse (the texts come from Slurm 22.05's sources; tests/parity compares them live)."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run

CHECK = "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job {}\n"
FAIL_ONE = "if [ $SLURM_PROCID = 1 ]; then exit 3; fi; sleep 30"


def submit(*args: str) -> int:
    done = run(["sbatch", "--parsable", *args])
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def wait_state(job_id: int, wanted: tuple[str, ...], timeout: float = 30) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"]).stdout.strip() in wanted:
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never reached {wanted}")


def env_with(**values: str) -> dict[str, str]:
    return {**os.environ, **values}


def ended_job() -> int:
    job = submit("--wait", "--wrap", "true")
    wait_state(job, ("COMPLETED",))
    return job


def age_job(job: int, seconds: float) -> None:
    """Pretend the job ended ``seconds`` ago (past MinJobAge: slurmctld has forgotten it)."""
    from hpcnb.localslurm import db

    conn = db.connect()
    with db.transaction(conn):
        conn.execute("UPDATE jobs SET end_time=end_time-? WHERE id=?", (seconds, job))
    conn.close()


# -- srun with an ended, unknown or pending job ----------------------------------------------------
def test_srun_in_an_ended_job_says_it_has_expired(workdir: Path) -> None:
    job = ended_job()
    for how in ({"env": env_with(SLURM_JOB_ID=str(job))}, {"args": [f"--jobid={job}"]}):
        done = run(["srun", *how.get("args", []), "true"], env=how.get("env"))
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr == f"srun: error: Slurm job {job} has expired\n" + CHECK.format(job)


def test_srun_in_an_unknown_or_forgotten_job_says_invalid_job_id(workdir: Path) -> None:
    job = ended_job()
    age_job(job, 301)
    for job_id in (job, 999999):
        done = run(["srun", "true"], env=env_with(SLURM_JOB_ID=str(job_id)))
        assert done.returncode == 1
        assert done.stderr == (f"srun: error: Unable to confirm allocation for job {job_id}: Invalid job id "
                               f"specified\n" + CHECK.format(job_id))


def test_srun_in_a_pending_job(workdir: Path) -> None:
    job = submit("-H", "--wrap", "true")
    done = run(["srun", f"--jobid={job}", "true"])
    run(["scancel", str(job)])
    assert done.returncode == 1
    assert done.stderr == (f"srun: error: Unable to confirm allocation for job {job}: Job is pending execution\n"
                           + CHECK.format(job))


@pytest.mark.parametrize("value", ["abc", "0", ""])
def test_srun_bad_slurm_job_id(value: str, workdir: Path) -> None:
    done = run(["srun", "true"], env=env_with(SLURM_JOB_ID=value))
    assert (done.returncode, done.stderr) == (1, f'srun: error: Invalid numeric value "{value}" for --jobid.\n')


def test_srun_jobid_option_wins_over_the_environment(workdir: Path) -> None:
    ended = ended_job()
    job = submit("--wrap", "sleep 30")
    wait_state(job, ("RUNNING",))
    done = run(["srun", f"--jobid={job}", "sh", "-c", "echo $SLURM_JOB_ID"], env=env_with(SLURM_JOB_ID=str(ended)))
    run(["scancel", str(job)])
    assert (done.returncode, done.stdout) == (0, f"{job}\n"), done.stderr


@pytest.mark.parametrize("stale", ["ended", "999999", "abc"])
def test_salloc_ignores_slurm_job_id(stale: str, workdir: Path) -> None:
    """As 22.05's salloc: a new allocation whatever SLURM_JOB_ID names (ended, never was, not a number)."""
    stale = str(ended_job()) if stale == "ended" else stale
    done = run(["salloc", "-n1", "sh", "-c", "echo $SLURM_JOB_ID $SLURM_JOBID"],
               env=env_with(SLURM_JOB_ID=stale, SLURM_JOBID=stale))
    assert done.returncode == 0, done.stderr
    job = done.stderr.split("Granted job allocation ")[1].split()[0]
    assert done.stdout == f"{job} {job}\n" and job != stale


# -- srun --kill-on-bad-exit -----------------------------------------------------------------------
def bad_exit_lines(job: int | str, first_node_busy: bool = True) -> list[str]:
    lines = ["srun: error: node1: task 1: Exited with exit code 3", f"srun: launch/slurm: _step_signal: Terminating StepId={job}.0",
             "srun: error: node1: task 0: Terminated", f"srun: Force Terminated StepId={job}.0"]
    if first_node_busy:
        lines.append(f"slurmstepd-node1: error: *** STEP {job}.0 ON node1 CANCELLED AT <TIME> ***")
    return sorted(lines)


def normalised(stderr: str) -> list[str]:
    return sorted(re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", "<TIME>", stderr).splitlines())


@pytest.mark.parametrize("how", [["-K"], ["-K1"], ["--kill-on-bad-exit"], ["--kill-on-bad-exit=1"], "env"])
def test_kill_on_bad_exit_ends_the_step_at_once(how, workdir: Path) -> None:
    args, env = (how, None) if how != "env" else ([], env_with(SLURM_KILL_BAD_EXIT="1"))
    start = time.time()
    done = run(["srun", "-n2", *args, "bash", "-c", FAIL_ONE], env=env, timeout=25)
    assert time.time() - start < 15
    assert done.returncode == 143  # the killed task's SIGTERM wins over exit code 3, as in srun 22.05
    job = done.stderr.split("StepId=")[1].split(".")[0]
    assert normalised(done.stderr) == bad_exit_lines(job)


def sacct_rows(job: int | str) -> list[str]:
    return run(["sacct", "-n", "-P", "-j", str(job), "-o", "JobID,State,ExitCode"]).stdout.split()


def test_kill_on_bad_exit_records_like_slurmctld(workdir: Path) -> None:
    """One node: its slurmstepd reports the killed task first (0:15, CANCELLED); over two nodes
    slurmctld keeps the highest status (exit 3 > signal 15: FAILED 3:0). The job ends with srun's status."""
    one = run(["srun", "-n2", "-K", "bash", "-c", FAIL_ONE], timeout=25)
    job = one.stderr.split("StepId=")[1].split(".")[0]
    assert sacct_rows(job) == [f"{job}|FAILED|0:15", f"{job}.0|CANCELLED|0:15"]
    two = run(["srun", "-N2", "-n2", "-K", "bash", "-c", FAIL_ONE.replace("= 1", "= 0")], timeout=25)
    job = two.stderr.split("StepId=")[1].split(".")[0]
    assert two.returncode == 143
    assert normalised(two.stderr) == sorted([  # node1 ran only the failed task: its slurmstepd says nothing
        "srun: error: node1: task 0: Exited with exit code 3", "srun: error: node2: task 1: Terminated",
        f"srun: launch/slurm: _step_signal: Terminating StepId={job}.0", f"srun: Force Terminated StepId={job}.0"])
    assert sacct_rows(job) == [f"{job}|FAILED|0:15", f"{job}.0|FAILED|3:0"]


def test_kill_on_bad_exit_inside_a_batch_job(workdir: Path) -> None:
    job = submit("-n2", "-o", "k.out", "--wrap", f"srun -K bash -c '{FAIL_ONE}'; echo rc=$?")
    wait_state(job, ("COMPLETED",), timeout=20)
    out = (workdir / "k.out").read_text()
    assert "rc=143\n" in out
    assert normalised(out.replace("rc=143\n", "")) == bad_exit_lines(job)


def test_without_kill_on_bad_exit_the_others_run_on(workdir: Path) -> None:
    for args, env in (([], None), (["-K0"], env_with(SLURM_KILL_BAD_EXIT="1"))):
        done = run(["srun", "-n2", *args, "bash", "-c", "if [ $SLURM_PROCID = 1 ]; then exit 3; fi; sleep 1; echo ran"],
                   env=env)
        assert (done.returncode, done.stdout) == (3, "ran\n")
        assert done.stderr == "srun: error: node1: task 1: Exited with exit code 3\n"


def test_kill_on_bad_exit_bad_value(workdir: Path) -> None:
    for args, env in ((["--kill-on-bad-exit=abc"], None), ([], env_with(SLURM_KILL_BAD_EXIT="-1"))):
        done = run(["srun", *args, "true"], env=env)
        value = "abc" if args else "-1"
        assert (done.returncode, done.stderr) == (
            1, f'srun: error: Invalid numeric value "{value}" for --kill-on-bad-exit.\n')


def test_task_killed_by_a_signal_is_named_as_strsignal(workdir: Path) -> None:
    done = run(["srun", "-n1", "-J", "segv", "bash", "-c", "kill -SEGV $$"])
    assert done.returncode == 128 + 11
    assert "srun: error: node1: task 0: Segmentation fault" in done.stderr  # (core dumped) with ulimit -c
    job = run(["sacct", "-n", "-X", "-P", "-o", "JobID", "--name=segv"]).stdout.split()[-1]
    assert sacct_rows(job) == [f"{job}|FAILED|0:11", f"{job}.0|CANCELLED|0:11"]


# -- srun's lines under signals ------------------------------------------------------------------
SIGNALLED_STEPS = 10
# every line a signalled srun may write; a line split by a signal handler matches none of them
SRUN_SIGNAL_LINE = re.compile(r"srun: (got SIGCONT|forcing job termination|error: node\d+: task 0: Terminated"
                              r"|Force Terminated StepId=\d+\.\d+)")
SIGNALLED_STEP_SCRIPT = f"""#!/bin/bash
for i in $(seq {SIGNALLED_STEPS}); do
  srun -n1 sh -c 'echo up; exec sleep 30' > up.$i 2>> srun.err &
  pid=$!
  for _ in $(seq 500); do [ -s up.$i ] && break; sleep 0.01; done
  kill -CONT $pid; kill -TERM $pid; kill -CONT $pid; kill -TERM $pid; kill -CONT $pid
  wait $pid
  echo $? >> srun.rc
done 2>/dev/null
exit 0
"""


def test_srun_writes_each_line_whole_when_signals_come_together(workdir: Path) -> None:
    """SIGCONT and SIGTERM sent together, again and again, beside a CPU-bound loop: each line srun says
    is whole (its handlers only queue a signal; one thread writes each line in one write(2)). A line
    used to be split when a handler ran while another's line was half written."""
    (workdir / "job.sh").write_text(SIGNALLED_STEP_SCRIPT)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        done = run(["sbatch", "--wait", "-t", "5", "-o", "job.out", "job.sh"], timeout=240)
    finally:
        busy.kill()
        busy.wait()
    assert done.returncode == 0, done.stderr + (workdir / "job.out").read_text()
    lines = (workdir / "srun.err").read_text().split("\n")
    assert lines.pop() == "", "srun's last line has no newline"
    split = [line for line in lines if not SRUN_SIGNAL_LINE.fullmatch(line)]
    assert not split, f"lines not whole: {split!r}"
    assert lines.count("srun: forcing job termination") >= SIGNALLED_STEPS // 2, lines
    # each srun ended with its signalled task (128 + SIGTERM), or by SIGTERM itself if it came before
    # srun took its signals; none waited for its task's 30 s
    assert set((workdir / "srun.rc").read_text().split()) <= {"143"}


# -- the formats batchspawner, dask-jobqueue and submitit read -------------------------------------
def test_batchspawner_state_and_exec_host(workdir: Path) -> None:
    held = submit("-H", "--wrap", "true")
    job = submit("--wrap", "sleep 30")
    wait_state(job, ("RUNNING",))
    query = ["squeue", "-h", "-j", "{}", "-o", "%T %B"]
    assert run([q.format(held) for q in query]).stdout == "PENDING n/a\n"
    assert run([q.format(job) for q in query]).stdout == "RUNNING node1\n"
    assert run(["squeue", "-j", str(job), "-o", "%B|%.10B|"]).stdout == "EXEC_HOST| EXEC_HOST|\nnode1|     node1|\n"
    run(["scancel", str(held), str(job)])
    wait_state(job, ("CANCELLED",))
    assert run([q.format(job) for q in query]).stdout == ""  # an ended job shows only with -t
    query[1:1] = ["-t", "all"]
    assert run([q.format(job) for q in query]).stdout == "CANCELLED node1\n"  # the batch host stays
    assert run([q.format(held) for q in query]).stdout == "CANCELLED n/a\n"


def test_exec_host_of_an_interactive_job_is_the_submit_host(workdir: Path) -> None:
    done = run(["salloc", "-n1", "sh", "-c", "squeue -h -j $SLURM_JOB_ID -o '%T %B'"])
    assert done.stdout == f"RUNNING {socket.gethostname()}\n", done.stderr


def test_dask_jobqueue_queries(workdir: Path) -> None:
    job = submit("--wrap", "sleep 30")
    wait_state(job, ("RUNNING",))
    assert run(["squeue", "-h", f"--job={job}", "-o", "%T"]).stdout == "RUNNING\n"
    assert run(["squeue", "-h", "--job", str(job), "-o", "%i %T"]).stdout == f"{job} RUNNING\n"
    run(["scancel", str(job)])


def test_squeue_with_several_unknown_ids_lists_nothing(workdir: Path) -> None:
    done = run(["squeue", "-h", "-j", "999998,999999", "-o", "%i"])
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_squeue_forgets_a_job_after_min_job_age(workdir: Path) -> None:
    job = ended_job()
    assert run(["squeue", "-h", "-t", "all", "-j", str(job), "-o", "%T"]).stdout == "COMPLETED\n"
    age_job(job, 301)
    done = run(["squeue", "-h", "-t", "all", "-j", str(job), "-o", "%T"])
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "slurm_load_jobs error: Invalid job id specified\n")


def test_submitit_sacct_with_one_j_per_job(workdir: Path) -> None:
    first, second = ended_job(), submit("--wrap", "exit 2")
    wait_state(second, ("FAILED",))
    done = run(["sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", str(first), "-j", str(second)])
    assert done.stdout.splitlines() == [
        "JobID|State|NodeList", f"{first}|COMPLETED|node1", f"{first}.batch|COMPLETED|node1",
        f"{second}|FAILED|node1", f"{second}.batch|FAILED|node1"]


def test_sacct_format_options_add_up(workdir: Path) -> None:
    job = ended_job()
    done = run(["sacct", "-X", "-n", "-P", "-j", str(job), "-o", "JobID", "-o", "JobName", "-b"])
    assert done.stdout == f"{job}|wrap|{job}|COMPLETED|0:0\n"


# -- salloc whose allocation is revoked -------------------------------------------------------------
@pytest.mark.parametrize("kill", [None, "-K", "--kill-command=INT"])
def test_salloc_revoked_ends_the_steps_and_leaves_the_command_unless_told(workdir: Path, kill: str | None) -> None:
    """As Slurm's salloc: scancel ends the allocation (and its steps) at once; the command, on the
    login node, runs on and salloc waits for it, unless -K/--kill-command names a signal for it."""
    import subprocess

    command = "srun sleep 60 & echo $SLURM_JOB_ID > id.txt; wait; sleep 3; echo command-ran-to-its-end"
    salloc = subprocess.Popen(["salloc", "-N1", *([kill] if kill else []), "bash", "-c", command], cwd=workdir,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            if (workdir / "id.txt").exists() and (workdir / "id.txt").read_text().strip():
                break
            time.sleep(0.05)
        job = int((workdir / "id.txt").read_text())
        wait_state(job, ("RUNNING",))
        time.sleep(0.5)  # the step started
        assert run(["scancel", str(job)]).returncode == 0
        wait_state(job, ("CANCELLED",))  # at once, while the command still runs
        assert salloc.poll() is None or kill
        out, err = salloc.communicate(timeout=60)
    finally:
        salloc.kill()
    assert f"salloc: Job allocation {job} has been revoked.\n" in err
    assert "Relinquishing" not in err and "*** JOB" not in err, err
    assert re.search(rf"STEP {job}\.0 ON node1 CANCELLED", err), err
    if kill:
        assert (out, salloc.returncode) == ("", 1 if kill == "-K" else 0)  # SIGTERM: 1; SIGINT: 0 (salloc.c)
    else:
        assert (out, salloc.returncode) == ("command-ran-to-its-end\n", 0)


# -- output file name patterns (as a real 22.05 expanded them: tests/parity test_output_file_names) -----
JOB = {"id": 264, "array_job_id": None, "array_task_id": None, "name": "nm", "user": "ann"}
TASK = {**JOB, "id": 274, "array_job_id": 265, "array_task_id": 3}


@pytest.mark.parametrize("job, pattern, name", [
    (JOB, "J-%J.out", "J-264.out"),  # dask-jobqueue: %J of the batch step is the job id alone
    (JOB, "pad-%4j-%12j-%1j-%0j-%04j.out", "pad-0264-0000000264-264-264-0264.out"),
    (TASK, "arr-%A-%a-%4a-%5A-%J-%2J.out", "arr-265-3-0003-00265-274-274.out"),
    (JOB, "t-%3x-%3u-%3N-%3n-%3t-%3s-%5a.out", "t-nm-ann-node1-000-000-batch-4294967294.out"),
    (JOB, "unk-%q-%-3j-%.3j-%+j.out", "unk-%q-%-3j-%.3j-%+j.out"),
    (JOB, "w-%12q-%3%x-%1x-%3", "w-2q-3nm-nm-3"),  # a width before no pattern: its last digit stays
    (JOB, "pw-%5%-%2%%j-%0%j", "pw-5%-2%j-0264"),
    (JOB, "lit-%%j-%%%j-%", "lit-%j-%264-%"),
    (JOB, r"esc\%j-%x.out", "esc%j-%x.out"),  # a backslash: nothing expanded, the backslashes go
    (JOB, r"bs-a\b\\c%j%", r"bs-ab\c%j%"),
])
def test_file_name_patterns_as_slurmstepd_expands_them(job: dict, pattern: str, name: str) -> None:
    from hpcnb.localslurm.patterns import expand_pattern

    assert expand_pattern(pattern, job, "node1") == name


@pytest.mark.parametrize("job, pattern, shown", [
    (JOB, "s-%N-%n-%t-%s-%u-%x-%j-%A-%a-%J-%%-%q-%4j.out", "s-%N-%n-%t-%s-ann-nm-264-264-4294967294-%J-%%-%q-%4j.out"),
    (TASK, "sa-%A_%a-%j-%%A-%4a.out", "sa-265_3-274-%265-%4a.out"),
    (JOB, r"esc\%j", r"esc\264"),
])
def test_scontrol_shows_only_a_few_patterns_expanded(job: dict, pattern: str, shown: str) -> None:
    from hpcnb.localslurm.patterns import shown_pattern

    assert shown_pattern(pattern, job) == shown


# -- --export: the job's environment, srun inside it ------------------------------------------------
def test_export_keeps_the_local_slurm_settings() -> None:
    from hpcnb.localslurm.submit import export_env

    environ = {"HOME": "/h", "FOO": "1", "SLURM_X": "x", "HPCNB_STATE_DIR": "/s", "HPCNB_NODE_TMP": "/t"}
    settings = {"HPCNB_STATE_DIR": "/s", "HPCNB_NODE_TMP": "/t"}
    assert export_env("NONE", environ) == export_env("none", environ) == {"SLURM_X": "x", **settings}
    assert export_env("FOO,BAR=2", environ) == {"SLURM_X": "x", "FOO": "1", "BAR": "2", **settings}
    assert export_env("all,BAR=2", environ) == {**environ, "BAR": "2"}
    assert export_env(None, environ) == export_env("ALL", environ) == environ


def test_srun_runs_in_a_job_whatever_its_export(workdir: Path) -> None:
    """batchspawner's --export=<names>, and NONE: the job keeps the local Slurm's state and finds its
    srun on the login PATH; SLURM_EXPORT_ENV is then the steps' --export (no PATH: no bash)."""
    from hpcnb.backend import local_bin_dir

    script = workdir / "job.sh"
    script.write_text("#!/bin/bash\necho PATH=$PATH\nsrun -n1 /bin/sh -c 'echo step HOME=${HOME-unset}'\n"
                      "srun -n1 bash -c true\necho rc=$?\n")
    for spec in ("NONE", "PATH,LANG", "FOO"):
        job = submit(f"--export={spec}", "--wait", "-o", f"{spec}.out", str(script))
        text = (workdir / f"{spec}.out").read_text()
        assert text.startswith(f"PATH={local_bin_dir()}:"), text  # first, before any other Slurm's
        assert "step HOME=unset\n" in text, text
        bash = ("rc=0\n" if spec == "PATH,LANG" else
                "slurmstepd-node1: error: execve(): bash: No such file or directory\n"
                "srun: error: node1: task 0: Exited with exit code 2\nrc=2\n")
        assert text.endswith(bash), text
        assert run(["sacct", "-n", "-X", "-j", str(job), "-o", "State"]).stdout.split() == ["COMPLETED"]


def test_a_reader_that_leaves_ends_a_command_silently_by_sigpipe() -> None:
    """``scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1`` (every multi-node job script):
    Slurm's C commands die of SIGPIPE without a word once ``head`` has left; so do the local ones
    (here with 20,000 names, more than a pipe holds), not with Python's "Exception ignored"."""
    done = run(["bash", "-c", "set -o pipefail; scontrol show hostnames 'node[1-20000]' | head -n 1"])
    assert (done.stdout, done.stderr, done.returncode) == ("node1\n", "", 141)
