"""The local Slurm's centre-like rules, as the CI's real Slurms have them (ci/real-slurm/slurm.conf,
ci/real-slurm.sh): enforced accounts (AccountingStorageEnforce=associations, the accounts course,
the default, and research) and a partition with a default time and a node limit (long). The
expected texts are the real 22.05's."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import run

from hpcnb.sites import SITES_DIR

REFUSED = "Invalid account or account/partition combination specified"


def submit(*args: str) -> int:
    done = run(["sbatch", "--parsable", "-o", "/dev/null", *args])
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def job_field(job: int, key: str) -> str:
    text = run(["scontrol", "show", "job", str(job)]).stdout
    match = re.search(rf"\b{key}=(\S+)", text)
    assert match, text
    return match.group(1)


def test_a_job_without_account_runs_under_the_default_one(workdir: Path) -> None:
    job = submit("--wait", "--wrap", "echo $SLURM_JOB_ACCOUNT > account.txt", "-o", "out.txt")
    assert (workdir / "account.txt").read_text() == "course\n"
    assert job_field(job, "Account") == "course"
    assert run(["sacct", "-n", "-X", "-P", "-j", str(job), "-o", "Account"]).stdout == "course\n"


def test_another_of_the_users_accounts_is_taken_in_lowercase(workdir: Path) -> None:
    job = submit("-A", "Research", "--hold", "--wrap", "true")
    assert run(["squeue", "-h", "-j", str(job), "-o", "%a"]).stdout == "research\n"
    run(["scancel", str(job)])


@pytest.mark.parametrize("command, prefix", [
    (["sbatch", "-o", "/dev/null", "--wrap", "true"], "sbatch: error: Batch job submission failed: "),
    (["salloc", "true"], "salloc: error: Job submit/allocate failed: "),
    (["srun", "true"], "srun: error: Unable to allocate resources: "),
])
@pytest.mark.parametrize("account", ["nope", ""])
def test_an_account_the_user_has_not_is_refused(workdir: Path, command: list[str], prefix: str, account: str) -> None:
    before = run(["squeue", "-h", "-o", "%i"]).stdout
    done = run([command[0], "-A", account, *command[1:]], timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"{prefix}{REFUSED}\n")
    assert run(["squeue", "-h", "-o", "%i"]).stdout == before  # nothing queued


def test_the_long_partition_has_a_default_time_and_one_node_at_most(workdir: Path) -> None:
    info = run(["sinfo", "-o", "%P %l %L %s"]).stdout.splitlines()
    assert info == ["PARTITION TIMELIMIT DEFAULTTIME JOB_SIZE", "debug* infinite n/a 1-infinite",
                    "short 10:00 n/a 1-infinite", "long 2-00:00:00 1:00:00 1"]
    defaulted = submit("-p", "long", "--hold", "--wrap", "true")
    asked = submit("-p", "long", "-t", "5", "--hold", "--wrap", "true")
    assert (job_field(defaulted, "TimeLimit"), job_field(asked, "TimeLimit")) == ("01:00:00", "00:05:00")
    too_wide = submit("-p", "long", "-N2", "--wrap", "true")
    for _ in range(200):
        reason = run(["squeue", "-h", "-j", str(too_wide), "-o", "%T %r"]).stdout.strip()
        if reason != "PENDING None":
            break
    assert reason == "PENDING PartitionNodeLimit"
    run(["scancel", str(defaulted), str(asked), str(too_wide)])


def test_without_accounts_in_the_profile_any_account_is_taken(tmp_path: Path) -> None:
    profile = tmp_path / "open.toml"
    text = (SITES_DIR / "local.toml").read_text()
    profile.write_text(re.sub(r'^accounts = .*\n', "", text, flags=re.M).replace('name = "local"', 'name = "open"'))
    env = {**os.environ, "HPCNB_STATE_DIR": str(tmp_path / "state"), "HPCNB_PROFILE": str(profile)}
    try:
        done = run(["sbatch", "--parsable", "-A", "anything", "--hold", "--wrap", "true"], env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        plain = run(["sbatch", "--parsable", "--hold", "--wrap", "true"], env=env, cwd=tmp_path).stdout.strip()
        accounts = run(["squeue", "-h", "-o", "%a", "-j", f"{done.stdout.strip()},{plain}"], env=env).stdout.split()
        assert sorted(accounts) == sorted(["anything", run(["id", "-un"]).stdout.strip()])
    finally:
        run(["python", "-m", "hpcnb.cli", "slurm", "reset"], env=env)


def test_scripts_for_a_site_that_enforces_accounts_are_charged_to_its_default_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probed profile names the user's accounts and the form (``--account=course``): a lesson's script
    there gets the default account, not the course's placeholder project (refused where accounts are
    enforced); HPCNB_PROJECT still wins."""
    from hpcnb.lessons.jobscripts import for_site

    profile = tmp_path / "probed.toml"
    text = (SITES_DIR / "local.toml").read_text().replace('name = "local"', 'name = "probed"')
    profile.write_text(text.replace("account_required = false", 'account_required = false\naccount_directive = "--account=course"'))
    monkeypatch.delenv("HPCNB_PROJECT", raising=False)
    assert "#SBATCH --account=course\n" in for_site("#!/bin/bash\ntrue\n", str(profile)).text
    monkeypatch.setenv("HPCNB_PROJECT", "research")
    assert "#SBATCH --account=research\n" in for_site("#!/bin/bash\ntrue\n", str(profile)).text
