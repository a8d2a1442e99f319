"""`hpcnb site probe`: a site profile made from what a Slurm says.

Each shipped profile's local Slurm is probed (from inside a job, as a student would with srun) and the
probed profile must equal the shipped one for every key the probe can see; a fake Slurm on PATH
(HPCNB_SLURM=real) brings the odd values and the failing or missing commands.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hpcnb.backend import local_bin_dir
from hpcnb.sites import emulated_version, list_profiles, load_profile
from hpcnb.sites.probe import probe_site, render_toml
from hpcnb.slurm.show import parse_config, parse_gres, parse_records

CLI = [sys.executable, "-m", "hpcnb.cli"]


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def _seen(profile: Any) -> dict[str, Any]:
    """What the probe can see of a profile, key by key."""
    every = {h for group in profile.nodes for h in group.hostnames}
    from hpcnb.sites import expand_hostlist, parse_time_limit

    return {
        "partitions": {p.name: (p.max_seconds, p.default, frozenset(expand_hostlist(p.nodes) if p.nodes else every),
                                p.preemptible, p.default_time and parse_time_limit(p.default_time), p.max_nodes)
                       for p in profile.partitions},
        "default partition": profile.default_partition().name,
        "nodes": {h: (g.cpus, g.memory_mb, g.gpus, g.gpu_type, frozenset(g.features))
                  for g in profile.nodes for h in g.hostnames},
        "def_mem_per_cpu_mb": profile.def_mem_per_cpu_mb, "kill_wait_s": profile.kill_wait_s,
        "cluster_name": profile.cluster_name, "accounts enforced": profile.account_required or bool(profile.accounts),
        "emulated slurm": emulated_version(profile.slurm_version), "slurm_tmpdir": profile.slurm_tmpdir,
    }


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str, str]]:
    """Each shipped profile's local Slurm (a state of its own), probed from inside a job:
    {name: (the written file, the probe's stderr, `hpcnb slurm status`)}."""
    results = {}
    for name in list_profiles():
        folder = tmp_path_factory.mktemp(f"probe-{name}")
        env = {**os.environ, "HPCNB_STATE_DIR": str(folder / "state"), "HPCNB_SLURM": "local"}
        env.pop("HPCNB_SLURM_VERSION", None)  # the profile's own release
        env["PATH"] = f"{local_bin_dir()}{os.pathsep}{env['PATH']}"
        assert _run([*CLI, "slurm", "reset", "--profile", name], env, folder).returncode == 0
        profile = load_profile(name)
        options = [d.replace("<", "").replace(">", "") for d in [profile.account_directive or ""] if d]
        out = folder / f"probed-{name}.toml"
        res = _run(["srun", *options, *profile.required_directives, *CLI, "site", "probe", "-o", str(out)], env, folder)
        assert res.returncode == 0, res.stderr
        status = _run([*CLI, "slurm", "status"], env, folder).stdout
        results[name] = (out, res.stderr, status)
        _run([*CLI, "slurm", "reset"], env, folder)
    return results


@pytest.mark.parametrize("name", list_profiles())
def test_probe_of_each_shipped_site_equals_its_profile(probed, name: str) -> None:
    out, stderr, status = probed[name]
    probe = load_profile(out)
    assert probe.name == f"probed-{name}"
    assert _seen(probe) == _seen(load_profile(name))
    private_tmp = any(t.path == "/tmp" and t.node_local for t in probe.storage)
    assert private_tmp == ("nodes: apart" in status)  # JobContainerType, as the local Slurm runs jobs
    text = out.read_text()
    assert "# from: scontrol show partition" in text and "# from: scontrol show config (SLURM_VERSION" in text
    assert "# QUESTION: quota_bytes" in text  # what no command says is asked, never invented
    assert "the local Slurm has no sacctmgr" in stderr  # said, not asked of another Slurm on PATH


def test_probed_profile_runs_a_local_slurm_and_lints(probed, tmp_path: Path) -> None:
    out, _, _ = probed["narval"]
    env = {**os.environ, "HPCNB_STATE_DIR": str(tmp_path / "state"), "HPCNB_PROFILE": str(out)}
    assert _run([*CLI, "slurm", "reset", "--profile", str(out)], env, tmp_path).returncode == 0
    status = _run([*CLI, "slurm", "status"], env, tmp_path)
    assert status.returncode == 0 and f"profile: {out}" in status.stdout
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=00:10:00\n#SBATCH --account=def-x\nsrun hostname\n")
    lint = _run([*CLI, "lint", "--profile", str(out), str(script)], env, tmp_path)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    script.write_text("#!/bin/bash\n#SBATCH --time=00:10:00\nsrun hostname\n")  # no account: the rule probed
    assert _run([*CLI, "lint", "--profile", str(out), str(script)], env, tmp_path).returncode == 1
    _run([*CLI, "slurm", "reset"], env, tmp_path)


# ----------------------------------------------------------------------------- a fake Slurm on PATH

CONFIG = """\
Configuration data as of 2026-01-01T00:00:00
AccountingStorageEnforce = associations,limits
ClusterName             = Fake Centre
DefMemPerCPU            = 2000
JobContainerType        = job_container/tmpfs
KillWait                = 30 sec
MaxArraySize            = 5001
SLURM_VERSION           = 22.05.8
"""
PARTITIONS = """\
PartitionName=gpu
   AllocNodes=ALL Default=YES QoS=N/A
   DefaultTime=01:00:00 MaxNodes=4 MaxTime=2-00:00:00
   Nodes=g[1-3] PreemptMode=OFF TotalNodes=3

PartitionName=cpu
   Default=NO MaxTime=UNLIMITED Nodes=c[1-2] PreemptMode=REQUEUE

PartitionName=empty
   Default=NO MaxTime=1:00:00 Nodes=(null)
"""
NODE = """\
NodeName={name} Arch=x86_64 CoresPerSocket=8
   CPUTot={cpus} AvailableFeatures={features} ActiveFeatures={features}
   Gres={gres}
   OS=Linux 6.8.0 #1 SMP PREEMPT_DYNAMIC
   RealMemory=64000 Partitions={part}
"""
NODES = "\n".join([*(NODE.format(name=f"g{i}", cpus=16, features="gpu,a100", gres="gpu:a100:4(S:0-1)", part="gpu")
                     for i in (1, 2, 3)),
                   NODE.format(name="c1", cpus=32, features="(null)", gres="(null)", part="cpu"),
                   NODE.format(name="c2", cpus=32, features="(null)", gres="gpu:a100", part="cpu")])
RESERVATION = "ReservationName=course StartTime=2026-01-01T09:00:00 EndTime=2026-01-01T17:00:00 Nodes=g1 Users=(null) Accounts=proj1\n"


def _fake_slurm(folder: Path, *, config_fails: bool = False, partitions_fail: bool = False,
                sacctmgr: str | None = "ok") -> dict[str, str]:
    """A Slurm on PATH (and nothing else): scontrol, sbatch, srun (pyxis), sacctmgr ("ok", "fails", None: absent)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name, text in {"config": CONFIG, "partition": PARTITIONS, "node": NODES, "reservation": RESERVATION}.items():
        (folder / name).write_text(text)
    fail = 'echo "slurm_load_ctl_conf error: Unable to contact slurm controller" >&2; exit 1'
    scripts = {
        "scontrol": textwrap.dedent(f"""\
            #!/bin/sh
            case "$1 $2" in
              "ping ") echo "Slurmctld(primary) at fake is UP" ;;
              "show config") {fail if config_fails else f'/bin/cat {folder}/config'} ;;
              "show partition") {fail if partitions_fail else f'/bin/cat {folder}/partition'} ;;
              "show node") /bin/cat {folder}/node ;;
              "show reservation") /bin/cat {folder}/reservation ;;
              *) exit 1 ;;
            esac
            """),
        "sbatch": "#!/bin/sh\nexit 1\n",
        "srun": "#!/bin/sh\necho 'Usage: srun [OPTIONS(0)...]'\necho '      --container-image=[PATH]  the image (pyxis)'\n",
    }
    if sacctmgr == "ok":
        scripts["sacctmgr"] = '#!/bin/sh\ncase "$4" in user=*) printf "proj2\\nproj1\\n" ;; *) echo proj1 ;; esac\n'
    elif sacctmgr == "fails":
        scripts["sacctmgr"] = "#!/bin/sh\necho 'sacctmgr: error: Problem talking to the database' >&2\nexit 1\n"
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LMOD", "SCRATCH", "PROJECT", "WORK"))}
    return {**env, "PATH": str(bin_dir), "HPCNB_SLURM": "real", "USER": "student", "SCRATCH": "/scratch/student"}


def test_probe_of_a_centre_with_odd_values(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path)
    res = _run([*CLI, "site", "probe", "-o", "centre.toml"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    profile = load_profile(tmp_path / "centre.toml")
    assert [(p.name, p.max_time, p.default, p.nodes, p.preemptible) for p in profile.partitions] == [
        ("gpu", "2-00:00:00", True, "g[1-2]", False), ("cpu", "INFINITE", False, "c[1-2]", True)]
    assert "partition empty has no usable nodes" in res.stderr  # said, and left out
    assert "partition gpu: 2 of its 3 nodes kept" in res.stderr
    assert "node c2: GRES 'gpu:a100' has no GPU count" in res.stderr
    groups = {g.names: (g.cpus, g.memory_mb, g.gpus, g.gpu_type, g.features) for g in profile.nodes}
    assert groups == {"g[1-2]": (16, 64000, 4, "a100", ("gpu", "a100")), "c[1-2]": (32, 64000, 0, None, ())}
    assert [(g.name, g.per_node, g.memory_gb) for g in profile.gpu_types] == [("a100", 4, None)]
    assert (profile.slurm_version, profile.cluster_name, profile.def_mem_per_cpu_mb, profile.kill_wait_s) == (
        "22.05", "Fake Centre", 2000, 30)
    assert (profile.account_required, profile.accounts, profile.account_directive) == (
        False, ("proj1", "proj2"), "--account=proj1")  # enforced, and a job without --account gets proj1
    gpu = profile.partition("gpu")
    assert (gpu.default_time, gpu.max_nodes) == ("01:00:00", 4)
    assert [t.path for t in profile.storage] == ["$HOME", "$SCRATCH", "/tmp"]
    notes = " ".join(profile.notes)
    assert "Reservation course" in notes and "pyxis (srun --container-image)" in notes and "proj1, proj2" in notes
    text = (tmp_path / "centre.toml").read_text()
    assert "# from: scontrol show partition gpu\nname = \"gpu\"" in text
    assert "# PROBLEM: partition empty has no usable nodes" in text


@pytest.mark.parametrize("sacctmgr", ["fails", None])
def test_failing_commands_are_said_and_the_probe_goes_on(tmp_path: Path, sacctmgr: str | None) -> None:
    env = _fake_slurm(tmp_path, config_fails=True, sacctmgr=sacctmgr)
    res = _run([*CLI, "site", "probe", "-o", "centre.toml"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "`scontrol show config` failed (exit 1: slurm_load_ctl_conf error" in res.stderr
    assert ("Problem talking to the database" if sacctmgr else "could not run") in res.stderr
    assert "Traceback" not in res.stderr
    profile = load_profile(tmp_path / "centre.toml")  # loads: what failed is left out, hpcnb's defaults apply
    assert profile.default_partition().name == "gpu" and not profile.account_required and not profile.accounts


def test_no_partitions_means_a_file_that_does_not_load_yet(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path, partitions_fail=True)
    res = _run([*CLI, "site", "probe", "-o", "centre.toml"], env, tmp_path)
    assert res.returncode == 1 and "centre.toml written, but it does not load yet" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("args, said", [(["-o", "x.txt"], "must end in .toml"),
                                        (["-o", "a.toml", "--name", "b"], "match the file name"),
                                        (["--name", "Bad Name"], "must be a profile name")])
def test_bad_arguments_are_one_line(tmp_path: Path, args: list[str], said: str) -> None:
    res = _run([*CLI, "site", "probe", *args], _fake_slurm(tmp_path), tmp_path)
    assert res.returncode == 2 and said in res.stderr and len(res.stderr.splitlines()) == 1
    assert not list(tmp_path.glob("*.t*"))


def test_stdout_and_the_public_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _fake_slurm(tmp_path)
    res = _run([*CLI, "site", "probe", "--name", "centre"], env, tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("# A site profile written by `hpcnb site probe`")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    data = probe_site("centre", quiet=True)
    assert data["name"] == "centre" and data["partitions"][0]["_from"] == {"name": "scontrol show partition gpu"}
    assert render_toml(data) == res.stdout


def test_scontrol_texts_parse() -> None:
    assert parse_records(NODES)[0]["OS"] == "Linux 6.8.0 #1 SMP PREEMPT_DYNAMIC"
    assert parse_records(RESERVATION)[0]["Accounts"] == "proj1"
    assert parse_config(CONFIG)["KillWait"] == "30 sec"
    assert parse_gres("gpu:a100:4(S:0-1),gpu:v100:2") == [("gpu", "a100", 4), ("gpu", "v100", 2)]
    assert parse_gres("gpu:2") == [("gpu", None, 2)] and parse_gres("(null)") == []
    assert parse_gres("gpu:a100") == [("gpu", "a100", None)]
    with pytest.raises(ValueError, match="not a whole number"):
        parse_gres("gpu:a100:x")


def test_a_command_that_hangs_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = {"config": CONFIG, "partition": PARTITIONS, "node": NODES, "reservation": ""}

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        if args[0] != "scontrol":
            raise subprocess.TimeoutExpired(args, 30)
        return subprocess.CompletedProcess(args, 0, texts[args[2]], "")

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    data = probe_site("centre", run=run, quiet=True)
    assert "`sacctmgr -nP show assoc user=" in data["_problems"][-2] and "timed out" in data["_problems"][-2]
    assert "`srun --help` could not run (timed out)" in data["_problems"][-1]
    assert data["account_required"] and "account_required" in data["_questions"]  # enforced, no default known
