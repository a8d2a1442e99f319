"""Which Slurm the course uses (a real one is one whose controller answers), and jobs submitted
from a notebook that runs inside a Slurm job (every portal) starting clean."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcnb import backend

UP = "Slurmctld(primary) at ctl01 is UP"


def fake_slurm(folder: Path, ping_rc: int = 0, ping_out: str = UP) -> Path:
    """A folder with an ``sbatch`` and an ``scontrol`` whose ``ping`` answers as told."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sbatch").write_text("#!/bin/sh\nexit 0\n")
    (folder / "scontrol").write_text(f"#!/bin/sh\necho '{ping_out}'\nexit {ping_rc}\n")
    for name in ("sbatch", "scontrol"):
        (folder / name).chmod(0o755)
    return folder


@pytest.fixture
def auto(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("HPCNB_SLURM", "auto")
    monkeypatch.setattr(backend, "EXTRA_REAL_BINS", (str(tmp_path / "opt-slurm-bin"),))
    backend._cached_real.cache_clear()
    yield monkeypatch
    backend._cached_real.cache_clear()


def test_a_configless_slurm_whose_controller_answers_is_real(auto, tmp_path: Path) -> None:
    """No slurm.conf anywhere (configless: clients find slurmctld by DNS SRV): what counts is
    that `scontrol ping` says UP."""
    bin_dir = fake_slurm(tmp_path / "bin")
    auto.setenv("PATH", f"{bin_dir}{os.pathsep}/bin")
    choice = backend.choose_slurm()
    assert choice.slurm == "real" and choice.real_bin == str(bin_dir)
    assert UP in choice.why


def test_opt_slurm_off_path_is_found_and_put_on_path(auto, tmp_path: Path) -> None:
    """AWS ParallelCluster keeps Slurm in /opt/slurm/bin, often not on a kernel's PATH."""
    opt = fake_slurm(tmp_path / "opt-slurm-bin")
    auto.setenv("PATH", str(tmp_path / "nothing-here"))
    assert backend.choose_slurm().slurm == "real"
    assert backend.slurm_env()["PATH"].split(os.pathsep)[-1] == str(opt)


def test_an_sbatch_whose_controller_is_down_is_not_used(auto, tmp_path: Path) -> None:
    bin_dir = fake_slurm(tmp_path / "bin", ping_rc=1, ping_out="Slurmctld(primary) at ctl01 is DOWN")
    auto.setenv("PATH", f"{bin_dir}{os.pathsep}/bin")
    choice = backend.choose_slurm()
    assert choice.slurm == "local"
    assert "is DOWN" in choice.why and str(bin_dir) in choice.why


def test_which_slurm_says_why(auto, tmp_path: Path) -> None:
    auto.setenv("PATH", f"{fake_slurm(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run([sys.executable, "-m", "hpcnb.cli", "which-slurm"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    first, why = done.stdout.splitlines()
    assert first == "real" and "scontrol ping" in why


PORTAL_JOB = {  # what a notebook server started as a Slurm job (a portal's) has in its environment
    "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_STEP_ID": "0", "SLURM_MEM_PER_NODE": "2048",
    "SLURM_CPUS_PER_TASK": "4", "SLURM_SRUN_COMM_PORT": "40001", "SBATCH_PARTITION": "interactive",
    "SRUN_CPUS_PER_TASK": "4", "SALLOC_ACCOUNT": "x",
}


def test_job_variables_are_dropped_but_site_settings_kept() -> None:
    env = {"PATH": "/bin", "SLURM_CONF": "/etc/site/slurm.conf", **PORTAL_JOB}
    assert backend.without_job_variables(env) == {"PATH": "/bin", "SLURM_CONF": "/etc/site/slurm.conf"}
    outside = {"PATH": "/bin", "SBATCH_PARTITION": "gpu"}  # set by the user in a login shell: kept
    assert backend.without_job_variables(outside) == outside


def _job_env(workdir: Path) -> dict[str, str]:
    from hpcnb.jobs import submit

    job = submit(wrap="env -0 > env.bin", cwd=workdir, output="/dev/null")
    job.wait(timeout=60)
    env = dict(item.split("=", 1) for item in (workdir / "env.bin").read_text().split("\0") if "=" in item)
    own = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_TASK_PID", "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME",
           "SLURM_TMPDIR", "_")
    return {k: v for k, v in env.items() if k not in own}


def test_a_job_submitted_from_inside_a_job_equals_one_from_a_login_shell(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "login").mkdir()
    (tmp_path / "portal").mkdir()
    from_login = _job_env(tmp_path / "login")
    for key, value in PORTAL_JOB.items():
        monkeypatch.setenv(key, value)
    from_portal = _job_env(tmp_path / "portal")
    differ = {k: (from_login.get(k), from_portal.get(k)) for k in set(from_login) | set(from_portal)
              if from_login.get(k) != from_portal.get(k) and "login" not in str(from_login.get(k))}
    assert not differ
    assert from_portal["SLURM_SUBMIT_DIR"].endswith("portal")


def test_a_second_copy_of_hpcnb_runs_its_own_commands_and_controller(tmp_path: Path) -> None:
    """Two clones of the course sharing one Python: each one's commands, and the controller they
    start, are that clone's code, not the other's (nor an installed copy's)."""
    import shutil

    repo = Path(backend.__file__).resolve().parent.parent
    copy = tmp_path / "clone"
    shutil.copytree(repo / "hpcnb", copy / "hpcnb", ignore=shutil.ignore_patterns("__pycache__"))
    marker = tmp_path / "controller-was"
    controller = copy / "hpcnb" / "localslurm" / "controller.py"
    future = "from __future__ import annotations\n"
    controller.write_text(controller.read_text().replace(future, f"{future}open({str(marker)!r}, 'w').write(__file__)\n", 1))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCNB_"))}
    env.update(HPCNB_SLURM="local", HPCNB_STATE_DIR=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"))

    def commands_of(root: Path) -> Path:
        code = f"import sys; sys.path.insert(0, {str(root)!r}); from hpcnb.backend import local_bin_dir; print(local_bin_dir())"
        return Path(subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True,
                                   text=True, check=True).stdout.strip())

    theirs, ours = commands_of(copy), commands_of(repo)
    assert theirs != ours
    assert f"sys.path.insert(0, {str(copy)!r})" in (theirs / "sbatch").read_text()
    env["PATH"] = f"{theirs}{os.pathsep}{env['PATH']}"
    try:
        done = subprocess.run(["sbatch", "--wait", "--wrap", "true"], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert marker.read_text() == str(copy / "hpcnb" / "localslurm" / "controller.py")
    finally:
        subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env=env, cwd=copy,
                       capture_output=True, timeout=60)
