"""The local Slurm, behaving as 22.05 or 24.11, answers the captured command cases of that version.

Each case of ``cases.json`` (tests/fixtures/real-slurm-22.05/ and captures-24.11/, written by
``ci/real-slurm/capture-fixtures.py``) is rerun on an idle local Slurm of the same version: exit code,
stdout and stderr must be the capture's, after normalising job ids and what describes the host
rather than the virtual node (load, free memory, OS, boot and start times, the slurmd port), and the
node's address (each cluster's own network: the capture's nodes had 127.0.0.1).
"""
from __future__ import annotations

import json
import re

import pytest

from conftest import Lane

# values of the machine the capture ran on (scontrol show node), normalised on both sides
HOST_STATS = re.compile(r"\b(CPULoad|FreeMem|BootTime|SlurmdStartTime|LastBusyTime|Port|NodeAddr)=\S+")
HOST_OS = re.compile(r"^(   OS=).*$", re.M)
SUBMITTED = re.compile(r"Submitted batch job \d+")
# what the local Slurm does not emulate yet, by version: each must still differ (else remove it here)
KNOWN_GAPS = {
    ("24.11", "srun_external_launcher_outside_job"):
        "the local Slurm's option table is 22.05's: 24.11's new options (--external-launcher, --tres-per-task, "
        "...) are unrecognized",
}


def normalise(text: str) -> str:
    text = HOST_OS.sub(r"\1<host>", SUBMITTED.sub("Submitted batch job <ID>", text))
    return HOST_STATS.sub(lambda m: f"{m.group(1)}=<host>", text)


def cases(lane: Lane) -> list[dict]:
    return json.loads((lane.commands / "cases.json").read_text())


def test_captured_command_cases(lane: Lane, tmp_path) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/bash\ntrue\n")
    (tmp_path / "noshebang.sh").write_text("echo hello\n")
    wrong = []
    for case in cases(lane):
        done = lane.run(case["argv"], cwd=tmp_path, env={"LC_ALL": "C"})
        got = (done.returncode, normalise(done.stdout), normalise(done.stderr))
        want = (case["exit_code"], normalise(case["stdout"]), normalise(case["stderr"]))
        gap = KNOWN_GAPS.get((lane.version, case["case"]))
        if gap and got == want:
            wrong.append(f"{case['case']}: now equal: remove it from KNOWN_GAPS ({gap})")
        elif got != want and not gap:
            wrong.append(f"{case['case']}: local {got!r}\n    real  {want!r}")
        job = SUBMITTED.search(done.stdout)
        if job:
            lane.run(["scancel", job.group(0).split()[-1]])
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("version_only", ["srun_external_launcher_outside_job"])
def test_every_version_captured_the_same_command_lines(version_only: str) -> None:
    """The two versions' command cases are the same list (24.11 adds only what 22.05 has no option for)."""
    from conftest import FIXTURES

    old = [c["argv"] for c in json.loads((FIXTURES / "real-slurm-22.05" / "cases.json").read_text())]
    new = {c["case"]: c["argv"] for c in json.loads((FIXTURES / "captures-24.11" / "cases.json").read_text())}
    assert [argv for name, argv in new.items() if name != version_only] == old
