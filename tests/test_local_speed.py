"""What keeps the local Slurm's commands fast must not change what they do: the cached cluster
follows its profile file, and job trees found through /proc match psutil's machine-wide scan."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import run
from hpcnb.localslurm import procs
from hpcnb.sites import SITES_DIR


def test_cached_cluster_follows_its_profile_file(tmp_path: Path) -> None:
    profile = tmp_path / "local.toml"
    profile.write_text((SITES_DIR / "local.toml").read_text())
    env = {**os.environ, "HPCNB_STATE_DIR": str(tmp_path / "state"), "HPCNB_PROFILE": str(profile)}
    try:
        cpus = run(["sinfo", "-h", "-N", "-o", "%c"], env=env)
        assert set(cpus.stdout.split()) == {"2"}, cpus.stderr
        assert (tmp_path / "state" / "cluster.json").is_file()
        profile.write_text(profile.read_text().replace("cpus = 2", "cpus = 3"))  # a new size: a miss
        assert run(["sinfo", "-h", "-N", "-o", "%c"], env=env).stdout.split() == ["3"] * len(cpus.stdout.split())
        (tmp_path / "state" / "cluster.json").write_text("{damaged")
        assert run(["sinfo", "-h", "-N", "-o", "%c"], env=env).stdout.split() == ["3"] * len(cpus.stdout.split())
        profile.unlink()  # the profile's own error, as before the cache
        gone = run(["sinfo"], env=env)
        assert gone.returncode == 1 and "profile file not found" in gone.stderr, gone.stderr
    finally:
        run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env=env)


def test_descendants_match_psutil_and_leave_out_daemons(monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller is left out with what it forked, known by the pid its lock file names; a
    process that only calls itself the controller is the job's (issue 40 item 3)."""
    fake = f"'{sys.executable}' -c 'import time; time.sleep({{}})' {procs.DAEMON_MODULE}"
    script = f"sleep 30 & (sleep 30; true) & {fake.format(30)} & {fake.format(31)} & wait"
    child = subprocess.Popen(["sh", "-c", script])
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process().children(recursive=True)) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        named = {"(30)" in " ".join(p.cmdline()): p.pid for p in psutil.Process().children(recursive=True)
                 if procs.DAEMON_MODULE in p.cmdline()}
        controller, impostor = named[True], named[False]
        monkeypatch.setattr(procs, "_controller_pid", lambda: controller)
        found = sorted(p.pid for p in procs.descendants())
        assert found == sorted(p.pid for p in procs._descendants_by_scan(os.getpid(), controller))
        assert child.pid in found and len(found) == 5, found  # sh, sleep, the subshell and its sleep, the impostor
        assert controller not in found and impostor in found
    finally:
        procs.send(procs.descendants(), 9)
        procs.send(psutil.Process().children(recursive=True), 9)
        child.wait(timeout=10)
