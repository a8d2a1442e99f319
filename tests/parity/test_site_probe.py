"""``hpcnb site probe`` against the real Slurm of this lane (issue 41, item 2).

The CI's real Slurms are configured as a small centre (ci/real-slurm/slurm.conf: three partitions
with their own limits and one default, typed GPU GRES, node features, AccountingStorageEnforce;
ci/real-slurm.sh: the accounts course, the default, and research for every CI user, and a
reservation years ahead). The probe runs there as a user would (``HPCNB_SLURM=real``); its profile
must say, key by key, what that configuration says; the lessons' job scripts written for it must
lint clean and be accepted by the real Slurm (``sbatch --test-only``); and a local Slurm made from
it (``hpcnb slurm reset --profile FILE``) must accept them too and run one of them to the end.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hpcnb.course.budget import jobscript_cells
from hpcnb.lessons.jobscripts import for_site
from hpcnb.lint import ERROR, lint_text
from hpcnb.sites import Profile, expand_hostlist, load_profile, parse_time_limit

from . import harness
from .harness import Side

pytestmark = pytest.mark.realslurm

CI = harness.ROOT / "ci"
CELLS = jobscript_cells()  # (notebook, file, GPUs per node asked, body) of every %%jobscript cell
RUN_TO_THE_END = "whoami.sh"  # lesson 8's first job: 2 nodes x 2 tasks, a few seconds


def slurm_conf() -> dict[str, Any]:
    """ci/real-slurm/slurm.conf as ``{"Key": value, "NodeName": [{...}], "PartitionName": [{...}]}``."""
    conf: dict[str, Any] = {"NodeName": [], "PartitionName": []}
    for line in (CI / "real-slurm" / "slurm.conf").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = dict(item.split("=", 1) for item in line.split())
        first = line.split("=", 1)[0]
        if first in ("NodeName", "PartitionName"):
            conf[first].append(pairs)
        else:
            conf.update(pairs)
    return conf


def real_slurm_sh(name: str) -> list[str]:
    """A bash array of ci/real-slurm.sh (``ACCOUNTS=(course research)``) as a list."""
    match = re.search(rf"\b{name}=\(([^)]*)\)", (CI / "real-slurm.sh").read_text())
    assert match, f"ci/real-slurm.sh has no {name}=(...)"
    return match.group(1).split()


def seconds(text: str | None) -> int | None:
    return None if text is None else parse_time_limit(text)


def expected_profile() -> dict[str, Any]:
    """What the probed profile must say, from the CI's configuration alone."""
    conf = slurm_conf()
    all_nodes = [name for node in conf["NodeName"] for name in expand_hostlist(node["NodeName"])]
    nodes = []
    for node in conf["NodeName"]:
        kind, gpu_type, count = node["Gres"].split(":")
        assert kind == "gpu", node
        nodes.append((tuple(expand_hostlist(node["NodeName"])), int(node["CPUs"]), int(node["RealMemory"]),
                      int(count), gpu_type, tuple(node["Features"].split(","))))
    partitions = [(part["PartitionName"], seconds(part["MaxTime"]), seconds(part.get("DefaultTime")),
                   int(part["MaxNodes"]) if "MaxNodes" in part else None, part.get("Default") == "YES",
                   tuple(all_nodes if part["Nodes"] == "ALL" else expand_hostlist(part["Nodes"])))
                  for part in conf["PartitionName"]]
    default = _default_account()
    accounts = [default] + sorted(a for a in real_slurm_sh("ACCOUNTS") if a != default)
    return {"cluster_name": conf["ClusterName"], "slurm_version": harness.REAL_VERSION,
            "def_mem_per_cpu_mb": int(conf["DefMemPerCPU"]), "kill_wait_s": int(conf["KillWait"]),
            "partitions": partitions, "nodes": nodes, "gpu_types": sorted({n[4] for n in nodes}),
            "accounts": tuple(accounts), "account_required": False,
            "account_directive": f"--account={default}"}


def _default_account() -> str:
    match = re.search(r"\bDEFAULT_ACCOUNT=(\S+)", (CI / "real-slurm.sh").read_text())
    assert match, "ci/real-slurm.sh has no DEFAULT_ACCOUNT="
    return match.group(1)


def probed_as_compared(profile: Profile) -> dict[str, Any]:
    """The probed profile in :func:`expected_profile`'s shape."""
    return {"cluster_name": profile.cluster_name, "slurm_version": profile.slurm_version,
            "def_mem_per_cpu_mb": profile.def_mem_per_cpu_mb, "kill_wait_s": profile.kill_wait_s,
            "partitions": [(p.name, p.max_seconds, seconds(p.default_time), p.max_nodes, p.default,
                            tuple(expand_hostlist(p.nodes)) if p.nodes else
                            tuple(n for g in profile.nodes for n in g.hostnames)) for p in profile.partitions],
            "nodes": [(g.hostnames, g.cpus, g.memory_mb, g.gpus, g.gpu_type, g.features) for g in profile.nodes],
            "gpu_types": sorted(t.name for t in profile.gpu_types),
            "accounts": profile.accounts, "account_required": profile.account_required,
            "account_directive": profile.account_directive}


@pytest.fixture(scope="module")
def probed(sides: dict[str, Side], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The profile ``hpcnb site probe`` writes on the real Slurm, as a user runs it there."""
    real = sides["real"]
    folder = tmp_path_factory.mktemp("site-probe")
    path = folder / "ci.toml"
    done = real.run([sys.executable, "-m", "hpcnb.cli", "site", "probe", "-o", str(path)], folder, timeout=300,
                    env={"HPCNB_SLURM": "real"})
    assert done.rc == 0 and path.is_file(), f"hpcnb site probe failed on the real Slurm {harness.REAL_VERSION}\n{done}"
    return path


def test_the_probed_profile_says_what_the_configuration_says(probed: Path) -> None:
    got, want = probed_as_compared(load_profile(probed)), expected_profile()
    wrong = [f"{key}: probed {got[key]!r}, configured {want[key]!r}" for key in want if got[key] != want[key]]
    assert not wrong, f"{probed}:\n" + "\n".join(wrong) + "\n\n" + probed.read_text()


def test_the_probe_sees_the_reservation(probed: Path) -> None:
    """ci/real-slurm.sh's reservation: the probe keeps it as a note (a profile has no reservation key)."""
    fields = dict(item.split("=", 1) for item in real_slurm_sh("RESERVATION"))
    notes = [n for n in load_profile(probed).notes if n.startswith(f"Reservation {fields['ReservationName']} ")]
    assert len(notes) == 1, load_profile(probed).notes
    assert f"nodes {fields['Nodes']}" in notes[0] and fields["StartTime"] in notes[0], notes[0]


def lesson_scripts(profile: Path, folder: Path) -> list[tuple[str, Path]]:
    """Every lesson's job script, written for the profile (as ``%%jobscript`` does) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    scripts = []
    for notebook, name, gpus, body in CELLS:
        path = folder / name
        path.write_text(for_site(body, str(profile), gpus_per_node_wanted=gpus).text)
        path.chmod(0o755)
        scripts.append((f"{notebook} {name}", path))
    return scripts


def test_the_lessons_scripts_lint_clean_and_the_real_slurm_takes_them(
        probed: Path, sides: dict[str, Side], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPCNB_PROJECT", raising=False)
    monkeypatch.delenv("HPCNB_RESERVATION", raising=False)
    real = sides["real"]
    folder = real.workdir("site-probe-scripts")
    errors, refused = [], []
    for label, path in lesson_scripts(probed, folder):
        errors += [f"{label}: {f.format(path.name)}" for f in lint_text(path.read_text(), str(probed))
                   if f.severity == ERROR]
        done = real.run(["sbatch", "--test-only", str(path)], folder, timeout=60)
        if done.rc != 0 or "to start at" not in done.stderr:
            refused.append(f"{label}: exit {done.rc}: {done.stderr.strip()}")
    assert not errors, "lint errors against the probed profile:\n" + "\n".join(errors)
    assert not refused, f"the real Slurm {harness.REAL_VERSION} refuses:\n" + "\n".join(refused)


def test_a_local_slurm_made_from_the_probed_profile_runs_the_lessons_jobs(
        probed: Path, sides: dict[str, Side], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPCNB_PROJECT", raising=False)
    monkeypatch.delenv("HPCNB_RESERVATION", raising=False)
    local = sides["local"]
    run_env = {"HPCNB_STATE_DIR": str(tmp_path / "state"), "HPCNB_SLURM_VERSION": harness.REAL_VERSION}
    made = local.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset", "--profile", str(probed)], tmp_path,
                     env=run_env, timeout=120)
    assert made.rc == 0, made
    try:
        refused = []
        scripts = lesson_scripts(probed, tmp_path / "jobs")
        for label, path in scripts:
            done = local.run(["sbatch", "--test-only", str(path)], path.parent, env=run_env, timeout=60)
            if done.rc != 0 or "to start at" not in done.stderr:
                refused.append(f"{label}: exit {done.rc}: {done.stderr.strip()}")
        assert not refused, "the local Slurm made from the probed profile refuses:\n" + "\n".join(refused)
        path = next(p for label, p in scripts if p.name == RUN_TO_THE_END)
        job = local.ok(["sbatch", "--parsable", path.name], path.parent, env=run_env).stdout.strip()
        end, state = time.time() + 180, ""
        while time.time() < end:
            state = local.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,Account,Partition"], path.parent,
                              env=run_env).stdout.strip()
            if state.split("|")[0] not in ("", "PENDING", "RUNNING", "COMPLETING"):
                break
            time.sleep(1)
        default = load_profile(probed)
        assert state == f"COMPLETED|{default.accounts[0]}|{default.default_partition().name}", (
            state, *(p.read_text() for p in path.parent.glob("whoami-*.out")))
    finally:
        local.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], tmp_path, env=run_env, timeout=120)


LESSON_ON_THE_PROBED_SITE = "03-first-batch-job.ipynb"  # batch jobs, an array, a dependency: the site's scripts


def test_a_lesson_runs_under_nbval_on_a_local_slurm_made_from_the_probed_profile(
        probed: Path, tmp_path: Path) -> None:
    """Lesson 3, unchanged, on a local Slurm made from the probed profile (its partitions, default
    account, limits), as ``make test-lessons-site`` runs a shipped site's lessons: a private copy of
    notebooks/, cells that show the site run but are not compared (conftest.py)."""
    copy = tmp_path / "course"
    (copy / "tests").mkdir(parents=True)
    shutil.copytree(harness.ROOT / "notebooks", copy / "notebooks", ignore=shutil.ignore_patterns("work"))
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(harness.ROOT / name, copy / name)
    shutil.copy(harness.ROOT / "tests" / "nbval_sanitize.cfg", copy / "tests")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
    env.update(HPCNB_SLURM="local", HPCNB_PROFILE=str(probed), HPCNB_STATE_DIR=str(tmp_path / "state"),
               HPCNB_SLURM_VERSION=harness.REAL_VERSION, HPCNB_FIRST_JOB_ID="40001")
    env.pop("HPCNB_PROJECT", None)
    env.pop("HPCNB_RESERVATION", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-sanitize-with",
             "tests/nbval_sanitize.cfg", "--nbval-cell-timeout=300", f"notebooks/{LESSON_ON_THE_PROBED_SITE}"],
            cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    finally:
        subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], cwd=copy, env=env,
                       capture_output=True, timeout=120)
    assert done.returncode == 0, f"lesson 3 at the probed site:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
