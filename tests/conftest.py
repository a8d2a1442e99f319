"""Test setup: every test session gets its own private local Slurm (state dir, controller, PATH)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session", autouse=True)
def local_slurm(tmp_path_factory: pytest.TempPathFactory):
    """Point the local Slurm at a fresh state dir and put its commands first on PATH."""
    state = tmp_path_factory.mktemp("slurm-state")
    saved = dict(os.environ)
    os.environ["HPCNB_STATE_DIR"] = str(state)
    os.environ["HPCNB_SLURM"] = "local"
    os.environ["HPCNB_CONTROLLER_IDLE"] = "60"
    # xdist workers run side by side: far-apart job ids keep job-id-derived ports apart, both ours
    # (16000 + id % 16000) and Lightning's SLURMEnvironment's (15000 + the id's last four digits: 250
    # apart for up to four workers), hence 10250, not 10000.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    os.environ["HPCNB_FIRST_JOB_ID"] = str(1 + 10250 * int(worker.removeprefix("gw") or 0))
    os.environ.pop("HPCNB_PROFILE", None)
    # the session's local Slurm behaves as 22.05, the version most tests' expected texts were captured
    # from; the `lane` fixture below adds 24.11 (the local profile's own), tests that want another set it
    os.environ["HPCNB_SLURM_VERSION"] = "22.05"
    for name in [n for n in os.environ if n.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_"))]:
        del os.environ[name]
    from hpcnb.backend import local_bin_dir

    os.environ["PATH"] = f"{local_bin_dir()}{os.pathsep}{os.environ['PATH']}"
    # the state made now, at 22.05: else the first command to touch it decides, and one run with a
    # bare environment (no HPCNB_SLURM_VERSION) would make it at the local profile's 24.11
    made = subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset", "--slurm-version", "22.05"],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    yield state
    subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], capture_output=True, timeout=60)
    os.environ.clear()
    os.environ.update(saved)


def run(args: list[str], **kw) -> subprocess.CompletedProcess[str]:
    """Run a command (argument list) and capture text output."""
    kw.setdefault("timeout", 120)
    return subprocess.run(args, capture_output=True, text=True, **kw)


@pytest.fixture
def sh():
    return run


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- the local Slurm behaving as each Slurm version ----------------------------------------------
VERSIONS = ("22.05", "24.11")  # hpcnb.sites.SLURM_VERSIONS


class Lane:
    """A local Slurm behaving as one Slurm version, and that version's captures
    (tests/fixtures/captures-VERSION; the command cases of 22.05 are in real-slurm-22.05)."""

    def __init__(self, version: str, state: str) -> None:
        self.version = version
        self.captures = FIXTURES / f"captures-{version}"
        self.commands = FIXTURES / ("real-slurm-22.05" if version == "22.05" else f"captures-{version}")
        self.env = {**os.environ, "HPCNB_STATE_DIR": state}

    def run(self, args: list[str], **kw) -> subprocess.CompletedProcess[str]:
        return run(args, env={**self.env, **kw.pop("env", {})}, **kw)


@pytest.fixture(scope="module", params=VERSIONS)
def lane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """22.05: the session's local Slurm; 24.11: one of its own, reset to behave as 24.11."""
    if request.param == VERSIONS[0]:
        yield Lane(request.param, os.environ["HPCNB_STATE_DIR"])
        return
    lane = Lane(request.param, str(tmp_path_factory.mktemp(f"slurm-state-{request.param}")))
    done = lane.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset", "--slurm-version", request.param])
    assert done.returncode == 0, done.stderr
    yield lane
    lane.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], timeout=60)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's TerminalReporter
    """After ``make test-mutants``: how many planted wrong answers each graded cell caught."""
    import re
    from collections import Counter

    ran = [(outcome, found) for outcome in ("passed", "failed")
           for report in terminalreporter.stats.get(outcome, []) if getattr(report, "when", "") == "call"
           if (found := re.search(r"::test_mutant\[((\w+)-(ex\d+)-.*)\]$", getattr(report, "nodeid", "")))]
    if not ran:
        return
    from mutants import MUTANTS

    right_answers = {m.id for m in MUTANTS if m.passes}
    tally = {"passed": Counter[str](), "failed": Counter[str]()}
    for outcome, found in ran:
        if found[1] not in right_answers:
            tally[outcome][f"{found[2]} {found[3]}"] += 1
    caught, missed = tally["passed"], tally["failed"]
    terminalreporter.write_sep("-", "wrong answers caught per graded cell (tests/mutants.py)")
    for cell in sorted(set(caught) | set(missed)):
        note = f", {missed[cell]} not caught" if missed[cell] else ""
        terminalreporter.write_line(f"{cell:>10}: {caught[cell]:3d} caught{note}")
    terminalreporter.write_line(f"{'in all':>10}: {sum(caught.values()):3d} caught, {sum(missed.values())} not")
