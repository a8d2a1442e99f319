"""The SLURM_* environment of every layer a job script or framework can see.

Batch shells, srun tasks (inside a batch job, inside salloc, and stand-alone), salloc's own shell
and array tasks, with and without -c, --ntasks-per-node, --gres=gpu:1 and --gpus-per-node=1.
Variable names must be equal; values equal after normalising job ids, pids, ports, paths,
SLURM_CONF and the submit host. Intentional differences: the local profile's SLURM_TMPDIR, and the
local Slurm's own settings, which its jobs keep whatever --export says (HPCNB_STATE_DIR, ...).
"""
from __future__ import annotations

import pytest

from hpcnb.localslurm.envvars import LOCAL_SETTINGS

from .harness import Norm, Side, compare, intentional, local_settings, on_both, parse_env0


TASK = "bash -c 'env -0 > task_${SLURM_PROCID}.env0'"
BATCH = "#!/bin/bash\nenv -0 > batch${SLURM_ARRAY_TASK_ID:+_$SLURM_ARRAY_TASK_ID}.env0\n"


def capture(side: Side, case: str, mode: str, args: list[str], step: str | None = "") -> dict[str, dict[str, str]]:
    """Run the case on one side; returns {layer file stem: normalised environment}."""
    wd = side.workdir(case)
    if mode != "sbatch":  # (sbatch waits itself) so that the job gets the same nodes on both sides
        side.wait_no_completing(wd)
    if mode == "sbatch":
        script = BATCH + (f"srun {step} {TASK}\n" if step is not None else "")
        job_id = side.sbatch(args, wd, script)
        side.wait_done(job_id, wd)
    elif mode == "salloc":
        inner = "env -0 > shell.env0" + (f"; srun {step} {TASK}" if step is not None else "")
        side.ok(["salloc", *args, "bash", "-c", inner], wd)
    else:
        side.ok(["srun", *args, "bash", "-c", "env -0 > task_${SLURM_PROCID}.env0"], wd)
    raw = {f.stem: parse_env0(f.read_bytes()) for f in sorted(wd.glob("*.env0"))}
    assert raw, f"{side.name}: no environment captured in {wd}"
    norm = Norm(side, [wd])
    for env in raw.values():
        for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID"):
            if env.get(key, "").isdigit():
                norm.add_ids(int(env[key]))
    return {name: norm.env(env) for name, env in raw.items()}


def check_layers(case: str, local: dict[str, dict], real: dict[str, dict], settings: list[str]) -> None:
    """Each layer's variables equal; ``settings``: the local Slurm's own settings the local side
    was given, which its jobs keep whatever --export says (INTENTIONAL["local_settings"])."""
    assert sorted(local) == sorted(real), f"{case}: layers differ: local {sorted(local)}, real {sorted(real)}"
    errors = []
    for layer in sorted(real):
        loc, rea = dict(local[layer]), real[layer]
        kept = local_settings(loc, rea)
        if kept:
            intentional(f"env: {case} [{layer}] local Slurm settings", "local_settings", kept,
                        [name for name in settings if name in rea], settings, [])
        # intentional: the local site profile's node-local scratch (see INTENTIONAL["slurm_tmpdir"])
        if layer != "shell":
            assert loc.pop("SLURM_TMPDIR", None), f"{case}/{layer}: the local Slurm gave no SLURM_TMPDIR"
        assert "SLURM_TMPDIR" not in rea
        try:
            compare(f"env: {case} [{layer}]", loc, rea)
        except AssertionError as err:
            errors.append(str(err))
    assert not errors, "\n\n".join(errors)


# name: (mode, options, srun options inside the allocation (None: no step))
CASES = {
    "sbatch-plain": ("sbatch", [], ""),
    "sbatch-N2-tpn2": ("sbatch", ["-N2", "--ntasks-per-node=2"], ""),
    "sbatch-n2-c1-step-c1": ("sbatch", ["-n2"], "-n1"),
    "sbatch-c2": ("sbatch", ["-c2"], ""),
    "sbatch-n1-c2-step-c1": ("sbatch", ["-n1", "-c2"], "-c1"),
    "sbatch-gres-gpu1": ("sbatch", ["--gres=gpu:1"], ""),
    "sbatch-N2-gpus-per-node1": ("sbatch", ["-N2", "--gpus-per-node=1"], ""),
    "sbatch-mem100M": ("sbatch", ["--mem=100M", "-n2"], "-n2"),
    "sbatch-array": ("sbatch", ["--array=1-3"], None),
    "sbatch-N2-n2-step-N1": ("sbatch", ["-N2", "-n2"], "-N1 -n1"),
    "sbatch-gres-gpu2-step-n2": ("sbatch", ["--gres=gpu:2", "-n2"], "-n2"),
    "sbatch-mem-per-cpu": ("sbatch", ["--mem-per-cpu=200", "-n1"], ""),
    "sbatch-export-none": ("sbatch", ["--export=NONE"], None),
    # any --export but ALL: the login environment under the job's (SLURM_GET_USER_ENV=1); SLURM_EXPORT_ENV
    # is then the --export of the job's sruns (PATH kept here, so that the step finds bash)
    "sbatch-export-names-step": ("sbatch", ["--export=PATH,LANG"], ""),
    "sbatch-export-all-names": ("sbatch", ["--export=ALL,EXTRA=1"], None),
    "sbatch-get-user-env": ("sbatch", ["--get-user-env"], None),
    "sbatch-job-name-time": ("sbatch", ["-J", "named", "-t", "5", "-p", "short"], ""),
    "salloc-N2-n2": ("salloc", ["-N2", "-n2"], ""),
    "salloc-n1-c2": ("salloc", ["-n1", "-c2"], ""),
    "salloc-gres-gpu1": ("salloc", ["--gres=gpu:1"], ""),
    "salloc-mem100M": ("salloc", ["--mem=100M", "-n2"], ""),
    "salloc-mem-per-cpu": ("salloc", ["--mem-per-cpu=100", "-N2", "--ntasks-per-node=1"], ""),
    "salloc-N2-gpus-per-node1": ("salloc", ["-N2", "--gpus-per-node=1"], ""),
    "srun-n3": ("srun", ["-n3"], None),
    "srun-n2-c2": ("srun", ["-n2", "-c2"], None),
    "srun-N2-tpn1": ("srun", ["-N2", "--ntasks-per-node=1"], None),
    "srun-gpus-per-node1": ("srun", ["--gpus-per-node=1", "-n1"], None),
    "srun-mem100M": ("srun", ["--mem=100M", "-n1"], None),
    "srun-mem-n3": ("srun", ["--mem-per-cpu=100", "-n3"], None),
    "srun-gres-gpu2-c2": ("srun", ["--gres=gpu:2", "-c2"], None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_env(sides, case: str) -> None:
    mode, args, step = CASES[case]
    got = on_both(sides, lambda side: capture(side, f"env-{case}", mode, args, step))
    check_layers(case, got["local"], got["real"], sorted(k for k in LOCAL_SETTINGS if k in sides["local"].env))


def test_slurm_tmpdir_is_local_only(sides) -> None:
    """The one intentional variable: recorded once for the report."""
    got = on_both(sides, lambda side: capture(side, "env-tmpdir", "sbatch", [], None))
    loc, rea = got["local"]["batch"], got["real"]["batch"]
    intentional("env: SLURM_TMPDIR in the batch shell", "slurm_tmpdir", "SLURM_TMPDIR" in loc,
                "SLURM_TMPDIR" in rea, True, False)


# name: (command line, input environment variables, the script's own #SBATCH partition or None)
INPUT_CASES = {
    "sbatch-env-over-script": (["sbatch"], {"SBATCH_PARTITION": "short"}, "debug"),
    "sbatch-command-line-over-env": (["sbatch", "-p", "debug"], {"SBATCH_PARTITION": "short"}, None),
    "salloc-env": (["salloc", "-n1"], {"SALLOC_PARTITION": "short"}, None),
    "srun-env": (["srun", "-n1"], {"SLURM_PARTITION": "short"}, None),
}
SHOW_PARTITION = "echo $SLURM_JOB_PARTITION > partition.txt"


@pytest.mark.parametrize("case", list(INPUT_CASES))
def test_input_environment_variables(sides, case: str) -> None:
    """sbatch/salloc/srun read SBATCH_*/SALLOC_*/SLURM_* (hpcnb.setup() sets a site's project that
    way): over the script's #SBATCH line, under the command line."""
    argv, env, in_script = INPUT_CASES[case]

    def run(side: Side) -> str:
        wd = side.workdir(f"input-{case}")
        if argv[0] == "sbatch":
            script = "#!/bin/bash\n" + (f"#SBATCH --partition={in_script}\n" if in_script else "") + SHOW_PARTITION
            side.wait_done(side.sbatch(argv[1:], wd, script, env=env), wd)
        else:
            side.wait_no_completing(wd)
            side.ok([*argv, "bash", "-c", SHOW_PARTITION], wd, env=env)
        return (wd / "partition.txt").read_text()

    got = on_both(sides, run)
    assert got["local"] == got["real"], got
