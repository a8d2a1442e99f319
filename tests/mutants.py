"""Planted wrong answers for the graded exercises in solutions/: the data of tests/test_mutants.py.

A :class:`Mutant` is one realistic student mistake in one solution cell (its nbgrader
``grade_id``), written as text edits of that cell: each ``(old, new)`` pair replaces every
``old`` (which must occur) by ``new``. Running the exercise with the edits made must make its
graded test cell fail with ``error``, and the failure must show ``shows`` (part of the failing
assert's line or message), so that the check meant to catch the mistake is the one that did.
``passes=True`` marks a right answer written another way, which the test must accept.

Every exercise needs at least one mutant (tests/test_mutants.py checks it, in ``make test``);
a new or changed exercise brings its own. Run them with ``make test-mutants``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    notebook: str                         # the notebook's number: "01" is solutions/01-*.ipynb, "03b" 03b-*
    cell: str                             # grade_id of the solution cell
    name: str                             # short, for the test id
    mistake: str                          # what the student got wrong
    edits: tuple[tuple[str, str], ...]    # (old, new) replacements in that cell
    shows: str = ""                       # text the test cell's failure must show
    error: str = "AssertionError"         # the exception the test cell must raise
    passes: bool = False                  # a right answer: the test must pass it

    @property
    def id(self) -> str:
        return f"{self.notebook}-{self.cell.removesuffix('-solution')}-{self.name}"


# Exercises that use what an earlier one made: its cells (not its test) run first.
NEEDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("13", "ex3-solution"): ("ex2-solution",),   # the straggler run's ex2.json
}

# Cells of an exercise that only show something and take long (a job): not run (their first line).
SHOW_ONLY: dict[tuple[str, str], tuple[str, ...]] = {
    ("10", "ex2-solution"): ('job = horovod_job("broken_hvd.py", "broken.json")',),   # the broken run, 25 s
}

MUTANTS: list[Mutant] = [
    # ------------------------------------------------------------- 01 cluster anatomy
    Mutant("01", "ex1-solution", "whole-directive", "keeps the directive's value: '--account=def-<PI>'",
           (('profile.account_directive.split("=")[0]', "profile.account_directive"),),
           shows='project_option.get("narval") == "--account"'),
    Mutant("01", "ex2-solution", "one-cpu", "forgets --cpus-per-task=2: srun gives one CPU",
           (('"--cpus-per-task=2", ', ""),), shows="ask srun for --cpus-per-task=2"),
    Mutant("01", "ex3-solution", "restarts-from-0", "the script counts from 0 on every run, ignoring count.txt",
           (("n=$(cat count.txt 2>/dev/null || echo 0)", "n=0"),),
           shows="not start again from 0"),
    # ---------------------------------------------------------------- 02 storage tiers
    Mutant("02", "ex1-solution", "files-only", "counts the files but not the folders against the file quota",
           (("100 * usage.inodes / home.quota_files",
             '100 * sum(p.is_file() for p in Path("dataset").rglob("*")) / home.quota_files'),),
           shows='usage.inodes / narval.tier("home").quota_files'),
    Mutant("02", "ex2-solution", "10-gib-excluded", "'10 GiB or less' written as < 10",
           (("dataset_gib <= 10 and", "dataset_gib < 10 and"),), shows='pick_tier(10, 20) == "ramdisk"'),
    Mutant("02", "ex3-solution", "shared-folder", "unpacks into the shared submit folder, not on each node",
           (("d=${SLURM_TMPDIR:-/tmp/$USER-$SLURM_JOB_ID}", "d=$SLURM_SUBMIT_DIR/unpacked"),),
           shows="unpacked into the shared folder"),
    # ------------------------------------------------------------ 03 first batch job
    Mutant("03", "ex1-solution", "no-srun", "echoes in the batch shell: only the first node says hello",
           (("srun bash -c 'echo \"hello from $SLURMD_NODENAME\"'", 'echo "hello from $SLURMD_NODENAME"'),),
           shows="no hello from"),
    Mutant("03", "ex2-solution", "waits-in-notebook", "waits for the array in the notebook, then submits "
           "the sum job without --dependency",
           (('total_job = run(f"--dependency=afterok:{array_job}", "sum.sh", array_job)\nwait(array_job)',
             'wait(array_job)\ntotal_job = run("sum.sh", array_job)'),),
           shows="with a dependency: Slurm, not the notebook, holds it back"),
    Mutant("03", "ex3-solution", "bare-seconds", "writes 45 seconds as '45', which Slurm reads as minutes",
           (('"45 seconds": "00:45"', '"45 seconds": "45"'),), shows='parse_time_limit(limits["45 seconds"]) == 45'),
    Mutant("03", "ex4-solution", "keeps-roomy", "asks again for the roomy 800M, not the measured peak plus 25 %",
           (('right_mem = f"{math.ceil(peak * 1.25 / 2**20)}M"', 'right_mem = "800M"'),), shows="plus 25 %"),
    # ------------------------------------------------------- 03b software environments
    Mutant("03b", "ex1-solution", "python-only", "loads the python module, not pytorch: the caches stay in $HOME",
           (("module load pytorch", "module load python"),), shows="TORCH_HOME is not where"),
    Mutant("03b", "ex1-solution", "notebook-environment", "leaves out --export=NONE: works only from the notebook",
           (("#SBATCH --export=NONE\n", ""),), shows="submitted from"),
    Mutant("03b", "ex1-solution", "login-shell", "a login shell (#!/bin/bash -l) instead of --export=NONE",
           (("#!/bin/bash\n#SBATCH --job-name=own-env\n#SBATCH --export=NONE\n",
             "#!/bin/bash -l\n#SBATCH --job-name=own-env\n"),), passes=True),
    Mutant("03b", "ex2-solution", "drops-hf-home", "deletes the HF_HOME line: the linter is content, the cache "
           "goes back to ~/.cache", (("export HF_HOME=/fsx/$USER/cache/huggingface\n", ""),),
           shows="HF_HOME=(not set"),
    Mutant("03b", "ex2-solution", "hf-only", "moves Hugging Face's cache only, not pip's and torch's",
           (("export PIP_CACHE_DIR=/fsx/$USER/cache/pip\nexport TORCH_HOME=/fsx/$USER/cache/torch\n", ""),),
           shows="PIP_CACHE_DIR=(not set"),
    # ------------------------------------------------------- 04 interactive salloc/srun
    Mutant("04", "ex1-solution", "two-tasks", "asks for one task per node: two tasks, not four",
           (("--ntasks-per-node=2", "--ntasks=2"),), shows="expected four node names"),
    Mutant("04", "ex2-solution", "hard-coded", "hard-codes the answer for this allocation: step 1 failed",
           (('    rows = sacct(job, "JobID,State")', '    return [f"{job}.1"]  # the one that failed\n'
             '    rows = sacct(job, "JobID,State")'),),
           shows="assert failed_steps(granted(clean.stderr.splitlines())) == []"),
    Mutant("04", "ex3-solution", "job-name-kept", "fixes the task layout but keeps salloc's job name",
           (("salloc --job-name=train ", "salloc "),), shows="Lightning did not detect Slurm"),
    # -------------------------------------------------- 05 Jupyter on a compute node
    Mutant("05", "ex1-solution", "one-node-only", "writes a Host entry for ng20304 alone, not for every GPU node",
           (("Host ng*", "Host ng20304"),), shows="every GPU node goes through the login node"),
    Mutant("05", "ex2-solution", "skips-preferred", "starts looking one port above the preferred one",
           (("range(preferred, 65536)", "range(preferred + 1, 65536)"),),
           shows="a free preferred port is returned as it is"),
    Mutant("05", "ex3-solution", "from-notebook", "fetches from the notebook, not from a step on the node",
           (('["srun", "--overlap", "--ntasks=1", PY, "ex3_fetch.py",', '[PY, "ex3_fetch.py",'),),
           shows="no step ran in the job"),
    # ------------------------------------------------------- 06 single-device tuning
    Mutant("06", "ex1-solution", "plain-srun", "a plain srun: on Slurm 22.05-23.02 the step gets 1 CPU",
           (('srun -c "$SLURM_CPUS_PER_TASK" python', "srun python"),), shows="pass the CPUs on"),
    Mutant("06", "ex1-solution", "srun-cpus-env", "exports SRUN_CPUS_PER_TASK, as the lesson offers: right",
           (('srun -c "$SLURM_CPUS_PER_TASK" python', 'export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK\nsrun python'),),
           passes=True),
    Mutant("06", "ex2-solution", "swallows-errors", "catches every exception, not only out-of-memory errors",
           (("except (torch.cuda.OutOfMemoryError, MemoryError):", "except Exception:"),),
           shows="only out-of-memory errors end the search"),
    Mutant("06", "ex3-solution", "over-loop", "divides by the training loop's time, not loading + step",
           (("return load / (load + step)", 'return load / seconds["training loop"]'),),
           shows="not / the training loop"),
    # ---------------------------------------------------------- 07 TF32 and precision
    Mutant("07", "ex1-solution", "12-bits", "clears 12 mantissa bits instead of 13",
           (("i & ~0x1FFF", "i & ~0xFFF"),), shows="assert got.tolist() =="),
    Mutant("07", "ex2-solution", "seed-ignored", "always draws the matrices from seed 0",
           (("torch.Generator().manual_seed(seed)", "torch.Generator().manual_seed(0)"),), shows="use the seed"),
    Mutant("07", "ex3-solution", "no-finally", "restores the level only when the block ends normally",
           (("    try:\n        yield\n    finally:\n        torch.set_float32_matmul_precision(saved)",
             "    yield\n    torch.set_float32_matmul_precision(saved)"),),
           shows="restore the level after an exception too"),
    # ---------------------------------------------------------------------- 08 DDP
    Mutant("08", "ex1-solution", "port-no-modulo", "derives the port as 16000 + job id: beyond 65535 soon",
           (('16000 + int(env["SLURM_JOB_ID"]) % 16000', '16000 + int(env["SLURM_JOB_ID"])'),),
           shows="assert world_from_env(srun_env) =="),
    Mutant("08", "ex1-solution", "brackets-by-hand", "parses the node list itself: fine for node[1-2] only",
           (('    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, '
             'check=True)\n    return out.stdout.split()[0]',
             '    return nodelist.split(",")[0].replace("[", "").split("-")[0]'),),
           shows="do not parse the list yourself"),
    Mutant("08", "ex2-solution", "no-set-epoch", "never calls sampler.set_epoch: every epoch sees the same order",
           (("    sampler.set_epoch(epoch)\n", ""),), shows="call sampler.set_epoch(epoch) every epoch"),
    Mutant("08", "ex3-solution", "one-worker-per-node", "starts one worker per torchrun, not two",
           (("--nproc-per-node=2", "--nproc-per-node=1"),), shows='assert result["world_size"] == 4'),
    # ---------------------------------------------------------------- 09 Lightning
    Mutant("09", "ex1-solution", "ignores-job-name", "any job with SLURM_NTASKS counts, even 'interactive'",
           (('return "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")',
             'return "SLURM_NTASKS" in env'),), shows="Lightning says"),
    Mutant("09", "ex2-solution", "name-kept", "fixes the tasks per node but keeps the name 'interactive'",
           (("#SBATCH --job-name=lightning", "#SBATCH --job-name=interactive"),), shows="SLURMEnvironment"),
    Mutant("09", "ex3-solution", "batch-shell-only", "sends the signal to the batch shell only (B:)",
           (("#SBATCH --signal=SIGUSR1@120", "#SBATCH --signal=B:SIGUSR1@120"),),
           shows="the steps must get the signal"),
    # ------------------------------------------------------------------- 10 Horovod
    Mutant("10", "ex1-solution", "split-by-comma", "splits the node list at commas: node[1-2] stays one host",
           (('out.stdout.split()', 'nodelist.split(",")'),),
           shows='horovod_hosts("node[1-2]", 2) == "node1:2,node2:2"'),
    Mutant("10", "ex2-solution", "same-seed", "gives every worker seed 0 instead of broadcasting rank 0's state",
           (('source.replace(anchor, anchor + (\n    "hvd.broadcast_parameters(model.state_dict(), root_rank=0)\\n"\n'
             '    "hvd.broadcast_optimizer_state(optimizer, root_rank=0)\\n"))',
             'source.replace("seed=hvd.rank()", "seed=0")'),),
           shows="a shared seed is not enough"),
    Mutant("10", "ex3-solution", "per-worker-values", "passes the per-worker batch and the unscaled learning rate",
           (('{"batch": 2 * 16, "lr": 2 * 0.05}', '{"batch": 16, "lr": 0.05}'),),
           shows="DDP and Horovod end with different weights"),
    # ----------------------------------------------------------- 11 scaling curves
    Mutant("11", "ex1-solution", "fitted-speedup", "reports the fitted model's speed-up, not the measured one",
           (("speedup_64, efficiency_64 = at_64.speedup, at_64.efficiency",
             "speedup_64 = amdahl_speedup(s, 64)\nefficiency_64 = speedup_64 / 64"),),
           shows="assert abs(speedup_64 - t[1] / t[64]) < 1e-9"),
    Mutant("11", "ex2-solution", "no-accumulation", "forgets the gradient accumulation in the global batch",
           (("global_batch(32, 4 * 4, accumulation=2)", "global_batch(32, 4 * 4)"),),
           shows="assert gbatch == 32 * 16 * 2"),
    Mutant("11", "ex3-solution", "one-node", "asks for 2 tasks but not for 2 nodes: both land on one node",
           (('"--nodes=2", "--ntasks-per-node=1"', '"--ntasks=2"'),), shows='weak_run["nodes"] == "2"'),
    # ------------------------------------------------- 12 checkpointing and preemption
    Mutant("12", "ex1-solution", "weights-only", "saves and restores the weights but not the optimizer state",
           (("ck.restore(model, opt)", "ck.restore(model)"), ("ck.save(max(start, until), model, opt)",
                                                             "ck.save(max(start, until), model)")),
           shows="was the optimizer state saved and restored?"),
    Mutant("12", "ex2-solution", "wrong-signal", "handles SIGTERM instead of SIGUSR1: the warning kills it",
           (("signal.signal(signal.SIGUSR1, on_warning)", "signal.signal(signal.SIGTERM, on_warning)"),),
           shows="did the warning kill it?"),
    Mutant("12", "ex2-solution", "off-by-one", "saves the step it was in, not the steps done: redoes a step",
           (("ck.save(step + 1, model, opt)", "ck.save(step, model, opt)"),
            ("checkpoint at step {step + 1}", "checkpoint at step {step}")),
           shows="ended with other weights than an uninterrupted one"),
    Mutant("12", "ex3-solution", "no-throttle", "an array without %1: the tasks run side by side",
           (("--array=1-4%1", "--array=1-4"),), shows="the tasks overlapped"),
    # ------------------------------------------------------------------ 13 stragglers
    Mutant("13", "ex1-solution", "no-ratio", "flags by the z-score alone: a rank 30 % slower counts",
           (("t >= ratio * m and score(t) >= z", "score(t) >= z"),), shows="30 % slower is below the 1.5x ratio"),
    Mutant("13", "ex2-solution", "hard-coded", "hard-codes the answer of this run: rank 1",
           (("    times = read_step_logs(path)", "    return [1]  # the slow rank of this run\n"
                                                 "    times = read_step_logs(path)"),),
           shows="flagged_in_log must find the slow rank in the log it is given"),
    Mutant("13", "ex3-solution", "straggler-included", "counts the straggler's own waiting too",
           (("others = [rec for rank, rec in ranks.items() if rank != 1]", "others = list(ranks.values())"),),
           shows="assert abs(waiting_share - w / (w + c)) < 1e-9"),
]
