"""What keeps the local Slurm's commands fast must not change what they do: the cached cluster
follows its profile file, and job trees found through /proc match psutil's machine-wide scan."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

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


def test_descendants_match_psutil_and_leave_out_daemons() -> None:
    script = "sleep 30 & (sleep 30; true) & sh -c 'sleep 30' hpcnb.localslurm.controller & wait"
    child = subprocess.Popen(["sh", "-c", script])
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process().children(recursive=True)) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = sorted(p.pid for p in procs.descendants())
        assert found == sorted(p.pid for p in procs._descendants_by_scan(os.getpid()))
        assert child.pid in found and len(found) == 4, found  # sh, sleep, the subshell and its sleep
        assert not any(procs.DAEMON_MODULE in p.cmdline() for p in procs.descendants())
    finally:
        procs.send(procs.descendants(), 9)
        child.wait(timeout=10)
