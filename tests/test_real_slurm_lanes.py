"""The real Slurm lanes of ci/real-slurm.sh (22.05 on the host, 24.11 in a chroot) and the parity table.

Cheap checks that need no running Slurm: which folder holds each lane's commands, a clear error
for a version there is no lane for, and the parity report's one table with a column per version.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "ci" / "real-slurm.sh"


@pytest.mark.parametrize("version, folder", [("22.05", "/usr/bin"), ("24.11", "/run/hpcnb-real-slurm-24.11/bin")])
def test_each_lane_names_its_commands(version: str, folder: str) -> None:
    out = subprocess.run(["bash", str(SCRIPT), "bin", version], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout) == (0, folder + "\n")


def test_unknown_version_is_refused() -> None:
    out = subprocess.run(["bash", str(SCRIPT), "status", "23.02"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "unknown Slurm version '23.02' (known: 22.05, 24.11)" in out.stderr


def test_parity_table_has_a_column_per_version() -> None:
    from tests.parity.report import render

    def rec(case: str, real: str, verdict: str, note: str = "") -> dict:
        return {"case": case, "local": "COMPLETED", "real": real, "verdict": verdict, "note": note}

    text = render({"22.05": [rec("a", "COMPLETED", "equal"), rec("b", "x", "equal")],
                   "24.11": [rec("a", "FAILED", "DIFFERENT", "only real: SLURM_TRES_PER_TASK=cpu=2")]}, "now")
    assert "| case | local | real 22.05 | verdict 22.05 | real 24.11 | verdict 24.11 |" in text
    assert "| a | COMPLETED | COMPLETED | equal | FAILED | DIFFERENT |" in text
    assert "| b | COMPLETED | x | equal |  | not run |" in text
    assert "- real Slurm 24.11: 1 cases, 0 equal, 0 intentionally different, 1 different." in text
    assert "- a [24.11]: only real: SLURM_TRES_PER_TASK=cpu=2" in text
