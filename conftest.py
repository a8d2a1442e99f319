"""pytest hooks for every run from the repository root (the notebooks under nbval included).

A lesson cell that fails or times out under nbval reports the Slurm jobs as they were at that
moment (squeue and the last hour's sacct), so a stuck job shows its state next to the cell.
Every failure is also printed the moment it is known (name and the end of its report), so a
run stopped by its time limit still says what failed before.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

JOB_VIEWS = (
    ["squeue", "-a", "-o", "%.10i %.14j %.9T %.10M %.10l %.6D %R"],
    ["sacct", "-X", "-S", "now-1hours", "-o", "JobID%12,JobName%14,State%12,ExitCode,Elapsed,NodeList%12"],
)


def slurm_snapshot() -> str:
    """What the lane's Slurm (the one the lessons' kernels use: ``slurm_env``) says now through
    squeue and sacct, each bounded to 15 s; an error is reported, not raised."""
    from hpcnb.backend import slurm_env

    parts = []
    try:
        env = slurm_env()
    except Exception as err:  # noqa: BLE001 - a report must not fail for want of a setting
        env, parts = None, [f"(the lane's Slurm is unknown: {err}; PATH's commands answer)"]
    for argv in JOB_VIEWS:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=15,
                                  stdin=subprocess.DEVNULL, env=env)
            parts.append(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
        except (OSError, subprocess.TimeoutExpired) as err:
            parts.append(f"$ {' '.join(argv)}\n(failed: {err})")
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and type(item).__name__ == "IPyNbCell":
        report.sections.append(("Slurm jobs when the cell failed", slurm_snapshot()))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Print a failure at once, in the main process (xdist workers send their reports there)."""
    if report.failed and "PYTEST_XDIST_WORKER" not in os.environ:
        text = report.longreprtext
        tail = text if len(text) <= 4000 else "...\n" + text[-4000:]
        print(f"\n--- FAILED {report.nodeid} ({report.when}), as it happened:\n{tail}\n---",
              file=sys.stderr, flush=True)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("nbval"):
        _kernels_over_unix_sockets()


def _kernels_over_unix_sockets() -> None:
    """nbval's kernels talk over Unix sockets in a private folder each, not over TCP ports (why:
    hpcnb.course.kernels; it was every cell of lesson 3b in one CI run)."""
    import nbval.kernel

    from hpcnb.course.kernels import ipc_kernel_manager

    nbval.kernel.KernelManager = ipc_kernel_manager(asynchronous=False)


def _site_lane() -> str | None:
    """The site profile a run of the course's notebooks emulates (``HPCNB_PROFILE``), unless local."""
    profile = os.environ.get("HPCNB_PROFILE") or "local"
    return None if profile == "local" else profile


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under another site's profile (``make test-lessons-site PROFILE=narval``), a cell that shows the
    chosen site (its source names ``PROFILE``) prints that site's facts, not the local ones its
    stored output was recorded with: such a cell must run without an error, its output is not
    compared. Every other checked cell is compared as usual."""
    if _site_lane() is None:
        return
    for item in items:
        if type(item).__name__ == "IPyNbCell" and "PROFILE" in item.cell.source:
            item.compare_outputs = lambda test, ref, skip_compare=None: True
