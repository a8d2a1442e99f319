"""Reliability under faults: killed daemons, killed lock holders, damaged state, full disks.

Every test injects a fault into its own private local Slurm and checks that nothing is lost:
pending jobs still run, running jobs end in a true state (finished, or NODE_FAIL where their
processes died), no job runs twice, no lock outlives its holder, a damaged state file is reported
(never silently replaced) and ``hpcnb slurm recover`` keeps it and salvages what it can.
"""
from __future__ import annotations

import os
import random
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from reliability_helpers import Slurm, kill9, slurm, wait_gone  # noqa: F401  (fixture)

RUN_ONCE = "echo $SLURM_JOB_ID >> {log}; echo start $SLURM_JOB_ID; {wait}; echo end $SLURM_JOB_ID"
UNTIL_GO = "until [ -e {go} ]; do sleep 0.05; done"  # runs until the test lets it end


def run_counts(log: Path) -> dict[int, int]:
    counts: dict[int, int] = {}
    for line in log.read_text().split():
        counts[int(line)] = counts.get(int(line), 0) + 1
    return counts


def check_outputs(folder: Path, ids: list[int]) -> None:
    for job in ids:
        assert (folder / f"{job}.out").read_text() == f"start {job}\nend {job}\n", job


def assert_lock_not_stale(slurm: Slurm, dead: int) -> None:
    """The controller lock dies with its holder: free, or taken by a live newcomer, within moments."""
    end = time.time() + 5
    while time.time() < end:
        holder = slurm.db_lock_holder()
        if holder is None or (holder != dead and psutil.pid_exists(holder)):
            return
        time.sleep(0.05)
    raise AssertionError(f"the controller lock still names the dead controller {dead}")


def test_controller_killed_while_jobs_run_and_pend(slurm: Slurm, tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    # the first four run until the test says go, however slow the machine: three stay pending
    wait = UNTIL_GO.format(go=tmp_path / "go")
    ids = [slurm.submit("-o", f"{tmp_path}/%j.out", "--wrap", RUN_ONCE.format(log=log, wait=wait)) for _ in range(7)]
    end = time.time() + 60
    while sorted(slurm.db_states().values()).count("RUNNING") < 4 and time.time() < end:
        time.sleep(0.05)
    states = slurm.db_states()
    assert list(states.values()).count("RUNNING") == 4 and list(states.values()).count("PENDING") == 3, states
    victim = slurm.db_lock_holder()
    assert victim
    kill9(victim)
    assert not wait_gone([victim], 5)
    assert_lock_not_stale(slurm, victim)

    assert slurm.run("squeue").returncode == 0  # any command brings the controller back
    assert slurm.wait_controller() != victim
    (tmp_path / "go").touch()
    states = slurm.wait_final(ids, timeout=60)
    assert set(states.values()) == {"COMPLETED"}, states
    assert run_counts(log) == {job: 1 for job in ids}, "a job ran twice or not at all"
    check_outputs(tmp_path, ids)


def test_controller_killed_over_and_over_during_submissions(slurm: Slurm, tmp_path: Path) -> None:
    """A stream of submissions while the controller is SIGKILLed every few hundred ms: every job
    runs exactly once, whatever moment each kill lands on (between scheduling and launching too)."""
    log = tmp_path / "runs.log"
    env = {**slurm.env, "HPCNB_LAUNCH_GRACE": "2"}
    slurm.env.update(env)
    ids: list[int] = []
    errors: list[str] = []

    def submitter() -> None:
        for _ in range(40):
            done = slurm.run("sbatch", "--parsable", "-o", f"{tmp_path}/%j.out", "--wrap",
                             RUN_ONCE.format(log=log, wait="sleep 0.2"))
            if done.returncode:
                errors.append(done.stderr)
            else:
                ids.append(int(done.stdout))

    thread = threading.Thread(target=submitter)
    thread.start()
    kills = 0
    rng = random.Random(8)
    while thread.is_alive():
        time.sleep(rng.uniform(0.1, 0.5))
        pid = slurm.db_lock_holder()
        if pid:
            kill9(pid)
            kills += 1
    thread.join()
    assert not errors, errors[:3]
    assert kills >= 3
    slurm.run("sinfo")  # a command after the last kill
    states = slurm.wait_final(ids, timeout=90)
    assert set(states.values()) == {"COMPLETED"}, states
    assert run_counts(log) == {job: 1 for job in ids}
    check_outputs(tmp_path, ids)
    print(f"\n{len(ids)} jobs, controller SIGKILLed {kills} times: all completed, each ran once")


def test_job_scheduled_but_never_launched_runs_once(slurm: Slurm, tmp_path: Path) -> None:
    """The controller died between marking a job RUNNING and forking its supervisor: the next
    controller gives it back to the queue after the launch grace, and it runs exactly once."""
    slurm.env["HPCNB_LAUNCH_GRACE"] = "1"
    log = tmp_path / "runs.log"
    job = slurm.submit("--hold", "-o", f"{tmp_path}/%j.out", "--wrap", RUN_ONCE.format(log=log, wait="true"))
    assert slurm.admin("stop").returncode == 0
    conn = sqlite3.connect(slurm.state / "slurm.db", timeout=30)
    alloc = '[{"node": "node1", "tasks": 1, "cpus": 1, "mem": 500, "gpus": []}]'
    with conn:  # what the scheduler's transaction leaves behind
        conn.execute("UPDATE jobs SET state='RUNNING', held=0, start_time=?, alloc=?, nodelist='node1' WHERE id=?",
                     (time.time(), alloc, job))
    conn.close()
    assert slurm.run("squeue").returncode == 0
    assert slurm.wait_final([job], timeout=30) == {job: "COMPLETED"}
    assert run_counts(log) == {job: 1}
    assert "never launched; back to PENDING" in slurm.log()


DAEMONS = """#!/bin/bash
sleep 300 &
( sleep 301 & ) &
setsid sleep 302 &
python3 -c 'import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(303)
    os._exit(0)
'
nohup sleep 304 >/dev/null 2>&1 &
echo ready
sleep 305
"""


def _job_processes_up(slurm: Slurm, job: int, count: int, timeout: float = 20) -> list[psutil.Process]:
    end = time.time() + timeout
    while time.time() < end:
        found = slurm.job_processes(job)
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f"job {job} has {len(slurm.job_processes(job))} processes")


def test_supervisor_killed_gives_node_fail_and_leaves_no_process(slurm: Slurm, tmp_path: Path) -> None:
    (tmp_path / "daemons.sh").write_text(DAEMONS)
    job = slurm.submit("-o", f"{tmp_path}/%j.out", str(tmp_path / "daemons.sh"))
    slurm.wait_state(job, {"RUNNING"})
    procs = _job_processes_up(slurm, job, 7)
    supervisor = slurm.supervisor_pid(job)
    assert supervisor and supervisor not in {p.pid for p in procs}
    kill9(supervisor)
    assert slurm.wait_state(job, {"NODE_FAIL"}, timeout=15) == "NODE_FAIL"
    left = wait_gone([p.pid for p in procs], 10)
    assert not left, [psutil.Process(p).cmdline() for p in left if psutil.pid_exists(p)]
    assert slurm.job_processes(job) == []
    assert slurm.run("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "State").stdout.strip() == "NODE_FAIL"
    assert "JobState=NODE_FAIL Reason=NodeDown" in slurm.run("scontrol", "show", "job", str(job)).stdout
    assert f"job {job}: its supervisor" in slurm.log()
    later = slurm.submit("--wrap", "true")  # the node is usable again
    assert slurm.wait_final([later]) == {later: "COMPLETED"}


def test_killed_lock_holder_leaves_no_stale_lock(slurm: Slurm) -> None:
    """A process SIGKILLed inside a write transaction (a command, the controller...) holds no lock."""
    first = slurm.submit("--hold", "--wrap", "true")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        f"c = sqlite3.connect({str(slurm.state / 'slurm.db')!r}, isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE'); c.execute(\"UPDATE jobs SET name='x' WHERE id=0\")\n"
        "print('locked', flush=True); time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    blocked = subprocess.Popen(["sbatch", "--parsable", "--hold", "--wrap", "true"], env=slurm.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    assert blocked.poll() is None, "sbatch should wait for the write lock"
    holder.kill()
    holder.wait()
    start = time.time()
    out, err = blocked.communicate(timeout=30)
    assert blocked.returncode == 0, err
    assert int(out) == first + 1 and time.time() - start < 5
    started = time.time()
    assert slurm.run("scancel", str(first), str(first + 1)).returncode == 0
    assert time.time() - started < 5


# ------------------------------------------------------------------------ damaged state

def _damage(path: Path, kind: str) -> None:
    size = path.stat().st_size
    if kind == "emptied":
        path.write_bytes(b"")
    elif kind == "truncated-half":
        os.truncate(path, size // 2)
    elif kind == "header-garbage":
        with open(path, "r+b") as fh:
            fh.write(b"\xde\xad\xbe\xef" * 25)
    elif kind == "pages-garbage":
        rng = random.Random(3)
        with open(path, "r+b") as fh:
            for page in range(2, size // 4096, 3):
                fh.seek(page * 4096 + 8)
                fh.write(bytes(rng.randrange(256) for _ in range(200)))
    elif kind == "deleted":
        path.unlink()
    elif kind == "replaced":
        path.unlink()
        fresh = sqlite3.connect(path)
        fresh.execute("CREATE TABLE jobs(id)")
        fresh.close()
    else:
        raise ValueError(kind)


def _readable_job_ids(path: Path, ids: set[int]) -> set[int]:
    """The job ids whose whole rows SQLite can still read from a damaged file, one by one (read-only).

    What survives a truncation depends on where SQLite happened to put the table's pages."""
    readable: set[int] = set()
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return readable
    for job in ids:
        try:
            if conn.execute("SELECT * FROM jobs WHERE id=?", (job,)).fetchone():
                readable.add(job)
        except sqlite3.DatabaseError:
            pass
    conn.close()
    return readable


COMMANDS = [
    ["sbatch", "--wrap", "true"], ["squeue"], ["sacct"], ["scancel", "1"], ["scontrol", "show", "job", "1"],
    ["sinfo"], ["srun", "true"], ["salloc", "true"],
]


@pytest.fixture(scope="module")
def populated_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state directory holding 60 finished array tasks and 3 held jobs, its controller stopped and
    its journal checkpointed (so damage to the main file hits everything); tests damage copies."""
    from reliability_helpers import make_env

    state = tmp_path_factory.mktemp("populated") / "state"
    template = Slurm(state, make_env(state))
    work = state.parent
    template.run("sbatch", "--parsable", "--array=1-60", "-o", f"{work}/%A_%a.out", "--wrap", "true", cwd=work)
    template.wait_final([i for i, in template.db_rows("SELECT id FROM jobs")], timeout=120)
    for i in range(3):
        template.submit("--hold", "-J", f"held{i}", "--wrap", "echo held", cwd=work)
    daemons = {template.wait_controller(), *template.network_pids()}
    assert not wait_gone([p.pid for p in template.processes() if p.pid not in daemons], 10)  # supervisors done
    assert template.admin("stop").returncode == 0
    assert not wait_gone([p.pid for p in template.processes()], 10)
    conn = sqlite3.connect(state / "slurm.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    yield state
    template.stop_everything()


@pytest.mark.parametrize("kind", ["emptied", "truncated-half", "header-garbage", "pages-garbage", "deleted", "replaced"])
def test_damaged_state_file_is_reported_and_recovered(slurm: Slurm, populated_state: Path, tmp_path: Path,
                                                      kind: str) -> None:
    shutil.copytree(populated_state, slurm.state, ignore=shutil.ignore_patterns("*.sock", "*-shm", "*-wal"))
    known = {i for i, in slurm.db_rows("SELECT id FROM jobs")}
    held = [i for i, in slurm.db_rows("SELECT id FROM jobs WHERE name LIKE 'held%'")]
    assert len(known) == 63 and len(held) == 3
    db_file = slurm.state / "slurm.db"
    _damage(db_file, kind)
    damaged = db_file.read_bytes() if db_file.exists() else None

    for command in COMMANDS + [[sys.executable, "-m", "hpcnb.cli", "slurm", "status"]]:
        done = slurm.run(*command, timeout=60)
        assert done.returncode == 1, (command, done.returncode, done.stdout, done.stderr)
        assert "hpcnb slurm recover" in done.stderr and "damaged" in done.stderr, (command, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
    assert (db_file.read_bytes() if db_file.exists() else None) == damaged, "a command changed the damaged file"
    assert len(list((slurm.state / "jobs").iterdir())) == 63, "a refused command stored a script"

    done = slurm.admin("recover")
    assert done.returncode == 0, done.stderr
    report = done.stdout
    kept = sorted(slurm.state.glob("slurm.db.damaged-*"))
    kept = [k for k in kept if not k.name.endswith("-wal")]
    if damaged is None:
        assert "missing" in report and not kept
    else:
        assert len(kept) == 1 and kept[0].read_bytes() == damaged, "the damaged file must be kept untouched"
        assert str(kept[0]) in report
    salvaged = {i for i, in slurm.db_rows("SELECT id FROM jobs")}
    lost = set()
    match = re.search(r"LOST the records of job\(s\) (\S+):", report)
    if match:
        for part in match.group(1).split(","):
            a, _, b = part.partition("-")
            lost |= set(range(int(a), int(b or a) + 1))
    assert salvaged | lost == known and not salvaged & lost, "every job is either salvaged or reported lost"
    if damaged is not None:
        readable = _readable_job_ids(kept[0], known)
        assert readable <= salvaged, f"rows SQLite can still read were not salvaged: {sorted(readable - salvaged)}"
    if kind in ("pages-garbage", "header-garbage"):
        assert salvaged, "readable rows must be salvaged"
    print(f"\n{kind}: salvaged {len(salvaged)}/{len(known)} job records; report:\n{report}")

    assert slurm.run("squeue").returncode == 0
    new = slurm.submit("--wrap", "true")
    assert new > max(known), "a job id was reused after recover"
    for job in held:
        if job in salvaged:
            assert slurm.db_states()[job] == "PENDING"
            assert slurm.run("scontrol", "release", str(job)).returncode == 0
    waiting = [new] + [j for j in held if j in salvaged]
    assert set(slurm.wait_final(waiting).values()) == {"COMPLETED"}
    assert slurm.admin("recover").stdout.startswith("the local Slurm's state file is healthy")


def test_damage_while_a_job_runs_ends_it_node_fail_after_recover(slurm: Slurm, tmp_path: Path) -> None:
    job = slurm.submit("-o", f"{tmp_path}/%j.out", "--wrap", "sleep 300")
    slurm.wait_state(job, {"RUNNING"})
    procs = _job_processes_up(slurm, job, 1)
    assert slurm.admin("stop").returncode == 0
    with open(slurm.state / "slurm.db", "r+b") as fh:
        fh.write(b"garbage!" * 12)
    assert slurm.run("squeue").returncode == 1
    done = slurm.admin("recover")
    assert done.returncode == 0
    assert f"job(s) {job} were running" in done.stdout
    assert not wait_gone([p.pid for p in procs], 10)
    assert slurm.db_states() == {job: "NODE_FAIL"}  # the garbled header is rebuilt: the record is salvaged


# ------------------------------------------------------------------------------ disk full

def _limit_fsize(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return apply


WRITER = "python3 -c \"import sys; sys.stdout.write('x' * 2000000)\"; echo after"


def test_file_size_limit_while_writing_output_fails_the_job_clearly(slurm: Slurm, tmp_path: Path) -> None:
    """``ulimit -f`` in the submitting shell is propagated to the job (PropagateResourceLimits=ALL);
    the job dies of SIGXFSZ and says why, while the controller and the state file are unaffected
    (the controller was started by that very sbatch, under the same limit)."""
    assert slurm.db_lock_holder() is None
    done = subprocess.run(["sbatch", "--parsable", "-o", f"{tmp_path}/%j.out", "--wrap", WRITER],
                          env=slurm.env, capture_output=True, text=True, preexec_fn=_limit_fsize(65536))
    assert done.returncode == 0, done.stderr
    job = int(done.stdout)
    assert slurm.wait_final([job]) == {job: "FAILED"}
    text = (tmp_path / f"{job}.out").read_text()
    assert text.startswith("x" * 65536) and text[65536:].startswith("slurmstepd-node1: error: output file")
    assert text.endswith("File too large\n")  # the job's own writes stop at the limit; Slurm's note follows
    row = slurm.run("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "State,ExitCode").stdout.strip()
    assert row == "FAILED|0:25", row  # 25: SIGXFSZ
    assert "JobState=FAILED Reason=FileSizeLimit" in slurm.run("scontrol", "show", "job", str(job)).stdout
    assert "File too large" in slurm.log()
    more = [slurm.submit("--wrap", "echo " + "y" * 5000) for _ in range(30)]  # the state grows past 64 KiB
    assert set(slurm.wait_final(more).values()) == {"COMPLETED"}
    assert (slurm.state / "slurm.db-wal").stat().st_size > 65536 or (slurm.state / "slurm.db").stat().st_size > 65536


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
                          capture_output=True)
    return done.returncode == 0


def test_disk_full_while_writing_output_fails_the_job_clearly(slurm: Slurm, tmp_path: Path) -> None:
    small = tmp_path / "small"
    if not _mount_tmpfs(small, "256k"):
        pytest.skip("needs root and a mountable tmpfs for a really full disk (the RLIMIT_FSIZE test covers the rest)")
    try:
        job = slurm.submit("-o", f"{small}/%j.out", "--wrap", WRITER)
        assert slurm.wait_final([job]) == {job: "FAILED"}
        show = slurm.run("scontrol", "show", "job", str(job)).stdout
        assert "JobState=FAILED Reason=DiskFull" in show, show
        assert f"write to output file {small}/{job}.out failed: No space left on device" in slurm.log()
        ok = slurm.submit("-o", f"{tmp_path}/%j.out", "--wrap", "echo fine")  # other disks are fine
        assert slurm.wait_final([ok]) == {ok: "COMPLETED"}
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


def test_unwritable_output_is_a_launch_failure_like_slurm(slurm: Slurm, tmp_path: Path) -> None:
    """Slurm 22.05 (captured): FAILED, Reason=JobLaunchFailure, ExitCode 0:53, batch step CANCELLED."""
    job = slurm.submit("-o", f"{tmp_path}/no/such/dir/%j.out", "--wrap", "echo never")
    assert slurm.wait_final([job]) == {job: "FAILED"}
    rows = slurm.run("sacct", "-j", str(job), "-n", "-P", "-o", "JobID,State,ExitCode").stdout.split()
    assert rows == [f"{job}|FAILED|0:53", f"{job}.batch|CANCELLED|0:53"]
    assert "Reason=JobLaunchFailure" in slurm.run("scontrol", "show", "job", str(job)).stdout
    assert f"[{job}.batch] error: Could not open stdout file {tmp_path}/no/such/dir/{job}.out: " \
           "No such file or directory" in slurm.log()


def test_full_disk_under_the_state_gives_a_clear_error_and_loses_nothing(tmp_path: Path) -> None:
    """The state directory's own disk fills up: commands say so (exit 1, no traceback), nothing
    half-written is left, and once there is room again everything carries on (no id used)."""
    from reliability_helpers import make_env

    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "4m"):
        pytest.skip("needs root and a mountable tmpfs")
    state = disk / "state"
    slurm = Slurm(state, make_env(state))
    try:
        done = [slurm.submit("-o", f"{tmp_path}/%j.out", "--wrap", "echo ok", cwd=tmp_path) for _ in range(3)]
        assert set(slurm.wait_final(done).values()) == {"COMPLETED"}
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)  # unbuffered: nothing left to flush when the disk is full
        except OSError:
            pass
        finally:
            os.close(fd)
        refused = [slurm.run("sbatch", "--wrap", "true", cwd=tmp_path) for _ in range(3)]
        for result in refused:
            assert result.returncode == 1, result
            assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
            assert "disk" in result.stderr or "No space left on device" in result.stderr, result.stderr
        assert slurm.run("squeue").returncode == 0
        filler.unlink()
        later = slurm.submit("-o", f"{tmp_path}/%j.out", "--wrap", "echo ok", cwd=tmp_path)
        assert later == done[-1] + 1, "a refused submission used up a job id"
        assert slurm.wait_final([later]) == {later: "COMPLETED"}
        assert sorted(p.name for p in (state / "jobs").iterdir()) == sorted(map(str, done + [later]))
        assert slurm.admin("recover").stdout.startswith("the local Slurm's state file is healthy")
    finally:
        slurm.stop_everything()
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_emptied_state_file_is_rebuilt_from_its_journal(slurm: Slurm, tmp_path: Path) -> None:
    """The controller is SIGKILLed (its write-ahead journal is never checkpointed) and the main
    file is then emptied: everything still in the journal is salvaged. The controller comes first:
    a command that closes the file last checkpoints the journal into it (then emptied, so lost)."""
    controller = slurm.start_controller_first()
    held = [slurm.submit("--hold", "-J", f"h{i}", "--wrap", "echo held") for i in range(5)]
    assert slurm.wait_controller() == controller
    kill9(controller)
    db_file = slurm.state / "slurm.db"
    assert Path(f"{db_file}-wal").stat().st_size > 32
    db_file.write_bytes(b"")
    assert slurm.run("squeue").returncode == 1
    report = slurm.admin("recover").stdout
    assert "salvaged 5 job record(s)" in report and "LOST" not in report, report
    assert slurm.db_states() == {job: "PENDING" for job in held}
    assert slurm.run("scontrol", "release", str(held[0])).returncode == 0
    assert slurm.wait_final([held[0]]) == {held[0]: "COMPLETED"}


def test_controller_leaves_when_its_state_directory_is_removed(slurm: Slurm) -> None:
    """No controller lives on for a state nobody can see (a deleted temporary state dir, say)."""
    slurm.submit("--hold", "--wrap", "true")
    controller = slurm.wait_controller()
    for _ in range(50):  # as `rm -rf` run again: the live controller may add a file while it is removed
        shutil.rmtree(slurm.state, ignore_errors=True)
        if not slurm.state.exists():
            break
        time.sleep(0.1)
    assert not slurm.state.exists(), "the state directory keeps coming back"
    assert not wait_gone([controller], 10), f"the controller outlived its state directory: {_where(controller, slurm)}"


def _where(pid: int, slurm: Slurm) -> str:
    """What a process that should have left is doing (state, kernel wait, its log), for the message."""
    facts = []
    for name in ("status", "wchan", "stack"):
        try:
            text = Path(f"/proc/{pid}/{name}").read_text(errors="replace")
        except OSError as err:
            text = f"({err})"
        facts.append(f"{name}: " + (" ".join(text.split("\n")[:3]) if name == "status" else text.strip()))
    return "; ".join(facts) + f"; log: {slurm.log()[-1500:]!r}"


def test_controller_never_remakes_a_state_directory_removed_while_it_starts(tmp_path: Path) -> None:
    """The lock is taken, then the directory goes (CI: `rm -rf` right after the first submission):
    the starting controller must leave, not open a fresh empty state there and idle on it."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    code = ("import shutil, sys\n"
            "from hpcnb.localslurm import controller\n"
            "start = controller.Controller.__init__\n"
            "def late(self):\n"
            f"    shutil.rmtree({str(state)!r})\n"
            "    start(self)\n"
            "controller.Controller.__init__ = late\n"
            "sys.exit(controller.main())\n")
    env = {**os.environ, "HPCNB_STATE_DIR": str(state), "HPCNB_CONTROLLER_IDLE": "5"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert not state.exists(), sorted(p.name for p in state.iterdir())


def test_damaged_journal_is_reported_and_no_job_id_is_reused(slurm: Slurm, tmp_path: Path) -> None:
    """SQLite drops a journal's frames from the first damaged one on, without a word: the jobs committed
    in them were lost silently, recover called the file healthy and their ids were issued again."""
    controller = slurm.start_controller_first()  # holds the file open: nothing checkpoints the journal
    held = [slurm.submit("--hold", "-J", f"h{i}", "--wrap", "echo held") for i in range(3)]
    kill9(controller)
    wal = slurm.state / "slurm.db-wal"
    with open(wal, "r+b") as fh:
        fh.seek(32 + 24 + 100)  # the page of the journal's first frame
        fh.write(b"garbage!" * 8)
    for command in (["squeue"], ["sbatch", "--wrap", "true"], [sys.executable, "-m", "hpcnb.cli", "slurm", "status"]):
        done = slurm.run(*command)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert "damaged" in done.stderr and "slurm.db-wal" in done.stderr and "hpcnb slurm recover" in done.stderr
    report = slurm.admin("recover").stdout
    assert f"LOST the records of job(s) {held[0]}-{held[-1]}" in report and "slurm.db-wal" in report, report
    later = slurm.submit("--wrap", "true")
    assert later == held[-1] + 1, "a job id was reused"
    assert slurm.wait_final([later]) == {later: "COMPLETED"}
    assert slurm.admin("recover").stdout.startswith("the local Slurm's state file is healthy")


def test_output_to_a_fifo_nobody_reads_stops_neither_time_limit_nor_scancel(slurm: Slurm, tmp_path: Path) -> None:
    """slurmstepd's open(2) of a FIFO waits for a reader: meanwhile the job still ends at its time
    limit and scancel still ends it; once someone reads, the output flows as into a file; a reader
    that stops reading stalls the job, not the time limit."""
    fifos = [tmp_path / f"fifo{i}" for i in range(3)]
    for fifo in fifos:
        os.mkfifo(fifo)
    timed = slurm.submit("-o", str(fifos[0]), "-t", "0:02", "--wrap", "echo never")
    cancelled = slurm.submit("-o", str(fifos[1]), "--wrap", "echo never")
    slurm.wait_state(cancelled, {"RUNNING"})
    assert slurm.run("scancel", str(cancelled)).returncode == 0
    assert slurm.wait_final([timed, cancelled], timeout=30) == {timed: "TIMEOUT", cancelled: "CANCELLED"}
    reader = os.open(fifos[2], os.O_RDONLY | os.O_NONBLOCK)
    try:
        flowing = slurm.submit("-o", str(fifos[2]), "--wrap", "echo through the fifo")
        got, end = b"", time.time() + 30
        while not got.endswith(b"\n") and time.time() < end:
            try:
                got += os.read(reader, 4096)
            except BlockingIOError:
                pass
            time.sleep(0.05)
    finally:
        os.close(reader)
    assert got == b"through the fifo\n"
    assert slurm.wait_final([flowing]) == {flowing: "COMPLETED"}

    stalled = os.open(fifos[2], os.O_RDONLY | os.O_NONBLOCK)  # a reader that never reads: the pipe fills
    try:
        blocked = slurm.submit("-o", str(fifos[2]), "-t", "0:02", "--wrap", "yes | head -c 10000000; echo")
        assert slurm.wait_final([blocked], timeout=30) == {blocked: "TIMEOUT"}
    finally:
        os.close(stalled)


def test_no_job_id_is_reused_when_the_journal_and_the_last_id_are_lost_together(slurm: Slurm) -> None:
    """The journal (the last jobs' records) and ``slurm.db.last-job-id`` gone at once: the jobs' folders
    (``jobs/<id>``) remain, and no id of theirs may be issued again; recover says what was lost."""
    controller = slurm.start_controller_first()  # holds the file open: nothing checkpoints the journal
    held = [slurm.submit("--hold", "-J", f"h{i}", "--wrap", "echo held") for i in range(3)]
    kill9(controller)
    assert all((slurm.state / "jobs" / str(i)).is_dir() for i in held)
    (slurm.state / "slurm.db-wal").unlink()
    (slurm.state / "slurm.db-shm").unlink(missing_ok=True)
    (slurm.state / "slurm.db.last-job-id").unlink()
    done = slurm.run("sbatch", "--wrap", "true")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"job id {held[-1]} was issued" in done.stderr and "hpcnb slurm recover" in done.stderr, done.stderr
    report = slurm.admin("recover").stdout
    assert f"LOST the records of job(s) {held[0]}-{held[-1]}" in report, report
    later = slurm.submit("--wrap", "true")
    assert later == held[-1] + 1, "a job id was reused"
    assert slurm.wait_final([later]) == {later: "COMPLETED"}


def test_a_directory_in_place_of_the_state_file_is_named_and_recovered(slurm: Slurm) -> None:
    """``slurm.db`` replaced by a directory: every command says so in one line (not "check the disk"),
    and recover moves it aside, untouched, and starts a fresh state above every id it knows."""
    first = slurm.submit("--wrap", "true")
    assert slurm.wait_final([first]) == {first: "COMPLETED"}
    slurm.admin("stop")
    base = slurm.state / "slurm.db"
    for leftover in (base, Path(f"{base}-wal"), Path(f"{base}-shm")):
        leftover.unlink(missing_ok=True)
    base.mkdir()
    (base / "keep-me").write_text("a file the user put there\n")
    for command in (["squeue"], ["sbatch", "--wrap", "true"], [sys.executable, "-m", "hpcnb.cli", "slurm", "status"]):
        done = slurm.run(*command)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, (command, done.stderr)
        assert "is a directory" in done.stderr and "hpcnb slurm recover" in done.stderr, (command, done.stderr)
        assert "check the disk" not in done.stderr
    report = slurm.admin("recover")
    assert report.returncode == 0, report.stderr
    kept = [p for p in slurm.state.iterdir() if p.name.startswith("slurm.db.damaged-")]
    assert len(kept) == 1 and (kept[0] / "keep-me").read_text() == "a file the user put there\n", report.stdout
    assert "directory" in report.stdout and str(kept[0]) in report.stdout, report.stdout
    later = slurm.submit("--wrap", "true")
    assert later > first, "a job id was reused"
    assert slurm.wait_final([later]) == {later: "COMPLETED"}
