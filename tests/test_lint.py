"""The job-script linter: each check fires on a real mistake, at the right line, and not on a clean script.

The GUIDE_* scripts are copied from the course's source guides (mistakes kept).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hpcnb.cli import main as cli_main
from hpcnb.lint import CODES, Finding, lint_file, lint_text
from hpcnb.sites import GpuType, NodeGroup, Partition, Profile

# Digital Research Alliance guide: a misspelled directive and a log name without %j.
GUIDE_ALLIANCE = """#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntaks-per-node=4
#SBATCH --cpus-per-task=4
#SBATCH --time=1:00:00      # max 24:00:00
#SBATCH --mem=118GB         # max memory/node
#SBATCH --account=def-ncoops_gpu # account name, use command sshare -U to see what account groups you hae access to
#SBATCH --partition=xxx_usr_prod # partition name e.g., gll-usr-gpupro: compute nodes with gp-gpus
#SBATCH --gres=gpu:kepler:N # (N=1,2)
#SBATCH --qos=<qos_name> # qos name
#SBATCH --job-name=myjob # job name
#SBATCH --error=errjobfile-%J.err #stderr file
#SBATCH --output=outjobfile-J.out #stdout file
"""

# Stability guide: --cpus-per-task=48 but srun is not given it (Slurm >= 22.05).
GUIDE_STABILITY = """#!/bin/bash
#SBATCH --partition=gpu
#SBATCH --job-name=idle-translation
#SBATCH -t 7-00:00  # time limit: (D-HH:MM)
#SBATCH --output=LOGS/%x\\_%j.out
#SBATCH --cpus-per-task=48
#SBATCH --nodes=107
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --requeue
#SBATCH --comment laion

module load openmpi

export NCCL_PROTO=simple
export FI_PROVIDER=efa

source my-project-env/bin/activate && srun **--comment Laion** python3 translate_data.py
"""

# HPC2N/Alvis workshop: a line of Python quoting before the directives turns them all off.
GUIDE_HPC2N = """#!/bin/bash
''' Job Script Example file: job.sh '''

#SBATCH --account NAISSXXXX-YY-ZZZZ     # The name of the project you are running in, mandatory.
#SBATCH --job-name my_job_name          # Give a sensible name for the job
#SBATCH --time=00:15:00                 # Request runtime for the job (HHH:MM:SS)
#SBATCH --ntasks 2                      # Number of workers (recommended 1 worker per GPU)
#SBATCH --nodes 2                       # Number of nodes
#SBATCH --gpus-per-node=V100:1          # Number of GPU cards needed per node

srun python program.py <ARGS>           # Run program on allocated resources
"""

# CSCS Piz Daint guide: srun continued over lines, -c not passed on.
GUIDE_DAINT = """#!/bin/bash -l

#SBATCH --job-name=my_cscs_job
#SBATCH --time=00:10:00
#SBATCH --nodes=2
#SBATCH --ntasks-per-core=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=12
#SBATCH --constraint=gpu
#SBATCH --account=<project>

module load daint-gpu
module load PyTorch

export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK

srun \\
python -u your_code.py  \\
--epochs 90 \\
--model resnet50 \\
> ${SLURM_JOBID}.out 2> ${SLURM_JOBID}.err
"""

# A clean two-node DDP script: nothing to report.
CLEAN_DDP = """#!/bin/bash
#SBATCH --job-name=ddp
#SBATCH --account=proj
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
#SBATCH --cpus-per-task=4
#SBATCH --time=00:30:00
#SBATCH --output=logs/%x_%j.out
#SBATCH --error=logs/%x_%j.err

export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((16000 + SLURM_JOB_ID % 16000))
python -m venv "$SLURM_TMPDIR/env"
srun python train.py --data /scratch/$USER/datasets
"""


def _site(**over) -> Profile:
    """A small stand-in site built from hpcnb.sites' dataclasses."""
    fields = dict(
        name="testsite", title="Test site", source="tests", login_hosts=("login",), storage=(),
        partitions=(Partition("gpu", "1-00:00:00", default=True), Partition("short", "00:10:00")),
        nodes=(NodeGroup("node[1-2]", cpus=8, memory_mb=8000, gpus=2),),
        gpu_types=(), gpu_request="--gpus-per-node=1", account_directive="--account=<project>",
        account_required=True, required_directives=(), home_forbidden_for=("data", "venv", "cache"),
        rules=(), modules={}, jupyter="", slurm_tmpdir=True,
    )
    fields.update(over)
    return Profile(**fields)


def codes(findings: list[Finding]) -> list[tuple[int, str]]:
    return [(f.lineno, f.code) for f in findings]


# ------------------------------------------------------------------ clean


def test_clean_ddp_script_has_no_findings():
    assert lint_text(CLEAN_DDP) == []


def test_clean_ddp_script_passes_the_site_checks():
    assert lint_text(CLEAN_DDP, _site()) == []


# ------------------------------------------------------------------ guide scripts


def test_guide_alliance_misspelling_and_log_name():
    found = lint_text(GUIDE_ALLIANCE)
    assert codes(found) == [(3, "SL101"), (8, "SL111"), (9, "SL111"), (10, "SL111"), (13, "SL107")]
    typo, log = found[0], found[-1]
    assert typo.severity == "error"
    assert typo.message == "sbatch: unrecognized option '--ntaks-per-node=4'"
    assert typo.fix == "use --ntasks-per-node"
    assert "%j" in log.message and "literal letter" in log.message and log.severity == "warning"


def test_guide_stability_srun_without_cpus():
    found = lint_text(GUIDE_STABILITY)
    assert codes(found) == [(18, "SL202"), (18, "SL205")]  # and the bold '**' pasted around --comment
    assert "SRUN_CPUS_PER_TASK" in found[0].fix


def test_guide_hpc2n_directives_after_a_command():
    found = lint_text(GUIDE_HPC2N)
    assert (1, "SL108") in codes(found)  # nothing honoured, so no time limit either
    ignored = [f.lineno for f in found if f.code == "SL104"]
    assert ignored == [4, 5, 6, 7, 8, 9]
    assert all(f.severity == "error" for f in found if f.code == "SL104")


def test_guide_daint_continued_srun_line():
    assert codes(lint_text(GUIDE_DAINT)) == [(10, "SL111"), (17, "SL202")]


# ------------------------------------------------------------------ each check


def _script(directives: str, body: str = "srun true\n") -> str:
    return "#!/bin/bash\n" + directives + "\n" + body


@pytest.mark.parametrize(
    "directive, code",
    [
        ("#SBATCH --partiton=gpu", "SL101"),
        ("#SBATCH -z", "SL101"),
        ("#SBATCH --me=4G", "SL102"),
        ("#SBATCH --parsable=yes", "SL103"),
        ("#SBATCH -J my job", "SL103"),
        ("#SBATCH --part=gpu", "SL110"),
    ],
)
def test_directive_problems(directive, code):
    found = lint_text(_script("#SBATCH --time=5\n" + directive))
    assert codes(found) == [(3, code)]


def test_missing_argument_at_end():
    assert codes(lint_text(_script("#SBATCH --time=5\n#SBATCH --job-name"))) == [(3, "SL103")]


def test_ambiguous_lists_possibilities():
    (f,) = lint_text(_script("#SBATCH --time=5\n#SBATCH --me=4G"))
    assert "--mem, --mem-bind, --mem-per-cpu, --mem-per-gpu" in f.message


def test_directive_after_command():
    text = "#!/bin/bash\n#SBATCH --time=5\nmodule load x\n#SBATCH --mem=4G\nsrun true\n"
    (f,) = lint_text(text)
    assert (f.lineno, f.code) == (4, "SL104")
    assert "line 3" in f.message and "--mem=4G" in f.message


def test_indented_or_lowercase_directive():
    found = lint_text("#!/bin/bash\n#SBATCH --time=5\n  #SBATCH --mem=4G\n#sbatch --qos=x\n# SBATCH -N 2\ntrue\n")
    assert codes(found) == [(3, "SL105"), (4, "SL105"), (5, "SL105")]


def test_script_form():
    assert codes(lint_text("echo hi\n")) == [(1, "SL106"), (1, "SL108")]
    dos = lint_text("#!/bin/bash\r\n#SBATCH --time=5\r\ntrue\r\n")
    assert [f.code for f in dos] == ["SL106"]
    quote = lint_text('#!/bin/bash\n#SBATCH --time=5\n#SBATCH --comment="oops\ntrue\n')
    assert codes(quote) == [(3, "SL106")] and "Unmatched" in quote[0].message


@pytest.mark.parametrize(
    "directives, line",
    [
        ("#SBATCH --output=train.out", 3),
        ("#SBATCH --error=logs/err-%x.txt", 3),
        ("#SBATCH --output=run-J.out", 3),
        ("#SBATCH --output=%%j.out", 3),  # %% is a literal percent sign
        ("#SBATCH --array=1-4\n#SBATCH --output=task-%A.out", 4),  # all tasks share one file
        ("#SBATCH --array=1-4\n#SBATCH --output=task.out", 4),
    ],
)
def test_log_names_without_job_id(directives, line):
    assert codes(lint_text(_script("#SBATCH --time=5\n" + directives))) == [(line, "SL107")]


@pytest.mark.parametrize(
    "directives",
    [
        "#SBATCH --output=%j.out", "#SBATCH --output=o-%J.out", "#SBATCH --output=x-%8j.log",
        "#SBATCH --array=0-9\n#SBATCH --output=r-%A_%a.out", "#SBATCH --array=0-9\n#SBATCH --output=r-%j.out",
        "#SBATCH --output=/dev/null",
    ],
)
def test_log_names_ok(directives):
    assert lint_text(_script("#SBATCH --time=5\n" + directives)) == []


def test_no_time_and_invalid_time():
    assert codes(lint_text(_script("#SBATCH -N 1"))) == [(2, "SL108")]
    (bad,) = lint_text(_script("#SBATCH --time=abc"))
    assert (bad.lineno, bad.code, bad.severity) == (2, "SL109", "error")
    assert "Invalid --time specification" in bad.message


@pytest.mark.parametrize("directive", ["#SBATCH --ntasks=4", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2"])
def test_multi_task_without_srun(directive):
    found = lint_text(_script("#SBATCH --time=5\n" + directive, "python train.py\n"))
    assert codes(found) == [(3, "SL201")]


@pytest.mark.parametrize("launcher", ["torchrun --nproc_per_node=4 train.py", "horovodrun -np 4 python t.py"])
def test_multi_task_with_bare_launcher(launcher):
    found = lint_text(_script("#SBATCH --time=5\n#SBATCH --nodes=2", f"echo start\n{launcher}\n"))
    assert codes(found) == [(5, "SL201")]
    assert launcher.split()[0] in found[0].message


@pytest.mark.parametrize(
    "body", ["srun python train.py\n", "mpirun ./a.out\n", "time srun torchrun train.py\n",
             "cd x && srun -n 4 python t.py\n"],
)
def test_multi_task_with_launcher_is_fine(body):
    assert lint_text(_script("#SBATCH --time=5\n#SBATCH --ntasks=4", body)) == []


def test_single_task_needs_no_srun():
    assert lint_text(_script("#SBATCH --time=5\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1", "python t.py\n")) == []


def test_srun_cpus_per_task():
    d = "#SBATCH --time=5\n#SBATCH --cpus-per-task=8"
    assert codes(lint_text(_script(d, "echo a\nsrun python t.py\n"))) == [(5, "SL202")]
    assert lint_text(_script(d, "srun -c $SLURM_CPUS_PER_TASK python t.py\n")) == []
    assert lint_text(_script(d, "srun --cpus-per-task=8 python t.py\n")) == []
    assert lint_text(_script(d, "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK\nsrun python t.py\n")) == []
    # an export after the srun line does not help that line
    late = lint_text(_script(d, "srun python t.py\nexport SRUN_CPUS_PER_TASK=8\n"))
    assert codes(late) == [(4, "SL202")]
    # cpus-per-task=1 is srun's default anyway
    assert lint_text(_script("#SBATCH --time=5\n#SBATCH -c 1", "srun python t.py\n")) == []


@pytest.mark.parametrize(
    "line", ["export MASTER_PORT=12345", "MASTER_PORT='29500' srun python t.py",
             "srun torchrun --master_port=29500 t.py", "srun torchrun --master-port 29500 t.py"],
)
def test_fixed_master_port(line):
    found = lint_text(_script("#SBATCH --time=5", f"{line}\n"))
    assert [(f.lineno, f.code) for f in found] == [(3, "SL203")]
    assert "SLURM_JOB_ID" in found[0].fix


@pytest.mark.parametrize(
    "line", ["export MASTER_ADDR=localhost; srun t.py", "srun torchrun --rdzv-endpoint=localhost:$PORT t.py",
             "srun torchrun --rdzv_endpoint 127.0.0.1:$PORT t.py", "srun torchrun --master-addr=localhost t.py"],
)
def test_rendezvous_at_localhost_on_several_nodes(line):
    """Exercise 8.3's mistake: each node waits at its own localhost (a real cluster hangs till the timeout)."""
    found = lint_text(_script("#SBATCH --time=5\n#SBATCH --nodes=2", f"{line}\n"))
    assert [(f.lineno, f.code) for f in found] == [(4, "SL206")], found
    assert "SLURM_JOB_NODELIST" in found[0].fix
    one_node = lint_text(_script("#SBATCH --time=5\n#SBATCH --nodes=1", f"{line}\n"))
    assert "SL206" not in [f.code for f in one_node]
    named = lint_text(_script("#SBATCH --time=5\n#SBATCH --nodes=2", line.replace("localhost", "$MASTER_ADDR")
                              .replace("127.0.0.1", "$MASTER_ADDR") + "\n"))
    assert "SL206" not in [f.code for f in named]


ALPS_JOB = ("#!/bin/bash\n#SBATCH --account=g123\n#SBATCH --nodes={nodes}\n#SBATCH --time=00:30:00\n"
            "srun --environment={edf} python train.py\n")
HOOK = '[annotations]\ncom.hooks.aws_ofi_nccl.enabled = "true"\ncom.hooks.aws_ofi_nccl.variant = "cuda-dl"\n'


@pytest.mark.parametrize("edf_text, codes", [
    ('image = "nvcr.io#nvidia/pytorch:25.11-py3"\n', ["SL207"]),                   # no hook: TCP between nodes
    ('image = "nvcr.io#nvidia/pytorch:25.11-py3"\n' + HOOK, []),
    ('image = "x"\n[annotations]\n"com.hooks.aws_ofi_nccl.enabled" = "true"\n', []),  # a quoted key
    ('image = "x"\n[annotations]\ncom.hooks.aws_ofi_nccl.enabled = "false"\n', ["SL207"]),
])
def test_an_alps_container_job_on_several_nodes_needs_the_nccl_hook(tmp_path: Path, edf_text: str, codes) -> None:
    (tmp_path / "pytorch.toml").write_text(edf_text)
    for edf in ("./pytorch.toml", str(tmp_path / "pytorch.toml")):
        found = lint_text(ALPS_JOB.format(nodes=2, edf=edf), "cscs-alps", tmp_path)
        assert [f.code for f in found] == codes, found
        assert all(f.severity == "error" and "Slingshot" in f.message for f in found)
    assert lint_text(ALPS_JOB.format(nodes=1, edf="./pytorch.toml"), "cscs-alps", tmp_path) == []


def test_an_alps_environment_by_name_is_read_from_edf_path_or_said_unknown(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EDF_PATH", str(tmp_path / "edfs"))
    (tmp_path / "edfs").mkdir()
    (found,) = lint_text(ALPS_JOB.format(nodes=2, edf="pytorch"), "cscs-alps", tmp_path)
    assert (found.code, found.severity) == ("SL207", "warning") and "cannot be read" in found.message
    (tmp_path / "edfs" / "pytorch.toml").write_text('image = "x"\n' + HOOK)
    assert lint_text(ALPS_JOB.format(nodes=2, edf="pytorch"), "cscs-alps", tmp_path) == []


def test_an_alps_uenv_job_on_several_nodes_sets_nccl_net() -> None:
    script = ALPS_JOB.format(nodes=2, edf="x").replace("--environment=x", "--uenv=prgenv-gnu/24.11:v1 --view=default")
    assert [f.code for f in lint_text(script, "cscs-alps")] == ["SL208"]
    fixed = script.replace("srun", 'export NCCL_NET="AWS Libfabric"\nsrun')
    assert lint_text(fixed, "cscs-alps") == []
    assert lint_text(script.replace("srun", "srun -N 1"), "cscs-alps") == []


# ------------------------------------------------------------------ site profile


def test_unknown_partition():
    found = lint_text(CLEAN_DDP.replace("--partition=gpu", "--partition=a100"), _site())
    assert codes(found) == [(4, "SL301")]
    assert "gpu, short" in found[0].fix


def test_time_above_partition_max():
    found = lint_text(CLEAN_DDP.replace("--partition=gpu", "--partition=short"), _site())
    assert codes(found) == [(9, "SL302")]
    assert "00:10:00" in found[0].message


def test_time_checked_against_default_partition():
    text = CLEAN_DDP.replace("#SBATCH --partition=gpu\n", "").replace("00:30:00", "2-00:00:00")
    assert codes(lint_text(text, _site())) == [(8, "SL302")]


def test_too_many_gpus_per_node():
    found = lint_text(CLEAN_DDP.replace("--gpus-per-node=2", "--gpus-per-node=4"), _site())
    assert codes(found) == [(7, "SL303")]
    gres = CLEAN_DDP.replace("--gpus-per-node=2", "--gres=gpu:a100:8")
    assert codes(lint_text(gres, _site())) == [(7, "SL303")]
    # the real GPU count per node wins over the scaled-down emulation nodes
    real = _site(gpu_types=(GpuType("A100", 80.0, 8),))
    assert lint_text(gres, real) == []
    # a site whose GPUs per node are unknown is not judged
    unknown = _site(gpu_types=(GpuType("V100", 32.0, None),))
    assert lint_text(CLEAN_DDP.replace("--gpus-per-node=2", "--gpus-per-node=4"), unknown) == []


def test_missing_account():
    text = CLEAN_DDP.replace("#SBATCH --account=proj\n", "")
    found = lint_text(text, _site())
    assert codes(found) == [(10, "SL304")]
    assert found[0].fix == "add #SBATCH --account=<project>"
    assert lint_text(text, _site(account_required=False)) == []
    # a site that takes the project through --comment
    comment_site = _site(account_directive="--comment=<project>")
    assert [f.code for f in lint_text(CLEAN_DDP, comment_site)] == ["SL304"]
    assert lint_text(CLEAN_DDP, replace(comment_site, account_required=False)) == []


def test_required_directives():
    site = _site(required_directives=("--constraint=gpu",))
    (f,) = lint_text(CLEAN_DDP, site)
    assert (f.code, f.fix) == ("SL305", "add #SBATCH --constraint=gpu")
    assert lint_text(CLEAN_DDP.replace("#SBATCH --time", "#SBATCH -C gpu\n#SBATCH --time"), site) == []
    (wrong,) = lint_text(CLEAN_DDP.replace("#SBATCH --time", "#SBATCH --constraint=mc\n#SBATCH --time"), site)
    assert (wrong.lineno, wrong.code) == (9, "SL305")


@pytest.mark.parametrize(
    "line, kind",
    [
        ("python -m venv ~/env", "venv"),
        ("python3 -m venv --system-site-packages /home/alice/env", "venv"),
        ("virtualenv $HOME/envs/dl", "venv"),
        ("source ~/env/bin/activate", "venv"),
        ("export HF_HOME=$HOME/hf", "cache"),
        ("export XDG_CACHE_HOME=~/.cache", "cache"),
        ("srun python train.py --data ~/datasets", "data"),
        ("srun python train.py --data-dir=${HOME}/imagenet", "data"),
        ("cp -r ~/datasets/cifar $SLURM_TMPDIR/", "data"),
    ],
)
def test_home_forbidden(line, kind):
    text = CLEAN_DDP + line + "\n"
    found = lint_text(text, _site())
    assert codes(found) == [(18, "SL306")]
    assert kind in found[0].message
    assert lint_text(text, _site(home_forbidden_for=tuple(k for k in ("data", "venv", "cache") if k != kind))) == []


def test_profile_by_name():
    assert lint_text(CLEAN_DDP.replace("--partition=gpu", "--partition=debug"), "local") == []


# ------------------------------------------------------------------ CLI
def main(argv: list[str]) -> int:
    """``hpcnb lint ARGV`` in this process."""
    return cli_main(["lint", *argv])



def test_cli_output_and_exit_codes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where it would be submitted: its logs/ folder is there
    (tmp_path / "logs").mkdir()
    bad = tmp_path / "bad.sh"
    bad.write_text(GUIDE_ALLIANCE)
    good = tmp_path / "good.sh"
    good.write_text(CLEAN_DDP)
    assert main([str(good)]) == 0
    assert capsys.readouterr().out == ""
    assert main([str(bad), str(good)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"{bad}:3: SL101 sbatch: unrecognized option '--ntaks-per-node=4' "
                      "(fix: use --ntasks-per-node)")
    assert out[-1].startswith(f"{bad}:13: SL107 ")
    warn_only = tmp_path / "warn.sh"
    warn_only.write_text(_script("#SBATCH -N 1"))
    assert main([str(warn_only)]) == 0


def test_cli_profile_and_usage_errors(tmp_path, capsys):
    script = tmp_path / "job.sh"
    script.write_text(CLEAN_DDP)
    assert main(["--profile", "local", str(script)]) == 1  # partition 'gpu' is not a local partition
    assert "SL301" in capsys.readouterr().out
    assert main(["--profile=no-such-site", str(script)]) == 2
    assert main([]) == 2
    assert main([str(tmp_path / "missing.sh")]) == 2
    assert main(["--bogus", str(script)]) == 2


def test_lint_file(tmp_path):
    path = tmp_path / "job.sh"
    path.write_text(GUIDE_DAINT)
    assert codes(lint_file(path)) == [(10, "SL111"), (17, "SL202")]


def test_every_code_has_a_severity():
    assert {sev for sev, _ in CODES.values()} == {"error", "warning"}


# ------------------------------------------------------------------ by Slurm release


@pytest.mark.parametrize("release, fires", [("21.08", False), ("22.05", True), ("23.02", True), ("23.11", False),
                                            ("24.05", False), ("24.11", False), ("25.11", False)])
def test_srun_cpus_per_task_only_where_srun_does_not_inherit(release, fires):
    """SL202 holds for 22.05 to 23.02 alone: srun inherited --cpus-per-task before and does again since 23.11."""
    text = _script("#SBATCH --time=5\n#SBATCH --cpus-per-task=8", "srun python t.py\n")
    found = lint_text(text, _site(slurm_version=release, account_required=False))
    assert codes(found) == ([(4, "SL202")] if fires else [])
    if fires:
        assert found[0].message.startswith(f"testsite runs Slurm {release}, whose srun gives each task 1 CPU")
        assert "22.05 to 23.02" in found[0].message and "23.11 and later" in found[0].message


def test_seed_profile_versions_decide_sl202():
    """A 22.05 profile gets SL202 for a plain srun after -c; the local profile (24.11) does not."""
    from hpcnb.sites import load_profile

    text = _script("#SBATCH --time=5\n#SBATCH -c 2", "srun python t.py\n")
    local = load_profile("local")
    assert local.slurm_version == "24.11"
    assert lint_text(text, local) == []
    assert codes(lint_text(text, replace(local, slurm_version="22.05"))) == [(4, "SL202")]
    assert codes(lint_text(text)) == [(4, "SL202")], "without a profile the release is unknown: warn"


@pytest.mark.parametrize("option, release, expect", [
    ("--tres-per-task=cpu=2", "22.05", "error"), ("--tres-per-task=cpu=2", "23.02", None),
    ("--tres-bind=gres/gpu:closest", "23.02", "error"), ("--tres-bind=gres/gpu:closest", "24.11", None),
    ("--oom-kill-step", "24.05", "error"), ("--oom-kill-step", "24.11", None),
    ("--power=level", "23.11", None), ("--power=level", "24.05", "error"),
])
def test_options_added_or_dropped_after_2205(option, release, expect):
    """An option only some releases know is judged at the profile's release, and named with its releases."""
    text = _script(f"#SBATCH --time=5\n#SBATCH {option}")
    found = lint_text(text, _site(slurm_version=release, account_required=False))
    assert [(f.lineno, f.code, f.severity) for f in found] == ([(3, "SL101", expect)] if expect else [])
    if expect:
        assert found[0].message.startswith(f"sbatch: unrecognized option '{option}' (testsite runs Slurm {release}; ")
    (unknown,) = lint_text(text)  # no profile: a warning that names the releases
    assert (unknown.code, unknown.severity) == ("SL101", "warning")
    assert unknown.message.startswith(f"{option.split('=')[0]} exists in Slurm ")


# ------------------------------------------------------------------ the seed guides' own scripts

SEED_SCRIPTS = Path(__file__).parent / "fixtures" / "seed-scripts"

#: fixture -> the rule ids its site's profile (the name before '-') must report, no more, no fewer.
SEED_FINDINGS = {
    "stability-1.sh": {"SL109", "SL113", "SL205"},
    "stability-2.sh": {"SL112", "SL108", "SL304"},
    "stability-3.sh": {"SL108", "SL304"},
    "narval-1.sh": {"SL101", "SL107", "SL111", "SL301"},
    "narval-2.sh": set(),
    "narval-3.sh": set(),
    "alvis-1.sh": {"SL106", "SL104", "SL108", "SL204", "SL304"},
    "alvis-2.sh": {"SL106", "SL108", "SL304"},
    "alvis-3.sh": {"SL106", "SL108", "SL304"},
    "alvis-4.sh": {"SL106", "SL108", "SL304"},
    "pizdaint-1.sh": {"SL111"},
    "pizdaint-2.sh": {"SL111", "SL201"},
}


@pytest.mark.parametrize("name", sorted(SEED_FINDINGS))
def test_seed_guide_scripts_as_a_reader_copies_them(name, tmp_path):
    """What a reader who copies a guide's job script gets wrong on its own site (guide 002, Ulysses, has none).

    ============== =====================================================================================
    stability-1    SL109 ``-t 7-00:00`` ends in a non-breaking space; SL205 ``srun **--comment Laion**``;
                   SL113 ``--output=LOGS/...`` where no LOGS folder was made
    stability-2    SL112 ``#!/bin/bash\\``; SL304 no ``--comment`` project; SL108 no --time
    stability-3    SL304 no ``--comment`` project; SL108 no --time
    narval-1       SL101 ``--ntaks-per-node``; SL107 ``outjobfile-J.out``; SL301 + SL111 ``xxx_usr_prod``;
                   SL111 ``gpu:kepler:N`` and ``--qos=<qos_name>``
    narval-2, -3   fine: the Alliance's venv-per-node and staging recipes (in our frame)
    alvis-1        SL106 no #!, a ``'''`` title line first; SL104 so every #SBATCH is ignored (hence SL108,
                   SL304); SL204 ``srun python program.py <ARGS>`` is a bash syntax error
    alvis-2..4     SL106 the #SBATCH block has no #!; SL304 no --account (mandatory); SL108 no --time
    pizdaint-1     SL111 ``--account=<project>`` (srun inherits -c on Daint's 24.05: no SL202)
    pizdaint-2     SL111 ``--account=<project>``; SL201 horovodrun starts its workers over ssh
    ============== =====================================================================================
    """
    found = lint_file(SEED_SCRIPTS / name, name.split("-")[0], workdir=tmp_path)
    assert {f.code for f in found} == SEED_FINDINGS[name], [f.format(name) for f in found]


def test_every_seed_fixture_has_its_expected_findings():
    assert sorted(p.name for p in SEED_SCRIPTS.glob("*.sh")) == sorted(SEED_FINDINGS)


@pytest.mark.parametrize("directive, placeholder", [
    ("#SBATCH --account=<project>", "<project>"),
    ("#SBATCH --account NAISSXXXX-YY-ZZZZ", "XXXX"),
    ("#SBATCH --partition=xxx_usr_prod", "xxx"),
    ("#SBATCH --gres=gpu:kepler:N", "'N'"),
    ("#SBATCH --gpus-per-node=V100:N", "'N'"),
])
def test_placeholder_in_a_directive(directive, placeholder):
    (f,) = [f for f in lint_text(_script("#SBATCH --time=5\n" + directive)) if f.code == "SL111"]
    assert placeholder in f.message and f.lineno == 3 and f.severity == "error"


@pytest.mark.parametrize("directive", ["#SBATCH --job-name=<demo>", "#SBATCH --gres=gpu:a100:2",
                                       "#SBATCH --account=def-maxxie", "#SBATCH --constraint=gpu"])
def test_no_placeholder(directive):
    assert "SL111" not in {f.code for f in lint_text(_script("#SBATCH --time=5\n" + directive))}


@pytest.mark.parametrize("shebang, fires", [
    ("#!/bin/bash\\", True), ("#!bash", True), ("#!/bin/bash\u00a0-l", True), ("#!", True),
    ("#!/bin/bash -l", False), ("#!/usr/bin/env bash", False), ("#! /bin/sh", False),
])
def test_shebang_interpreter(shebang, fires):
    found = lint_text(shebang + "\n#SBATCH --time=5\ntrue\n")
    assert ("SL112" in {f.code for f in found}) is fires


def test_placeholder_in_a_command():
    text = _script("#SBATCH --time=5", "srun python program.py <ARGS>   # run it\n")
    (f,) = lint_text(text)
    assert (f.code, f.lineno, f.severity) == ("SL204", 3, "error") and "syntax error" in f.message


@pytest.mark.parametrize("line, shown", [
    ("srun **--comment Laion** python3 x.py", "'**--comment'"),
    ("srun \u2013partition=gpu hostname", "'\u2013partition=gpu'"),
    ("srun python\u00a0train.py", "non-breaking space"),
    ("srun hostname &gt; out.txt", "HTML entity"),
    ("echo \u201chello\u201d", "curly quotes"),
])
def test_web_formatting_in_a_command(line, shown):
    (f,) = lint_text(_script("#SBATCH --time=5", line + "\n"))
    assert f.code == "SL205" and shown in f.message and f.lineno == 3


def test_shell_that_looks_like_a_paste_is_fine():
    body = """echo $((2**10)) "<ARGS>" '**bold**' "don\u2019t"
sort <in.txt >out.txt
cat <<EOF > run.py
f(**kwargs)
x = "<ARGS>"
EOF
python - <<'PY'
print(2 ** 3, **opts)
PY
python -c "
g(**kw)
"
ls **/*.py  # **globstar** <ARGS>
"""
    assert lint_text(_script("#SBATCH --time=5", body)) == []


def test_log_file_in_a_missing_folder_is_a_warning(tmp_path: Path) -> None:
    """SL113: --output/--error into a folder that does not exist where the job starts (the submitting
    folder, or --chdir): the job would fail with no output at all, since Slurm never makes the folder."""
    script = "#!/bin/bash\n#SBATCH --time=5\n#SBATCH --output=logs/%x_%j.out\n#SBATCH --error=%j/err\nhostname\n"
    found = [f for f in lint_text(script, workdir=tmp_path) if f.code == "SL113"]
    assert [(f.lineno, f.severity) for f in found] == [(3, "warning")]  # a %-pattern folder is not judged
    assert "'logs' does not exist" in found[0].message and "mkdir -p logs" in found[0].fix
    (tmp_path / "logs").mkdir()
    assert not [f for f in lint_text(script, workdir=tmp_path) if f.code == "SL113"]
    chdir = "#!/bin/bash\n#SBATCH --chdir=run\n#SBATCH --output=logs/%j.out\nhostname\n"
    (tmp_path / "run").mkdir()
    assert [f.code for f in lint_text(chdir, workdir=tmp_path) if f.code == "SL113"] == ["SL113"]
    assert not [f for f in lint_text(script) if f.code == "SL113"], "no folder is judged without a workdir"
