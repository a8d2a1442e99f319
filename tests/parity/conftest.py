"""Fixtures of the parity suite: the two Slurms, their private working roots, and the long jobs.

Every test here needs the real Slurm that ``ci/real-slurm.sh up [VERSION]`` starts (the lane that
``HPCNB_REAL_SLURM`` names: 22.05 by default, or 24.11); without it the whole suite is skipped with
the reason. The local Slurm gets its own state directory (not the one of the rest of the test
session) and both sides work in their own temporary directories.

At the end this lane's results go to ``test-artifacts/parity-VERSION.json``, and the parity table
of every lane that has results to ``test-artifacts/parity.md``.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import harness
from .harness import Side

ARTIFACTS = harness.ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def sides(tmp_path_factory: pytest.TempPathFactory):
    """``{"local": Side, "real": Side}``; skips the test when the real Slurm is not up."""
    reason = harness.real_slurm_reason()
    if reason:
        pytest.skip(reason)
    from hpcnb.backend import local_bin_dir

    local_bin = str(local_bin_dir())
    state = tmp_path_factory.mktemp("parity-local-state")
    venv_bin = str(harness.ROOT / ".venv" / "bin")
    rest = f"{venv_bin}:/usr/local/bin:/usr/bin:/bin"
    # HPCNB_SLURM_VERSION: the local Slurm behaves as the real lane's version (the real one ignores it);
    # the nodes of both have networks of their own (the real lane's: ci/real-slurm.sh)
    common = {"HPCNB_STATE_DIR": str(state), "HPCNB_CONTROLLER_IDLE": "120", "HPCNB_LOCAL_BIN": local_bin,
              "HPCNB_SLURM_VERSION": harness.REAL_VERSION}
    local = Side("local", tmp_path_factory.mktemp("parity-local"),
                 {**harness.clean_env(f"{local_bin}:{rest}"), **common}, state)
    real_path = rest if harness.REAL_BIN == "/usr/bin" else f"{harness.REAL_BIN}:{rest}"
    real = Side("real", tmp_path_factory.mktemp("parity-real"), {**harness.clean_env(real_path), **common})
    _wait_for_an_empty_queue(real)
    _seed_local_ids(state, _real_next_id(real))
    yield {"local": local, "real": real}
    for side in (local, real):  # only the jobs this suite submitted
        if side.submitted:
            side.run(["scancel", *map(str, side.submitted)], side.root, timeout=30)
    subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env={**os.environ, **common},
                   capture_output=True, timeout=60)


def _wait_for_an_empty_queue(real: Side, timeout: float = 120) -> None:
    """Jobs left by others (another lane, a killed run) would hold the two nodes, and every case
    would then wait out its own timeout: wait for them a while, then fail every case at once."""
    end = time.time() + timeout
    while True:
        queue = real.run(["squeue", "-h", "-o", "%i %u %T %j"], real.root, timeout=30).stdout.strip()
        if not queue:
            return
        if time.time() > end:
            raise RuntimeError(f"the real Slurm {harness.REAL_VERSION} still runs others' jobs after "
                               f"{timeout:.0f} s; cancel them first (squeue):\n{queue}")
        time.sleep(2)


def _real_next_id(real: Side) -> int:
    """About the real Slurm's next job id: the highest it has recorded plus one, and at least its
    FirstJobId (a slurmdbd that has just started, or lost its database, may record none)."""
    res = real.run(["sacct", "-a", "-X", "-n", "-P", "-o", "JobIDRaw", "-S", "2000-01-01"], real.root, timeout=60)
    ids = [int(x) for x in res.stdout.split() if x.isdigit()]
    config = real.run(["scontrol", "show", "config"], real.root, timeout=60).stdout
    first = re.search(r"^FirstJobId\s*=\s*(\d+)", config, re.MULTILINE)
    return max(max(ids, default=0) + 1, int(first.group(1)) if first else 1)


def _seed_local_ids(state: Path, first: int) -> None:
    """Start the local job ids where the real ones are, so fixed-width columns line up alike
    (each side's ids are normalised on their own: they may overlap)."""
    from hpcnb.localslurm import db

    conn = db.connect(state / "slurm.db")
    with db.transaction(conn):
        db.set_meta(conn, "next_job_id", str(first))
    conn.close()


@pytest.fixture(scope="session", autouse=True)
def long_jobs(request: pytest.FixtureRequest):
    """The two slow cases (TIMEOUT and --signal), submitted on both sides when the session starts.

    A real Slurm checks time limits every 30 s, so a --time=1 job ends 60-90 s after it starts;
    running them alongside the other cases keeps the suite to a few minutes. The tests of
    cases_9_long.py collect the results.
    """
    def is_long(item: pytest.Item) -> bool:
        function = getattr(item, "function", None)
        return getattr(function, "__module__", "").endswith("cases_9_long")

    if not any(is_long(item) for item in request.session.items):
        yield None
        return
    sides = request.getfixturevalue("sides")
    from .cases_9_long import start_long_jobs

    jobs = harness.on_both(sides, start_long_jobs)
    yield jobs


@pytest.fixture(scope="session")
def requeue_case(request: pytest.FixtureRequest):
    """The requeue case on both sides, started by the first test that asks for it (the lesson jobs,
    so that its rerun two minutes later, on the real Slurm, overlaps them)."""
    sides = request.getfixturevalue("sides")
    from .cases_9_long import start_requeue

    return harness.on_both(sides, start_requeue)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not harness.RECORDS:
        return
    from .report import load, render, run_times

    ARTIFACTS.mkdir(exist_ok=True)
    records = sorted(harness.RECORDS, key=lambda r: r["case"])
    # the two lanes may finish side by side (CI runs them so): whole files only, by rename
    _write_whole(ARTIFACTS / f"parity-{harness.REAL_VERSION}.json", json.dumps(records, indent=1) + "\n")
    _write_whole(ARTIFACTS / "parity.md", render(load(), time.strftime("%Y-%m-%d %H:%M:%S"), run_times()))


def _write_whole(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.replace(path)
