"""Every job script a lesson writes is valid at every site (issue 13, item 2).

A lesson writes its job scripts with ``%%jobscript FILE [--gpus-per-node N]``
(hpcnb.lessons.jobscripts): the site's profile adds its shebang, partition, project, required
directives and GPU request. Each such script, rendered for each shipped profile, must pass
``hpcnb lint --profile P`` without an error and ``sbatch --test-only`` on a local Slurm made for P.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcnb.course.budget import jobscript_cells
from hpcnb.lessons.jobscripts import (
    for_site, gpu_options, gpus_per_node, jobscript_magic, partition_for, processes_per_node, site_environment,
)
from hpcnb.lint import ERROR, lint_text
from hpcnb.sites import list_profiles, load_profile

ROOT = Path(__file__).resolve().parent.parent
PROFILES = list_profiles()


CELLS = jobscript_cells()   # (notebook, file, GPUs per node asked, body) of every %%jobscript cell
IDS = [f"{nb[:3]}{name}" for nb, name, _, _ in CELLS]


#: job scripts written as they are: lesson 3b's examples of one named site each and its comparison of
#: shebangs (which.sh; the site's project reaches it through SBATCH_ACCOUNT), lesson 3's broken
#: script (the linter's exercise)
AS_WRITTEN = {"which.sh", "conda.sh", "conda-home.sh", "apptainer.sh", "pyxis.sh", "sarus.sh", "alps.sh", "caches.sh", "broken.sh"}


def test_the_lessons_write_their_job_scripts_for_the_site():
    lessons = {nb[:2] for nb, *_ in CELLS if not nb.endswith("exercises.ipynb")}
    assert {"01", "02", "03", "06", "08", "09", "10", "11", "13"} <= lessons
    for notebook in ROOT.glob("notebooks/*.ipynb"):
        for cell in json.loads(notebook.read_text())["cells"]:
            source = "".join(cell["source"])
            if source.startswith("%%writefile") and "\n#SBATCH" in source:
                assert source.split()[1] in AS_WRITTEN, f"{notebook.name}: {source.splitlines()[0]}"
            for name in re.findall(r'Path\("([^"]+\.sh)"\)\.write_text', source) if "\n#SBATCH" in source else ():
                assert name in AS_WRITTEN, f"{notebook.name}: {name} is written without the site's lines"


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("cell", CELLS, ids=IDS)
def test_every_lesson_script_lints_clean_at_every_site(cell, profile):
    notebook, name, gpus, body = cell
    script = for_site(body, profile, gpus_per_node_wanted=gpus)
    errors = [f.format(name) for f in lint_text(script.text, profile) if f.severity == ERROR]
    assert not errors, f"{notebook} {name} at {profile}:\n{script.text}\n" + "\n".join(errors)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_lesson_script_is_accepted_by_sbatch_test_only(profile, tmp_path):
    """sbatch --test-only on a local Slurm made from the profile: partition, project, constraint and
    GPUs all exist there."""
    env = {**os.environ, "HPCNB_STATE_DIR": str(tmp_path / "state"), "HPCNB_PROFILE": profile}
    refused = []
    for notebook, name, gpus, body in CELLS:
        path = tmp_path / name
        path.write_text(for_site(body, profile, gpus_per_node_wanted=gpus).text)
        done = subprocess.run(["sbatch", "--test-only", str(path)], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=60)
        if done.returncode != 0 or "to start at" not in done.stderr:
            refused.append(f"{notebook} {name}: exit {done.returncode}: {done.stderr.strip()}")
    subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "stop"], env=env, capture_output=True, timeout=60)
    assert not refused, f"at {profile}:\n" + "\n".join(refused)


BODY = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node={per_node}\nsrun echo ${per_node}\n"


@pytest.mark.parametrize(("profile", "gpu_line"), [
    ("local", "#SBATCH --gres=gpu:2"),
    ("narval", "#SBATCH --gres=gpu:2"),
    ("alvis", "#SBATCH --gpus-per-node=V100:2"),
    ("stability", "#SBATCH --gpus=4"),      # the whole job's GPUs: 2 nodes x 2
    ("ulysses", "#SBATCH --gpus=4"),        # its guide's -G, written long
])
def test_the_gpu_request_takes_the_sites_form(profile, gpu_line):
    script = for_site(BODY, profile, gpus_per_node_wanted=2)
    assert gpu_line in script.text.splitlines()
    assert "#SBATCH --ntasks-per-node=2" in script.text
    assert script.text.endswith("srun echo ${per_node}\n")  # the shell's own ${...} is left alone


def test_piz_daint_gets_a_login_shell_its_constraint_and_one_gpu_per_node():
    script = for_site(BODY, "pizdaint", gpus_per_node_wanted=2)
    lines = script.text.splitlines()
    assert lines[0] == "#!/bin/bash -l"
    assert "#SBATCH --constraint=gpu" in lines and "#SBATCH --account=demo" in lines
    assert not [line for line in lines if "gres" in line or "--gpus" in line]
    assert (script.gpus_per_node, script.per_node) == (1, 1)
    assert "#SBATCH --ntasks-per-node=1" in lines


def test_a_login_shell_site_activates_the_courses_environment_unless_the_script_loads_its_own():
    lines = for_site(BODY, "pizdaint").text.splitlines()
    activate = f'source "{sys.prefix}/bin/activate"   # the course\'s environment'
    assert lines.index(activate) == 1 + max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    assert lines[-1] == "srun echo ${per_node}"
    own = for_site(BODY.replace("srun", "module load PyTorch\nsrun"), "pizdaint")
    assert "activate" not in own.text and not [a for a in own.added if not a.startswith("#SBATCH")]
    assert "activate" not in for_site(BODY, "narval").text  # its jobs keep the submitting PATH


def test_a_guide_silent_on_the_gpu_form_gets_slurms_per_node_form():
    import dataclasses

    silent = dataclasses.replace(load_profile("narval"), gpu_request="")
    assert "#SBATCH --gpus-per-node=2" in for_site(BODY, silent, gpus_per_node_wanted=2).text.splitlines()


def test_a_site_without_gpus_runs_the_processes_on_cpus():
    script = for_site(BODY, "hpc2n", gpus_per_node_wanted=2)
    assert (script.gpus_per_node, script.per_node) == (0, 2)
    assert "#SBATCH --account=demo" in script.text and "gpu" not in script.text


def test_the_project_comes_from_hpcnb_project(monkeypatch):
    monkeypatch.setenv("HPCNB_PROJECT", "rrg-smith")
    assert "#SBATCH --account=def-rrg-smith" in for_site(BODY, "narval").text
    assert "#SBATCH --comment=rrg-smith" in for_site(BODY, "stability").text


def test_a_directive_the_script_gives_is_not_added_again():
    script = for_site("#!/bin/bash\n#SBATCH --partition=short\n#SBATCH --account=x\nsrun true\n", "narval")
    assert script.added == ()
    assert script.text.count("--partition") == 1 and script.text.count("--account") == 1


def test_partitions_follow_the_kind_of_job():
    stability = load_profile("stability")
    assert partition_for(stability, gpus=True).name == "gpu"
    assert partition_for(stability, gpus=False).name == "cpu"  # not the GPU nodes, not spot
    assert partition_for(load_profile("local"), gpus=True).name == "debug"
    assert "--partition" not in for_site(BODY, "narval").text  # its guide names none: Slurm picks
    assert gpus_per_node(load_profile("local"), 8) == 2


def test_the_magic_writes_the_file_and_says_what_the_site_added(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HPCNB_PROFILE", "narval")
    jobscript_magic("job.sh --gpus-per-node 2", BODY)
    assert "#SBATCH --gres=gpu:2" in (tmp_path / "job.sh").read_text()
    assert capsys.readouterr().out == ("Writing job.sh (site narval added: --account=def-demo; "
                                       "--gres=gpu:2)\n")
    with pytest.raises(ValueError, match="Use: %%jobscript FILE"):
        jobscript_magic("job.sh --gpus 2", BODY)


def test_a_script_with_one_sites_request_is_wrong_at_another():
    """What the lessons wrote before: the local Slurm's request, hard-coded; lint fails it at Piz Daint."""
    hard = "#!/bin/bash\n#SBATCH --partition=debug\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n" \
           "#SBATCH --gres=gpu:2\n#SBATCH --time=00:05:00\nsrun true\n"
    codes = {f.code for f in lint_text(hard, "pizdaint") if f.severity == ERROR}
    assert {"SL301", "SL303", "SL304", "SL305"} <= codes
    assert not [f for f in lint_text(for_site(hard.replace("#SBATCH --partition=debug\n", "").replace(
        "#SBATCH --gres=gpu:2\n", ""), "pizdaint", gpus_per_node_wanted=2).text, "pizdaint")
        if f.severity == ERROR]


def test_submit_options_and_processes_follow_the_site(monkeypatch):
    assert gpu_options(2, 2, "local") == {"gres": "gpu:2"}
    assert gpu_options(2, 2, "alvis") == {"gpus_per_node": "V100:2"}
    assert gpu_options(2, 2, "stability") == {"gpus": "4"}
    assert gpu_options(2, 2, "pizdaint") == {} == gpu_options(2, 2, "hpc2n") == gpu_options(0, 2, "local")
    monkeypatch.setenv("HPCNB_PROFILE", "pizdaint")
    assert processes_per_node(2) == 1
    monkeypatch.setenv("HPCNB_PROFILE", "hpc2n")
    assert processes_per_node(2) == 2


def test_a_workshops_reservation_reaches_every_script_and_command(monkeypatch):
    """HPCNB_RESERVATION (INSTRUCTORS.md): every script a lesson writes asks for it, and the kernel's
    sbatch, salloc and srun get it through Slurm's own input variables (hpcnb.setup())."""
    monkeypatch.delenv("HPCNB_RESERVATION", raising=False)
    assert "--reservation" not in for_site("#!/bin/bash\nsrun hostname\n", "narval").text
    assert not any("RESERVATION" in name for name in site_environment("narval"))
    monkeypatch.setenv("HPCNB_RESERVATION", "hpc-course")
    for profile in list_profiles():
        script = for_site("#!/bin/bash\n#SBATCH --nodes=2\nsrun hostname\n", profile)
        assert "#SBATCH --reservation=hpc-course" in script.added, (profile, script.text)
        assert not [f for f in lint_text(script.text, profile) if f.severity == ERROR]
    assert {k: v for k, v in site_environment("local").items() if "RESERVATION" in k} == {
        "SBATCH_RESERVATION": "hpc-course", "SALLOC_RESERVATION": "hpc-course", "SLURM_RESERVATION": "hpc-course"}
    given = for_site("#!/bin/bash\n#SBATCH --reservation=other\nsrun hostname\n", "local")
    assert "--reservation=hpc-course" not in given.text  # the script's own is kept


def test_the_site_environment_gives_every_job_its_project_and_constraint(tmp_path):
    """hpcnb.setup() exports these, so that `!sbatch --wrap` and `!salloc` in a lesson are accepted
    at a site that wants a project on every job; the local Slurm reads them as Slurm does."""
    assert site_environment("local") == {} == site_environment("stability")  # --comment: no variable
    assert site_environment("narval", "rrg-x") == {"SBATCH_ACCOUNT": "def-rrg-x", "SALLOC_ACCOUNT": "def-rrg-x",
                                                   "SLURM_ACCOUNT": "def-rrg-x"}
    assert site_environment("pizdaint")["SLURM_CONSTRAINT"] == "gpu"
    env = {**os.environ, "HPCNB_STATE_DIR": str(tmp_path / "state"), "HPCNB_PROFILE": "narval"}

    def sbatch(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sbatch", "--test-only", "--wrap", "true"], capture_output=True, text=True,
                              env={**env, **extra}, cwd=tmp_path, timeout=60)
    try:
        refused = sbatch()
        assert refused.returncode == 1 and "--account" in refused.stderr
        assert sbatch(**site_environment("narval")).returncode == 0
        assert sbatch(SALLOC_ACCOUNT="def-x").returncode == 1  # salloc's variable is not sbatch's
    finally:
        subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "stop"], env=env, capture_output=True,
                       timeout=60)
