"""Reliability against bad input: every mistake gets Slurm 22.05's own answer and changes nothing.

The expected texts and exit codes were captured from a real Slurm 22.05.8 (Debian 12 packages,
the cluster of ``ci/real-slurm.sh``; see also tests/fixtures/real-slurm-22.05/), e.g. getopt and
--time errors exit 255, --mem=abc 255, --ntasks=-1 1, a bad array 1. For every refused request
the test checks: exact stderr, exit code, empty stdout, and NO state change (the next job id, the
job count, the stored scripts and the working directory are all unchanged).

Noted where the local Slurm follows real Slurm's surprises (captured): ``--time=1:99:00`` is
accepted (2 h 39 min), ``--nodes=-1`` and ``--nodes=1-0`` are accepted, ``--array=1-3%0`` means no
throttle, a dependency on an unknown job is accepted, scancel of an unknown job is silent with 0.
Deliberate difference: ``--time=-5`` is refused here (Slurm accepts it with a garbage limit).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import Lane
from reliability_helpers import Slurm, make_env

GETOPT_TRY = 'Try "{cmd} --help" for more information\n'
NOT_BATCH = ("sbatch: error: This does not look like a batch script.  The first\n"
             "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
             "sbatch: error: For instance: #!/bin/sh\n")
NO_CONFIG = "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
BAD_ARRAY = "sbatch: error: Batch job submission failed: Invalid job array specification\n"
BIG = "9" * 20  # past 64 bits
BAD_DEP = "sbatch: error: Batch job submission failed: Job dependency problem\n"
WIDE = "{}: error: Field width {} is too large (at most 8388608)\n"


def sb(*args: str) -> list[str]:
    return ["sbatch", *args, "--wrap", "true"]


# (case id, argv, files to create {name: bytes}, stdin bytes, exit code, exact stderr)
CASES: list[tuple[str, list[str], dict[str, bytes], bytes | None, int, str]] = [
    # getopt (exit 255, two lines)
    ("misspelled-option", sb("--ntaks-per-node=2"), {}, None, 255,
     "sbatch: unrecognized option '--ntaks-per-node=2'\n" + GETOPT_TRY.format(cmd="sbatch")),
    ("unknown-short-option", sb("-y"), {}, None, 255,
     "sbatch: invalid option -- 'y'\n" + GETOPT_TRY.format(cmd="sbatch")),
    ("ambiguous-option", sb("--mem-p=1"), {}, None, 255,
     "sbatch: option '--mem-p=1' is ambiguous; possibilities: '--mem-per-cpu' '--mem-per-gpu'\n"
     + GETOPT_TRY.format(cmd="sbatch")),
    ("flag-with-argument", sb("--parsable=1"), {}, None, 255,
     "sbatch: option '--parsable' doesn't allow an argument\n" + GETOPT_TRY.format(cmd="sbatch")),
    ("hold-with-argument", sb("--hold=1"), {}, None, 255,
     "sbatch: option '--hold' doesn't allow an argument\n" + GETOPT_TRY.format(cmd="sbatch")),
    ("missing-argument", ["sbatch", "--wrap", "true", "--partition"], {}, None, 255,
     "sbatch: option '--partition' requires an argument\n" + GETOPT_TRY.format(cmd="sbatch")),
    ("missing-wrap-argument", ["sbatch", "--wrap"], {}, None, 255,
     "sbatch: option '--wrap' requires an argument\n" + GETOPT_TRY.format(cmd="sbatch")),
    # times
    ("time-abc", sb("--time=abc"), {}, None, 255, "sbatch: error: Invalid --time specification\n"),
    ("time-empty", sb("--time="), {}, None, 255, "sbatch: error: Invalid --time specification\n"),
    ("time-two-dashes", sb("--time=1-2-3"), {}, None, 255, "sbatch: error: Invalid --time specification\n"),
    ("time-letters-after", sb("-t", "10min"), {}, None, 255, "sbatch: error: Invalid --time specification\n"),
    ("begin-garbage", sb("--begin=garbage"), {}, None, 255,
     "Invalid time specification (pos=0): garbage\nsbatch: error: Invalid --begin specification\n"),
    ("begin-now-plus-word", sb("--begin=now+abc"), {}, None, 255,
     "Invalid time specification (pos=3): now+abc\nsbatch: error: Invalid --begin specification\n"),
    ("begin-bad-unit", sb("--begin=now+5x"), {}, None, 255,
     "Invalid time specification (pos=4): now+5x\nsbatch: error: Invalid --begin specification\n"),
    ("begin-minute-99", sb("--begin=12:99"), {}, None, 255,
     "Invalid time specification (pos=3): 12:99\nsbatch: error: Invalid --begin specification\n"),
    ("begin-month-13", sb("--begin=2030-13-01"), {}, None, 255,
     "Invalid time specification (pos=5): 2030-13-01\nsbatch: error: Invalid --begin specification\n"),
    ("deadline-garbage", sb("--deadline=garbage"), {}, None, 255,
     "Invalid time specification (pos=0): garbage\nsbatch: error: Invalid --deadline specification\n"),
    # counts
    ("ntasks-negative", sb("--ntasks=-1"), {}, None, 1, 'sbatch: error: Invalid numeric value "-1" for --ntasks.\n'),
    ("ntasks-zero", sb("--ntasks=0"), {}, None, 1, 'sbatch: error: Invalid numeric value "0" for --ntasks.\n'),
    ("ntasks-word", sb("-n", "abc"), {}, None, 1, 'sbatch: error: Invalid numeric value "abc" for --ntasks.\n'),
    ("ntasks-float", sb("--ntasks=1e3"), {}, None, 1, 'sbatch: error: Invalid numeric value "1e3" for --ntasks.\n'),
    ("cpus-zero", sb("--cpus-per-task=0"), {}, None, 1,
     'sbatch: error: Invalid numeric value "0" for --cpus-per-task.\n'),
    ("cpus-word", sb("-c", "abc"), {}, None, 1, 'sbatch: error: Invalid numeric value "abc" for --cpus-per-task.\n'),
    ("tasks-per-node-zero", sb("--ntasks-per-node=0"), {}, None, 1,
     'sbatch: error: Invalid numeric value "0" for --ntasks-per-node.\n'),
    ("mincpus-negative", sb("--mincpus=-1"), {}, None, 1, 'sbatch: error: Invalid numeric value "-1" for --mincpus.\n'),
    ("nodes-zero", sb("--nodes=0"), {}, None, 1,
     "sbatch: error: Batch job submission failed: Node count specification invalid\n"),
    ("nodes-word", sb("-N", "abc"), {}, None, 255, 'sbatch: error: "abc" is not a valid node count\n'),
    ("mem-word", sb("--mem=abc"), {}, None, 255, "sbatch: error: Invalid --mem specification\n"),
    ("mem-negative", sb("--mem=-5"), {}, None, 255, "sbatch: error: Invalid --mem specification\n"),
    ("mem-past-64-bits", sb(f"--mem={BIG}"), {}, None, 255, "sbatch: error: Invalid --mem specification\n"),
    ("mem-thousands-of-digits", sb(f"--mem={'9' * 5000}G"), {}, None, 255, "sbatch: error: Invalid --mem specification\n"),
    ("mem-per-cpu-word", sb("--mem-per-cpu=abc"), {}, None, 255, "sbatch: error: Invalid --mem-per-cpu specification\n"),
    # impossible requests, unknown names
    ("mem-too-big", sb("--mem=100000"), {}, None, 1,
     "sbatch: error: Memory specification can not be satisfied\n" + NO_CONFIG),
    ("three-gpus", sb("--gres=gpu:3"), {}, None, 1, NO_CONFIG),
    ("gres-unknown", sb("--gres=foo:1"), {}, None, 1, "sbatch: error: Invalid generic resource (gres) specification\n"),
    ("gres-word", sb("--gres=gpu:abc"), {}, None, 1, NO_CONFIG),
    ("gpus-per-node-word", sb("--gpus-per-node=abc"), {}, None, 1, NO_CONFIG),
    ("gpus-word", sb("--gpus=abc"), {}, None, 1, NO_CONFIG),
    ("partition-unknown", sb("--partition=nope"), {}, None, 1,
     "sbatch: error: invalid partition specified: nope\n"
     "sbatch: error: Batch job submission failed: Invalid partition name specified\n"),
    ("partition-wrong-case", sb("-p", "DEBUG"), {}, None, 1,
     "sbatch: error: invalid partition specified: DEBUG\n"
     "sbatch: error: Batch job submission failed: Invalid partition name specified\n"),
    # arrays and dependencies
    ("array-reversed", sb("--array=5-1"), {}, None, 1, BAD_ARRAY),
    ("array-word", sb("--array=abc"), {}, None, 1, BAD_ARRAY),
    ("array-too-big", sb("--array=1-2000"), {}, None, 1, BAD_ARRAY),
    ("array-max-plus-one", sb("--array=0-1001"), {}, None, 1, BAD_ARRAY),
    ("array-negative", sb("--array=-1"), {}, None, 1, BAD_ARRAY),
    ("array-step-zero", sb("--array=1-10:0"), {}, None, 1, BAD_ARRAY),
    # numbers past Slurm's bounds (issue 26, measured on 22.05 and 24.11): refused before expanding
    ("array-twenty-million", sb("--array=0-20000000"), {}, None, 1, BAD_ARRAY),
    ("array-past-64-bits", sb(f"--array=0-{BIG}"), {}, None, 1, BAD_ARRAY),
    ("array-thousands-of-digits", sb(f"--array=0-{'9' * 5000}"), {}, None, 1, BAD_ARRAY),
    ("ntasks-past-64-bits", sb(f"--ntasks={BIG}"), {}, None, 1,
     "sbatch: error: Numeric argument (9223372036854775807) to big for --ntasks.\n"),
    ("ntasks-wraps-negative", sb("--ntasks=2147483648"), {}, None, 1,
     "sbatch: error: invalid number of tasks (-n -2147483648)\n"),
    ("cpus-per-task-wraps-negative", sb("--cpus-per-task=2147483648"), {}, None, 1,
     "sbatch: error: invalid number of cpus per task (-c -2147483648)\n"),
    ("exclude-unparsable", sb("--exclude=["), {}, None, 1,
     "sbatch: error: Batch job submission failed: Invalid node name specified\n"),
    ("dependency-unknown-type", sb("--dependency=bogus:1"), {}, None, 1, BAD_DEP),
    ("dependency-word-id", sb("--dependency=afterok:abc"), {}, None, 1, BAD_DEP),
    # other option values
    ("signal-unknown", sb("--signal=FOO"), {}, None, 255, "sbatch: error: Invalid --signal specification\n"),
    ("signal-bad-time", sb("--signal=B:USR1@abc"), {}, None, 255, "sbatch: error: Invalid --signal specification\n"),
    ("open-mode-bogus", sb("--open-mode=bogus"), {}, None, 255, "sbatch: error: Invalid --open-mode specification\n"),
    ("kill-on-invalid-dep-maybe", sb("--kill-on-invalid-dep=maybe"), {}, None, 255,
     "sbatch: error: Invalid --kill-on-invalid-dep specification\n"),
    ("exclusive-bogus", sb("--exclusive=foo"), {}, None, 255, "sbatch: error: Invalid --exclusive specification\n"),
    # scripts
    ("script-missing", ["sbatch", "does-not-exist.sh"], {}, None, 1, "sbatch: error: Unable to open file does-not-exist.sh\n"),
    ("script-no-shebang", ["sbatch", "noshebang.sh"], {"noshebang.sh": b"echo hello\n"}, None, 1, NOT_BATCH),
    ("script-empty", ["sbatch", "empty.sh"], {"empty.sh": b""}, None, 1, "sbatch: error: Batch script is empty!\n"),
    ("script-whitespace", ["sbatch", "ws.sh"], {"ws.sh": b"   \n\t\n"}, None, 1,
     "sbatch: error: Batch script contains only whitespace!\n"),
    ("script-nul", ["sbatch", "nul.sh"], {"nul.sh": b"#!/bin/sh\necho a\0b\n"}, None, 1,
     "sbatch: error: The Slurm controller does not allow scripts that\nsbatch: error: contain a NULL character '\\0'.\n"),
    ("script-binary", ["sbatch", "a.out"], {"a.out": b"\x7fELF\x02\x01\x01\0" + bytes(range(256)) * 8}, None, 1, NOT_BATCH),
    ("script-dos", ["sbatch", "dos.sh"], {"dos.sh": b"#!/bin/sh\r\necho hi\r\n"}, None, 1,
     "sbatch: error: Batch script contains DOS line breaks (\\r\\n)\n"
     "sbatch: error: instead of expected UNIX line breaks (\\n).\n"),
    ("script-non-utf8-no-shebang", ["sbatch", "latin1.sh"], {"latin1.sh": b"\xe9cho caf\xe9\n"}, None, 1, NOT_BATCH),
    ("script-is-a-directory", ["sbatch", "."], {}, None, 1, "sbatch: error: Batch script is empty!\n"),
    ("script-too-big", ["sbatch", "big.sh"], {"big.sh": b"#!/bin/sh\n" + b"#" * (4 * 1024 * 1024 - 11) + b"\nx"},
     None, 1, "sbatch: error: Batch job submission failed: Pathname of a file, directory or other parameter too long\n"),
    ("stdin-empty", ["sbatch"], {}, b"", 1, "sbatch: error: Batch script is empty!\n"),
    ("stdin-no-shebang", ["sbatch"], {}, b"echo from stdin\n", 1, NOT_BATCH),
    ("wrap-and-script", ["sbatch", "--wrap", "true", "job.sh"], {"job.sh": b"#!/bin/sh\ntrue\n"}, None, 1,
     "sbatch: error: Script arguments not permitted with --wrap option\n"),
    # srun and salloc
    ("srun-time-abc", ["srun", "--time=abc", "true"], {}, None, 255, "srun: error: Invalid --time specification\n"),
    ("srun-no-command", ["srun"], {}, None, 1, "srun: fatal: No command given to execute.\n"),
    ("srun-ntasks-zero", ["srun", "--ntasks=0", "true"], {}, None, 1, 'srun: error: Invalid numeric value "0" for --ntasks.\n'),
    ("srun-partition", ["srun", "--partition=nope", "true"], {}, None, 1,
     "srun: error: invalid partition specified: nope\n"
     "srun: error: Unable to allocate resources: Invalid partition name specified\n"),
    ("srun-unknown-option", ["srun", "--bogus", "true"], {}, None, 255,
     "srun: unrecognized option '--bogus'\n" + GETOPT_TRY.format(cmd="srun")),
    ("srun-array", ["srun", "--array=1-2", "true"], {}, None, 255,
     "srun: unrecognized option '--array=1-2'\n" + GETOPT_TRY.format(cmd="srun")),
    ("srun-mem", ["srun", "--mem=100000", "true"], {}, None, 1,
     "srun: error: Memory specification can not be satisfied\n"
     "srun: error: Unable to allocate resources: Requested node configuration is not available\n"),
    ("salloc-partition", ["salloc", "--partition=nope", "true"], {}, None, 1,
     "salloc: error: invalid partition specified: nope\n"
     "salloc: error: Job submit/allocate failed: Invalid partition name specified\n"),
    ("salloc-time-abc", ["salloc", "--time=abc", "true"], {}, None, 255, "salloc: error: Invalid --time specification\n"),
    ("salloc-ntasks-negative", ["salloc", "--ntasks=-1", "true"], {}, None, 1,
     'salloc: error: Invalid numeric value "-1" for --ntasks.\n'),
    ("salloc-unknown-option", ["salloc", "--bogus"], {}, None, 255,
     "salloc: unrecognized option '--bogus'\n" + GETOPT_TRY.format(cmd="salloc")),
    # scancel, scontrol, squeue, sacct, sinfo on unknown jobs and bad options
    ("scancel-word-id", ["scancel", "abc"], {}, None, 1, "scancel: error: Invalid job id abc\n"),
    ("scancel-id-past-64-bits", ["scancel", BIG], {}, None, 0, ""),
    ("squeue-id-past-64-bits", ["squeue", "-j", BIG], {}, None, 1, f"squeue: error: Invalid job id: {BIG}\n"),
    ("squeue-id-past-uint32", ["squeue", "-j", "4294967296"], {}, None, 1,
     "squeue: error: Invalid job id: 4294967296\n"),
    ("squeue-id-past-int", ["squeue", "-j", "1,2147483648"], {}, None, 1, "squeue: error: Invalid job id: 2147483648\n"),
    ("squeue-id-zero", ["squeue", "-j", "0"], {}, None, 1, "squeue: error: Invalid job id: 0\n"),
    ("scancel-bad-array-id", ["scancel", "1_abc"], {}, None, 1, "scancel: error: Invalid job id 1_abc\n"),
    ("scancel-word-first", ["scancel", "abc", "999999"], {}, None, 1, "scancel: error: Invalid job id abc\n"),
    ("scancel-unknown-signal", ["scancel", "--signal=FOO", "1"], {}, None, 1, "Unknown job signal: FOO\n"),
    ("scancel-unknown-option", ["scancel", "--bogus", "1"], {}, None, 1,
     "scancel: unrecognized option '--bogus'\n" + GETOPT_TRY.format(cmd="scancel")),
    ("scancel-negative", ["scancel", "-5"], {}, None, 1,
     "scancel: invalid option -- '5'\n" + GETOPT_TRY.format(cmd="scancel")),
    ("scancel-nothing", ["scancel"], {}, None, 1, "scancel: error: No job identification provided\n"),
    ("scancel-unknown-job", ["scancel", "999999"], {}, None, 0, ""),
    ("scancel-unknown-array-task", ["scancel", "999999_1"], {}, None, 0, ""),
    ("scancel-unknown-job-verbose", ["scancel", "-v", "999999"], {}, None, 0,
     "scancel: Terminating job 999999\nscancel: error: Kill job error on job id 999999: Invalid job id specified\n"),
    ("scancel-signal-unknown-job", ["scancel", "--signal=USR1", "999999"], {}, None, 1,
     "scancel: error: Kill job error on job id 999999: Invalid job id specified\n"),
    ("scancel-unknown-step", ["scancel", "999999.5"], {}, None, 1,
     "scancel: error: Kill job error on job step id 999999.5: Invalid job id specified\n"),
    ("scancel-unknown-user", ["scancel", "-u", "nosuchuser"], {}, None, 1, "scancel: error: Invalid user name: nosuchuser\n"),
    ("scancel-bad-state", ["scancel", "--state=bogus"], {}, None, 1,
     "Invalid job state specified: bogus\nValid job states are PENDING, RUNNING, and SUSPENDED\n"),
    ("scancel-unknown-partition", ["scancel", "-p", "nope"], {}, None, 0, ""),
    ("scontrol-show-unknown-job", ["scontrol", "show", "job", "999999"], {}, None, 1,
     "slurm_load_jobs error: Invalid job id specified\n"),
    ("scontrol-requeue-unknown-job", ["scontrol", "requeue", "999999"], {}, None, 1,
     "Invalid job id specified for job 999999\n"),
    ("squeue-unknown-job", ["squeue", "-j", "999999"], {}, None, 1, "slurm_load_jobs error: Invalid job id specified\n"),
    ("squeue-unknown-option", ["squeue", "--bogus"], {}, None, 1,
     "squeue: unrecognized option '--bogus'\n" + GETOPT_TRY.format(cmd="squeue")),
    ("sacct-bad-field", ["sacct", "--format=Bogus"], {}, None, 1, 'sacct: error: Invalid field requested: "Bogus"\n'),
    ("sacct-bad-job-id", ["sacct", "-j", "abc"], {}, None, 1, "sacct: fatal: Bad job/step specified: abc\n"),
    ("squeue-bad-state", ["squeue", "-t", "running,bogus"], {}, None, 1,
     "squeue: error: Invalid job state specified: bogus\nsqueue: error: Valid job states include: PENDING,RUNNING,"
     "SUSPENDED,COMPLETED,CANCELLED,FAILED,TIMEOUT,NODE_FAIL,PREEMPTED,BOOT_FAIL,DEADLINE,OUT_OF_MEMORY,COMPLETING,"
     "CONFIGURING,RESIZING,RESV_DEL_HOLD,REQUEUED,REQUEUE_FED,REQUEUE_HOLD,REVOKED,SIGNALING,SPECIAL_EXIT,STAGE_OUT,"
     "STOPPED\n\n"),  # captured from squeue 22.05.8
    ("sinfo-unknown-option", ["sinfo", "--bogus"], {}, None, 1,
     "sinfo: unrecognized option '--bogus'\n" + GETOPT_TRY.format(cmd="sinfo")),
    # field widths past what the real commands' stack holds (they die there; these answered with a
    # MemoryError, or ran past 60 s and 3 GB): one line, at once
    ("squeue-width-past-64-bits", ["squeue", "-o", "%.99999999999i"], {}, None, 1, WIDE.format("squeue", "99999999999")),
    ("squeue-width-2e9", ["squeue", "-o", "%.2000000000i"], {}, None, 1, WIDE.format("squeue", "2000000000")),
    ("sacct-width-2e9", ["sacct", "-o", "JobID%2000000000"], {}, None, 1, WIDE.format("sacct", "2000000000")),
    ("sinfo-width-2e9", ["sinfo", "-o", "%2000000000N"], {}, None, 1, WIDE.format("sinfo", "2000000000")),
    ("sinfo-long-width-2e9", ["sinfo", "-O", "nodelist:2000000000"], {}, None, 1, WIDE.format("sinfo", "2000000000")),
]


@pytest.fixture(scope="module")
def quiet_slurm(tmp_path_factory: pytest.TempPathFactory):
    """One private local Slurm for the whole module: refused requests leave it as it was."""
    state = tmp_path_factory.mktemp("badinput") / "state"
    instance = Slurm(state, make_env(state))
    job = instance.submit("--wrap", "true", cwd=state.parent)  # state exists, with one finished job
    instance.wait_final([job])
    yield instance
    instance.stop_everything()


def snapshot(slurm: Slurm, workdir: Path) -> tuple:
    jobs = sorted(p.name for p in (slurm.state / "jobs").iterdir())
    files = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*"))
    return slurm.next_job_id(), slurm.job_count(), jobs, files


@pytest.mark.parametrize("case, argv, files, stdin, code, stderr", CASES, ids=[c[0] for c in CASES])
def test_bad_input_answers_like_slurm_and_changes_nothing(quiet_slurm: Slurm, tmp_path: Path, case, argv, files,
                                                          stdin, code, stderr) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    before = snapshot(quiet_slurm, tmp_path)
    done = subprocess.run(argv, cwd=tmp_path, env=quiet_slurm.env, capture_output=True, timeout=60,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)
    assert (done.returncode, done.stderr.decode(), done.stdout.decode()) == (code, stderr, "")
    assert snapshot(quiet_slurm, tmp_path) == before, "a refused request changed the state or created files"


def test_there_are_at_least_60_bad_inputs() -> None:
    assert len(CASES) + len(ACCEPTED) + len(API_CASES) >= 60


# --------------------------------------------------- surprises Slurm accepts (captured)

# (case id, sbatch options, what the job record must show: squeue format -> value)
ACCEPTED = [
    ("time-1:99:00", ["--time=1:99:00"], {"%l": "2:39:00"}),
    ("time-zero-is-unlimited", ["--time=0"], {"%l": "UNLIMITED"}),
    ("nodes-negative", ["--nodes=-1"], {"%D": "1"}),
    ("nodes-max-below-min", ["--nodes=1-0"], {"%D": "1"}),
    ("nodes-three-pends", ["-N", "3"], {}),
    ("array-throttle-zero", ["--array=1-3%0"], {}),
    ("array-throttle-word", ["--array=1-3%abc"], {}),
    ("array-percent-only", ["--array=%"], {}),
    ("array-empty", ["--array="], {}),
    ("time-past-64-bits", [f"--time={BIG}"], {"%l": "UNLIMITED"}),  # 22.05 wraps it to 0 (measured)
    ("time-wraps-to-days", ["--time=99999999999"], {"%l": "2981813-22:48:00"}),  # measured on 22.05
    ("array-throttle-past-64-bits", [f"--array=0-3%{BIG}"], {}),
    ("begin-past-64-bits", [f"--begin=now+{BIG}"], {}),
    ("ntasks-wraps-to-one", ["--ntasks=4294967297"], {}),
    ("nodes-past-64-bits-is-one", [f"--nodes={BIG}"], {"%D": "1"}),  # strtol, then (int) -1: one node
    ("nodes-thousands-of-digits", [f"--nodes={'9' * 5000}"], {"%D": "1"}),
    ("ntasks-per-node-wraps", ["--ntasks-per-node=2147483648"], {}),
    ("mincpus-past-int", ["--mincpus=2147483648"], {}),
    ("array-throttle-wraps-to-three", ["--array=0-3%4294967299"], {}),
    ("dependency-unknown-job", ["--dependency=afterok:999999"], {}),
    ("job-name-empty", ["--job-name="], {"%j": "allocation"}),
    ("open-mode-abbreviated", ["--open-mode=A"], {}),
    ("exclusive-user", ["--exclusive=user"], {}),
    ("kill-on-invalid-dep-upper", ["--kill-on-invalid-dep=YES"], {}),
    ("gres-negative-is-one", ["--gres=gpu:-1"], {"%b": "gres:gpu:1"}),
    ("mem-zero-is-whole-node", ["--mem=0"], {}),
    ("account-the-users-other", ["--account=Research"], {"%a": "research"}),  # (an unknown one: test_local_accounts)
    ("nice-word", ["--nice=abc"], {}),
]


@pytest.mark.parametrize("case, options, fields", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_what_slurm_accepts_is_accepted(quiet_slurm: Slurm, tmp_path: Path, case, options, fields) -> None:
    before = quiet_slurm.next_job_id()
    done = quiet_slurm.run("sbatch", "--parsable", "--hold", *options, "--wrap", "true", cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    job = int(done.stdout.split(";")[0])
    assert job == before
    try:
        for fmt, value in fields.items():
            shown = quiet_slurm.run("squeue", "-h", "-j", str(job), "-o", fmt).stdout.split()
            assert shown and shown[0] == value, (fmt, shown)
    finally:
        quiet_slurm.run("scancel", str(job))


def test_array_throttle_zero_and_unknown_dependency_run(quiet_slurm: Slurm, tmp_path: Path) -> None:
    """As captured: %0 runs all tasks at once; afterok on a job that never existed runs the job."""
    done = quiet_slurm.run("sbatch", "--parsable", "--array=1-3%0", "--wrap", "true", cwd=tmp_path)
    array = int(done.stdout)
    dep = quiet_slurm.submit("--dependency=afterok:999999", "--wrap", "true", cwd=tmp_path)
    tasks = [i for i, in quiet_slurm.db_rows("SELECT id FROM jobs WHERE array_job_id=?", (array,))]
    assert set(quiet_slurm.wait_final(tasks + [dep]).values()) == {"COMPLETED"}


# --------------------------------------------------------------------------- hostile strings

HOSTILE = [  # a shell running any of these in the working directory would create "pwned" there
    "$(touch pwned)", "`touch pwned`", "; touch pwned", "| touch pwned", "&& touch pwned &&",
    "'\"; touch pwned; echo \"'", "a\nb\n$(touch pwned)", "%x %j %% $HOME *", "../../../../x",
    "\t  spaced  \t", "-dash-first", "ünïcødé ✓",
]


def test_hostile_job_names_never_reach_a_shell(quiet_slurm: Slurm, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    ids = {}
    for index, pattern in enumerate(HOSTILE):
        name = pattern
        out = tmp_path / f"out-{index}" / "a" / "b" / "c" / "d"
        out.mkdir(parents=True)
        ids[quiet_slurm.submit("-J", name, "-o", f"{out}/%x.%j", "--wrap",
                               'printf "%s" "$SLURM_JOB_NAME"', cwd=tmp_path)] = (name, out)
    quiet_slurm.wait_final(list(ids))
    assert not canary.exists(), "a job name was run by a shell"
    for job, (name, out) in ids.items():
        written = Path(os.path.normpath(out / f"{name}.{job}")) if "/" in name else out / f"{name}.{job}"
        assert written.read_text() == name, (name, written)
        state = quiet_slurm.states([job])[str(job)]
        assert state == "COMPLETED"
    assert not canary.exists()


def test_hostile_output_paths_are_taken_literally(quiet_slurm: Slurm, tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    paths = ["$(touch pwned).out", "a b;touch pwned|c.out", "new\nline.out", "star*?[x].out", "%%j literal.out"]
    jobs = {quiet_slurm.submit("-o", p, "--wrap", "echo hi", cwd=tmp_path): p for p in paths}
    quiet_slurm.wait_final(list(jobs))
    assert not canary.exists()
    for job, pattern in jobs.items():
        expected = tmp_path / pattern.replace("%%", "%")
        assert expected.read_text() == "hi\n", pattern


def test_output_path_traversal_lands_where_slurm_puts_it(quiet_slurm: Slurm, tmp_path: Path) -> None:
    """Like Slurm, a relative --output is taken from the working directory, ``..`` included."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    job = quiet_slurm.submit("-o", "../../escaped-%j.out", "--wrap", "echo out", cwd=work)
    assert quiet_slurm.wait_final([job]) == {job: "COMPLETED"}
    assert (tmp_path / f"escaped-{job}.out").read_text() == "out\n"


def test_non_utf8_bytes_in_names_paths_and_scripts(quiet_slurm: Slurm, tmp_path: Path) -> None:
    env = {**quiet_slurm.env}
    script = b"#!/bin/sh\necho 'caf\xe9 \xff\xfe'\nprintf '%s' \"$SLURM_JOB_NAME\" > name.txt\n"
    (tmp_path / b"job-\xe9.sh".decode("utf-8", "surrogateescape")).write_bytes(script)
    done = subprocess.run([b"sbatch", b"--parsable", b"-J", b"n\xe4me\xff", b"-o", b"out-\xe9-%j.txt", b"job-\xe9.sh"],
                          cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    job = int(done.stdout)
    assert quiet_slurm.wait_final([job]) == {job: "COMPLETED"}
    out = tmp_path / f"out-\udce9-{job}.txt"
    assert out.read_bytes() == b"caf\xe9 \xff\xfe\n"
    shown = subprocess.run(["squeue", "-h", "-t", "all", "-j", str(job), "-o", "%i %j"], env=env,
                           capture_output=True, timeout=60)
    assert shown.returncode == 0 and shown.stdout.startswith(f"{job} n".encode()), shown
    sacct = subprocess.run(["sacct", "-j", str(job), "-X", "-P", "-n", "-o", "JobName,State"], env=env,
                           capture_output=True, timeout=60)
    assert sacct.returncode == 0 and sacct.stdout.endswith(b"|COMPLETED\n"), sacct
    missing = subprocess.run([b"sbatch", b"no-\xff.sh"], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert (missing.returncode, missing.stderr) == (1, b"sbatch: error: Unable to open file no-\xff.sh\n")


def test_huge_script_just_under_the_limit_runs(quiet_slurm: Slurm, tmp_path: Path) -> None:
    body = b"#!/bin/sh\necho big\n" + (b"# " + b"z" * 1021 + b"\n") * 4000
    assert len(body) < 4 * 1024 * 1024
    (tmp_path / "big.sh").write_bytes(body)
    job = quiet_slurm.submit("-o", "%j.out", "big.sh", cwd=tmp_path)
    assert quiet_slurm.wait_final([job]) == {job: "COMPLETED"}
    assert (tmp_path / f"{job}.out").read_text() == "big\n"


# ------------------------------------------------------------------------------ the job API

API_CASES = [
    ("api-time", {"wrap": "true", "time": "abc"}, 255, "sbatch: error: Invalid --time specification\n"),
    ("api-misspelled", {"wrap": "true", "ntaks_per_node": 2}, 255,
     "sbatch: unrecognized option '--ntaks-per-node=2'\n" + GETOPT_TRY.format(cmd="sbatch")),
    ("api-partition", {"wrap": "true", "partition": "nope"}, 1,
     "sbatch: error: invalid partition specified: nope\n"
     "sbatch: error: Batch job submission failed: Invalid partition name specified\n"),
    ("api-negative-tasks", {"wrap": "true", "ntasks": -1}, 1, 'sbatch: error: Invalid numeric value "-1" for --ntasks.\n'),
    ("api-array", {"wrap": "true", "array": "5-1"}, 1, BAD_ARRAY),
    ("api-missing-script", {"script": "does-not-exist.sh"}, 1, "sbatch: error: Unable to open file does-not-exist.sh\n"),
    ("api-script-text-no-shebang", {"script": "#!\n"}, 0, None),
]


@pytest.mark.parametrize("case, kwargs, code, stderr", API_CASES, ids=[c[0] for c in API_CASES])
def test_job_api_reports_slurms_error(quiet_slurm: Slurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      case, kwargs, code, stderr) -> None:
    from hpcnb import jobs

    monkeypatch.setenv("HPCNB_STATE_DIR", str(quiet_slurm.state))
    monkeypatch.setenv("HPCNB_SLURM", "local")
    before = snapshot(quiet_slurm, tmp_path)
    if code == 0:  # "#!\n" is a script (an empty interpreter line): accepted, it fails when run
        job = jobs.submit(kwargs["script"], cwd=tmp_path)
        assert quiet_slurm.wait_final([int(job.id)]) == {int(job.id): "FAILED"}
        return
    with pytest.raises(jobs.SubmitError) as info:
        jobs.submit(cwd=tmp_path, **kwargs)
    assert info.value.exit_code == code
    assert info.value.stderr == stderr
    assert snapshot(quiet_slurm, tmp_path) == before


def test_job_api_unknown_job(quiet_slurm: Slurm, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcnb import jobs

    monkeypatch.setenv("HPCNB_STATE_DIR", str(quiet_slurm.state))
    with pytest.raises(jobs.JobNotFound):
        jobs.Job.attach(999999)


COUNTS_PAST_INT_MAX = [  # parse_int: 22.05 wraps to C's int or refuses LONG_MAX; 24.11 refuses INT_MAX and past
    (f"--ntasks={BIG}", {"22.05": "Numeric argument (9223372036854775807) to big for --ntasks.",
                         "24.11": "Numeric argument (9223372036854775807) too large for --ntasks."}),
    ("--ntasks=2147483648", {"22.05": "invalid number of tasks (-n -2147483648)",
                             "24.11": "Numeric argument (2147483648) too large for --ntasks."}),
    ("--cpus-per-task=2147483647", {"24.11": "Numeric argument (2147483647) too large for --cpus-per-task."}),
    ("--ntasks=-5", {"22.05": 'Invalid numeric value "-5" for --ntasks.', "24.11": 'Invalid numeric value "-5" for --ntasks.'}),
]


@pytest.mark.parametrize("option, said", COUNTS_PAST_INT_MAX, ids=[c[0][:22] for c in COUNTS_PAST_INT_MAX])
def test_counts_past_int_max_answer_as_each_version(lane: Lane, tmp_path: Path, option: str, said: dict) -> None:
    if lane.version not in said:
        pytest.skip(f"{lane.version} takes it")
    done = lane.run(["sbatch", "--hold", option, "--wrap", "true"], cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"sbatch: error: {said[lane.version]}\n")


def test_field_widths_wrap_as_in_c(quiet_slurm: Slurm, tmp_path: Path) -> None:
    """squeue's and sinfo's ``_parse_token`` add the width up in a C ``int``: 4294967298 is 2, and
    4294967295 is -1, which prints the value with a space after it (``_print_str``'s ``"%s "``)."""
    done = subprocess.run(["sinfo", "-h", "-p", "debug", "-o", "%.4294967298P|%4294967295D|%.4294967296a|"],
                          cwd=tmp_path, env=quiet_slurm.env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "d*|2 |up|\n", "")


BAD_SETTINGS = [  # every HPCNB_* value the local Slurm reads, unusable: one line, exit 1, nothing changed
    ("HPCNB_CONTROLLER_IDLE", "abc", "HPCNB_CONTROLLER_IDLE='abc' is not a number of seconds from 0 to 31536000"),
    ("HPCNB_LAUNCH_GRACE", "nan", "HPCNB_LAUNCH_GRACE='nan' is not a number of seconds from 0 to 31536000"),
    ("HPCNB_ENV_KEPT_AFTER_END", "1e999", "HPCNB_ENV_KEPT_AFTER_END='1e999' is not a number of seconds from 0 to "
     "31536000"),
    ("HPCNB_FIRST_JOB_ID", "9" * 26, "HPCNB_FIRST_JOB_ID='99999999999999999999999999' is not a job id (a whole "
     "number from 1 to 4294967293)"),
    ("HPCNB_FIRST_JOB_ID", "-3", "HPCNB_FIRST_JOB_ID='-3' is not a job id (a whole number from 1 to 4294967293)"),
    ("HPCNB_NODES", "Shared", "HPCNB_NODES='Shared' is not valid: use apart or shared"),
    ("HPCNB_NODE_NETWORK", "none", "HPCNB_NODE_NETWORK='none' is not valid: use own or shared"),
]


@pytest.mark.parametrize("name, value, said", BAD_SETTINGS, ids=[f"{c[0]}={c[1][:8]}" for c in BAD_SETTINGS])
def test_every_setting_is_checked_with_one_line(quiet_slurm: Slurm, tmp_path: Path, name: str, value: str,
                                                said: str) -> None:
    before = snapshot(quiet_slurm, tmp_path)
    for argv in (["sbatch", "--wrap", "true"], ["squeue"]):
        done = subprocess.run(argv, cwd=tmp_path, env={**quiet_slurm.env, name: value}, capture_output=True,
                              text=True, timeout=60)
        assert (done.returncode, done.stdout, done.stderr) == (1, "", f"{argv[0]}: error: {said}\n")
    assert snapshot(quiet_slurm, tmp_path) == before
