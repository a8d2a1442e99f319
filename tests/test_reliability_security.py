"""Reliability and security: the local Slurm's state is private, nothing listens on the network,
user strings never reach a shell, and jobs cannot write over the state.
"""
from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from reliability_helpers import Slurm, slurm  # noqa: F401  (fixture)


def _walk(root: Path):
    yield root
    for path in root.rglob("*"):
        yield path


def _loose(root: Path) -> list[str]:
    """Every entry below root that others (group or world) could read, write or enter."""
    found = []
    for path in _walk(root):
        mode = path.lstat().st_mode
        if mode & 0o077 or path.lstat().st_uid != os.getuid():
            found.append(f"{oct(stat.S_IMODE(mode))} {path}")
    return found


def test_state_is_private_even_under_a_permissive_umask(slurm: Slurm, tmp_path: Path) -> None:
    """umask 000 in the shell that starts everything: state dir 0700, files 0600, scripts 0700."""
    def loose_umask() -> None:
        os.umask(0)

    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho private\n")
    jobs = []
    go = tmp_path / "go"  # the first job runs until the test has looked
    for args in (["--wrap", f"until [ -e {go} ]; do sleep 0.05; done"], [str(script)], ["--hold", "--wrap", "true"]):
        done = subprocess.run(["sbatch", "--parsable", "-o", f"{tmp_path}/%j.out", *args], env=slurm.env,
                              capture_output=True, text=True, preexec_fn=loose_umask, timeout=60)
        assert done.returncode == 0, done.stderr
        jobs.append(int(done.stdout))
    slurm.wait_state(jobs[0], {"RUNNING"})
    assert _loose(slurm.state) == []  # while a job runs: node-local scratch too
    go.touch()
    slurm.wait_final(jobs[:2])
    assert _loose(slurm.state) == []
    stored = slurm.state / "jobs" / str(jobs[1]) / "slurm_script"
    assert stored.read_bytes() == script.read_bytes()
    assert stat.S_IMODE(stored.stat().st_mode) == 0o700 and stat.S_IMODE(stored.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(slurm.state.stat().st_mode) == 0o700
    for name in ("slurm.db", "slurm.db.id", "controller.lock", "controller.log"):
        assert stat.S_IMODE((slurm.state / name).stat().st_mode) == 0o600, name
    assert stat.S_ISSOCK((slurm.state / "controller.sock").stat().st_mode)


def test_an_existing_loose_state_dir_is_made_private(slurm: Slurm) -> None:
    slurm.state.mkdir(mode=0o755)
    os.chmod(slurm.state, 0o755)
    assert slurm.run("sinfo").returncode == 0
    assert stat.S_IMODE(slurm.state.stat().st_mode) == 0o700


def test_job_output_follows_the_submitters_umask(slurm: Slurm, tmp_path: Path) -> None:
    """As with Slurm (SLURM_UMASK), not the umask of whoever started the controller."""
    made = {}
    for mask in (0o077, 0o022):
        done = subprocess.run(["sbatch", "--parsable", "-o", f"{tmp_path}/%j.out", "--wrap", "umask; touch made-$SLURM_JOB_ID"],
                              env=slurm.env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              preexec_fn=lambda mask=mask: os.umask(mask))
        made[mask] = int(done.stdout)
    slurm.wait_final(list(made.values()))
    for mask, job in made.items():
        assert stat.S_IMODE((tmp_path / f"{job}.out").stat().st_mode) == 0o644 & ~mask
        assert stat.S_IMODE((tmp_path / f"made-{job}").stat().st_mode) == 0o666 & ~mask
        assert (tmp_path / f"{job}.out").read_text().strip() == f"{mask:04o}"


def _inet(pid: int) -> list:
    try:
        return psutil.Process(pid).net_connections(kind="inet")
    except AttributeError:  # psutil < 6
        return psutil.Process(pid).connections(kind="inet")
    except psutil.NoSuchProcess:
        return []


def test_nothing_listens_on_a_network_port(slurm: Slurm, tmp_path: Path) -> None:
    go = tmp_path / "go"  # the jobs run until the test has looked
    jobs = [slurm.submit("-o", f"{tmp_path}/%j.out", "--wrap", f"until [ -e {go} ]; do sleep 0.05; done")
            for _ in range(3)]
    for job in jobs:
        slurm.wait_state(job, {"RUNNING"})
    controller = slurm.wait_controller()
    end = time.time() + 10
    while not all(slurm.supervisor_pid(job) for job in jobs) and time.time() < end:
        time.sleep(0.05)  # scheduled, and claimed by their supervisors
    supervisors = [slurm.supervisor_pid(job) for job in jobs]
    assert all(supervisors)
    for pid in [controller, *supervisors]:
        assert _inet(pid) == [], pid
        unix = [c for c in psutil.Process(pid).net_connections(kind="unix") if c.laddr]
        assert all(str(slurm.state) in c.laddr or c.laddr.startswith("/proc/self/fd/") for c in unix), unix
    ours = {controller, *supervisors}
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in ours]
    assert listening == []
    go.touch()
    for job in jobs:
        slurm.run("scancel", str(job))


def test_job_name_and_user_strings_never_reach_a_shell(slurm: Slurm, tmp_path: Path) -> None:
    canary = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    evil = f"$(touch {canary})"
    try:
        # an account Slurm does not know is refused (the local profile enforces its accounts), unread by a shell
        refused = slurm.run("sbatch", "--account", "`touch " + str(canary) + "`", "--wrap", "true", cwd=tmp_path)
        assert refused.returncode == 1 and "Invalid account" in refused.stderr, refused.stderr
        job = slurm.submit("-J", evil, "--comment", evil, f"--export=ALL,EVIL={evil}", "-o", f"{tmp_path}/%j.out",
                           "--wrap", 'printf "%s|%s" "$SLURM_JOB_NAME" "$EVIL"', cwd=tmp_path)
        assert slurm.wait_final([job]) == {job: "COMPLETED"}
        for command in (["squeue", "-t", "all", "-j", str(job), "-o", "%j %k %a"],
                        ["sacct", "-j", str(job), "-o", "JobName%60,Account%60"],
                        ["scontrol", "show", "job", str(job)], ["sinfo"]):
            assert slurm.run(*command).returncode == 0
        assert (tmp_path / f"{job}.out").read_text() == f"{evil}|{evil}"
        assert not canary.exists(), "a user string was run by a shell"
    finally:
        canary.unlink(missing_ok=True)


def test_output_into_the_state_directory_is_refused(slurm: Slurm, tmp_path: Path) -> None:
    """A job must not truncate the state file (``-o ~/.local/state/hpcnb/slurm/slurm.db``), even
    through a symlink or --chdir; Slurm would have no such file to protect, so it is a launch failure."""
    first = slurm.submit("--wrap", "true")
    slurm.wait_final([first])
    (tmp_path / "link").symlink_to(slurm.state)
    attacks = [
        ["-o", str(slurm.state / "slurm.db")],
        ["-e", str(slurm.state / "slurm.db.id")],
        ["-o", str(tmp_path / "link" / "controller.log")],
        ["--chdir", str(slurm.state)],  # default output slurm-%j.out lands in the state dir
        ["-o", str(slurm.state / "jobs" / "%j" / "slurm_script")],
    ]
    before = {p: p.read_bytes() for p in (slurm.state / "slurm.db.id", slurm.state / "controller.log") if p.exists()}
    jobs = [slurm.submit(*args, "--wrap", "echo overwrite", cwd=tmp_path) for args in attacks]
    states = slurm.wait_final(jobs)
    assert set(states.values()) == {"FAILED"}
    for job in jobs:
        assert "Reason=JobLaunchFailure" in slurm.run("scontrol", "show", "job", str(job)).stdout
    assert slurm.admin("recover").stdout.startswith("the local Slurm's state file is healthy")
    for path, data in before.items():
        if path.name != "controller.log":
            assert path.read_bytes() == data
    assert "inside the local Slurm's private state directory" in slurm.log()
    assert not list(slurm.state.glob("slurm-*.out"))
    later = slurm.submit("--wrap", "true")
    assert slurm.wait_final([later]) == {later: "COMPLETED"}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_other_users_cannot_read_the_state_or_wake_the_controller(slurm: Slurm, tmp_path: Path) -> None:
    slurm.submit("--hold", "--wrap", "true")
    slurm.wait_controller()
    probe = (
        "import os, socket, sys\n"
        f"state = {str(slurm.state)!r}\n"
        "results = []\n"
        "for action in ('listdir', 'read', 'socket'):\n"
        "    try:\n"
        "        if action == 'listdir': os.listdir(state)\n"
        "        elif action == 'read': open(os.path.join(state, 'slurm.db'), 'rb').read(16)\n"
        "        else: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'w', os.path.join(state, 'controller.sock'))\n"
        "        results.append(action + ':ALLOWED')\n"
        "    except PermissionError:\n"
        "        results.append(action + ':denied')\n"
        "print(' '.join(results))\n"
    )

    def become_nobody() -> None:
        os.setgid(65534)
        os.setuid(65534)

    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60,
                          preexec_fn=become_nobody, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["listdir:denied", "read:denied", "socket:denied"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a folder to another user")
def test_a_state_directory_another_user_could_change_is_refused(slurm: Slurm, tmp_path: Path) -> None:
    """Another user owns the state (and swapped in a job script): root's ``scontrol release`` refuses
    to run it, as ssh refuses a key others can change; so does every command and ``hpcnb slurm``."""
    held = slurm.submit("--hold", "--wrap", "echo mine", cwd=tmp_path)
    assert slurm.admin("stop").returncode == 0
    os.chown(slurm.state, 65534, 65534)
    (slurm.state / "jobs" / str(held) / "slurm_script").write_text(f"#!/bin/sh\ntouch {tmp_path}/swapped\n")
    try:
        for command in (["scontrol", "release", str(held)], ["sbatch", "--wrap", "true"], ["squeue"],
                        [sys.executable, "-m", "hpcnb.cli", "slurm", "status"]):
            done = slurm.run(*command, cwd=tmp_path)
            assert done.returncode == 1, (command, done.stdout, done.stderr)
            assert "refuses its state directory" in done.stderr and "owned by uid 65534" in done.stderr, done.stderr
            assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert slurm.db_states() == {held: "PENDING"} and not (tmp_path / "swapped").exists()
    finally:
        os.chown(slurm.state, 0, 0)
        slurm.run("scancel", str(held))

    others = tmp_path / "others"  # a parent another user owns; one everybody may write (no sticky bit)
    others.mkdir()
    os.chown(others, 65534, 65534)
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    for state, why in ((others / "state", "owned by uid 65534"), (loose / "state", "can be written by every user")):
        done = slurm.run("sbatch", "--wrap", "true", env={**slurm.env, "HPCNB_STATE_DIR": str(state)})
        assert done.returncode == 1 and why in done.stderr and "its parent folder" in done.stderr, done.stderr
        assert not (state / "slurm.db").exists()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_status_of_an_unreadable_state_directory_is_one_clear_line(slurm: Slurm) -> None:
    """Root without the capability to read past file modes (setpriv) meets a state dir of mode 000."""
    slurm.submit("--hold", "--wrap", "true")
    slurm.state.chmod(0)
    try:
        done = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
                               sys.executable, "-m", "hpcnb.cli", "slurm", "status"],
                              env=slurm.env, capture_output=True, text=True, timeout=60)
    finally:
        slurm.state.chmod(0o700)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("hpcnb slurm status: error: Permission denied") and str(slurm.state) in done.stderr


@pytest.fixture
def second_user():
    """A second Unix user of this machine, made for the test and removed after it: its (uid, gid)."""
    import pwd

    name = f"hpcnbx{os.getpid() % 100000}"
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"cannot add a user: {made.stderr.strip()}")
    try:
        entry = pwd.getpwnam(name)
        yield entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="needs root and useradd")
def test_a_state_directory_reached_through_another_users_link_is_refused(slurm: Slurm, tmp_path: Path,
                                                                         second_user) -> None:
    """A link another user made in a world-writable folder (sticky, as /tmp) that points to root's own
    private state: root's commands follow it no more (the path is checked link by link, as OpenSSH's
    ``safe_path`` does: the other user may point it elsewhere at any time); root's own link is fine."""
    held = slurm.submit("--hold", "--wrap", "true", cwd=tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs, mine = shared / "theirs", shared / "mine"
    theirs.symlink_to(slurm.state)
    mine.symlink_to(slurm.state)
    os.lchown(theirs, *second_user)
    for command in (["squeue", "-h", "-o", "%i"], ["sbatch", "--wrap", "true"],
                    [sys.executable, "-m", "hpcnb.cli", "slurm", "status"]):
        done = slurm.run(*command, cwd=tmp_path, env={**slurm.env, "HPCNB_STATE_DIR": str(theirs)})
        assert done.returncode == 1 and done.stderr.count("\n") == 1, (command, done.stderr)
        assert (f"refuses its state directory {theirs}: the symbolic link {theirs} on its way is owned by uid "
                f"{second_user[0]}") in done.stderr, done.stderr
    assert slurm.next_job_id() == held + 1
    done = slurm.run("squeue", "-h", "-o", "%i", cwd=tmp_path, env={**slurm.env, "HPCNB_STATE_DIR": str(mine)})
    assert (done.returncode, done.stdout) == (0, f"{held}\n"), done.stderr
    slurm.run("scancel", str(held))
