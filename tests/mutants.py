"""Planted wrong answers for the graded exercises in solutions/: the data of tests/test_mutants.py.

A :class:`Mutant` is one realistic student mistake in one solution cell (its nbgrader
``grade_id``), written as text edits of that cell: each ``(old, new)`` pair replaces every
``old`` (which must occur) by ``new``. Running the exercise with the edits made must make its
graded test cell fail with ``error``, and the failure must show ``shows`` (part of the failing
assert's line or message), so that the check meant to catch the mistake is the one that did.
``passes=True`` marks a right answer written another way, which the test must accept.

Every exercise needs at least one mutant (tests/test_mutants.py checks it, in ``make test``);
a new or changed exercise brings its own. Run them with ``make test-mutants``. An edit whose old text is
:data:`ANSWER` replaces the whole answer (between nbgrader's solution markers): a student's own answer. Since issue 25 every
check names the mistake in its message ("3.3: --time=45 means 2700 seconds (45 minutes), ..."), and a new mutant's
``shows`` is part of that message, not of the assert's code: the student sees the message.
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
    apart: bool = False                   # caught only where the virtual nodes are apart (own /tmp, hostname)
    own_network: str = ""                 # where each node has its own network the answer fails by itself
                                          # first (as on a cluster): the exception its own cell raises

    @property
    def id(self) -> str:
        return f"{self.notebook}-{self.cell.removesuffix('-solution')}-{self.name}"


# Exercises that use what an earlier one made: its cells (not its test) run first.
NEEDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("13", "ex3-solution"): ("ex2-solution",),   # the straggler run's ex2.json
    ("14", "ex2-solution"): ("ex1-solution",),   # the records of the three strategies
    ("14", "ex3-solution"): ("ex1-solution",),   # the checkpoint the fsdp step saved
    ("15", "ex2-solution"): ("ex1-solution",),   # stuck_lines reads the stuck job's dumps
}

# Cells of an exercise that only show something and take long (a job): not run (their first line).
SHOW_ONLY: dict[tuple[str, str], tuple[str, ...]] = {
    ("10", "ex2-solution"): ('job = horovod_job("broken_hvd.py", "broken.json")',),   # the broken run, 25 s
}

#: As an edit's old text: the answer cell's whole solution, what a student writes in its place (a
#: mutant "as a student" is a whole other answer).
ANSWER = "<the whole answer>"

#: 15.4's function as the solution writes it: what the wrong answers of 15.4 "as a student" replace.
FIRST_MISMATCH = '''def first_mismatch(dumps):
    ops = {rank: {e["collective_seq_id"]: e["profiling_name"].split(":", 1)[-1] for e in dump["entries"]}
           for rank, dump in dumps.items()}   # rank -> {sequence id: op}
    for seq in sorted(set().union(*ops.values())):
        here = {rank: seen.get(seq) for rank, seen in ops.items()}   # None: no entry
        if len(set(here.values())) > 1:
            op = collections.Counter(o for o in here.values() if o is not None).most_common(1)[0][0]
            return seq, op, sorted(rank for rank, o in here.items() if o != op)
    return None
'''

MUTANTS: list[Mutant] = [
    # ------------------------------------------------------------- 01 cluster anatomy
    Mutant("01", "ex1-solution", "whole-directive", "keeps the directive's value: '--account=def-<PI>'",
           (('profile.account_directive.split("=")[0]', "profile.account_directive"),),
           shows="1.1: narval requires --account (the option only"),
    Mutant("01", "ex1-solution", "from-the-lesson", "copies the one site the lesson showed instead of reading the profiles",
           (("project_option = {}\nfor name in list_profiles():", 'project_option = {"narval": "--account"}\nfor name in []:'),),
           shows="1.1: stability requires --comment"),
    Mutant("01", "ex1-solution", "no-dashes", "writes the option's name without its dashes: 'account'",
           (('.split("=")[0]', '.split("=")[0].lstrip("-")'),), shows="1.1: narval requires --account"),
    Mutant("01", "ex2-solution", "one-cpu", "forgets --cpus-per-task=2: srun gives one CPU",
           (('"--cpus-per-task=2", ', ""),), shows="ask srun for --cpus-per-task=2"),
    Mutant("01", "ex2-solution", "notebook-host", "names the notebook's own host, not the compute node's",
           (("compute_node, compute_cpus = out[0], int(out[1])",
             "compute_node, compute_cpus = socket.gethostname(), int(out[1])"),),
           shows="ask a step (srun) for its SLURMD_NODENAME"),
    Mutant("01", "ex2-solution", "one-cpu-asked", "asks for --cpus-per-task=1, less than the task says",
           (('"--cpus-per-task=2"', '"--cpus-per-task=1"'),), shows="1.2: the step got 1 CPU(s)"),
    Mutant("01", "ex3-solution", "restarts-from-0", "the script counts from 0 on every run, ignoring count.txt",
           (("n=$(cat count.txt 2>/dev/null || echo 0)", "n=0"),),
           shows="not start again from 0"),
    Mutant("01", "ex3-solution", "no-append", "leaves out --open-mode=append: the requeued run empties the log",
           (("#SBATCH --open-mode=append\n", ""),), shows="--open-mode=append"),
    Mutant("01", "ex3-solution", "counts-to-11", "counts while n <= 10: one number too many",
           (('[ "$n" -lt 10 ]', '[ "$n" -le 10 ]'),), shows="1.3: count.txt says 11, not 10"),
    Mutant("01", "ex1-solution", "directive-set",  # as a student
           'keeps every site whose profile shows an account directive, required or not',
           ((ANSWER,
             'project_option = {name: load_profile(name).account_directive.split("=")[0]\n'
             '                  for name in list_profiles() if load_profile(name).account_directive}\n'),),
           shows='no project required there'),
    Mutant("01", "ex1-solution", "all-account",  # as a student
           'takes every required project option to be --account, as on Narval',
           ((ANSWER,
             'project_option = {name: "--account" for name in list_profiles() if load_profile(name).account_required}\n'),),
           shows='1.1: stability requires --comment'),
    Mutant("01", "ex2-solution", "sinfo",  # as a student
           'reads the first node and its CPUs from sinfo instead of asking a step',
           ((ANSWER,
             'out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %c"], capture_output=True, text=True, check=True).stdout.split()\n'
             'compute_node, compute_cpus = out[0], int(out[1])\n'),),
           shows='no step of yours ran on'),
    Mutant("01", "ex2-solution", "scontrol",  # as a student
           "reads NodeName and CPUTot from scontrol show node: the cluster, not the step's share",
           ((ANSWER,
             'shown = subprocess.run(["scontrol", "show", "node"], capture_output=True, text=True, check=True).stdout\n'
             'compute_node = re.search(r"NodeName=(\\S+)", shown)[1]\n'
             'compute_cpus = int(re.search(r"CPUTot=(\\d+)", shown)[1])\n'),),
           shows='no step of yours ran on'),
    Mutant("01", "ex3-solution", "restart-count",  # as a student
           'resumes only when Slurm restarted it (SLURM_RESTART_COUNT): resubmitted, it starts over',
           ((ANSWER,
             'script = """#!/bin/bash\n'
             '#SBATCH --job-name=count\n'
             '#SBATCH --comment=demo\n'
             '#SBATCH --requeue\n'
             '#SBATCH --open-mode=append\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:05:00\n'
             'echo "start ${SLURM_RESTART_COUNT:-0}"\n'
             'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then n=$(cat count.txt); else n=0; fi\n'
             'for i in $(seq $((n + 1)) 10); do\n'
             '    sleep 0.3\n'
             '    echo "$i" > count.txt\n'
             'done\n'
             '"""\n'),),
           shows='not start again from 0'),
    Mutant("01", "ex3-solution", "node-local",  # as a student
           "keeps count.txt on the node's fast local disk ($SLURM_TMPDIR): lost on requeue",
           ((ANSWER,
             'script = """#!/bin/bash\n'
             '#SBATCH --job-name=count\n'
             '#SBATCH --comment=demo\n'
             '#SBATCH --requeue\n'
             '#SBATCH --open-mode=append\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:05:00\n'
             'cd "${SLURM_TMPDIR:-/tmp}"   # fast local disk\n'
             'echo "start ${SLURM_RESTART_COUNT:-0}"\n'
             'n=$(cat count.txt 2>/dev/null || echo 0)\n'
             'while [ "$n" -lt 10 ]; do sleep 0.3; n=$((n + 1)); echo "$n" > count.txt; done\n'
             '"""\n'),),
           shows='1.3: count.txt says 0, not 10'),
    Mutant("01", "ex3-solution", "end-only",  # as a student
           'counts in a variable and writes count.txt once, at the end',
           ((ANSWER,
             'script = """#!/bin/bash\n'
             '#SBATCH --job-name=count\n'
             '#SBATCH --comment=demo\n'
             '#SBATCH --requeue\n'
             '#SBATCH --open-mode=append\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:05:00\n'
             'n=$(cat count.txt 2>/dev/null || echo 0)\n'
             'echo "start ${SLURM_RESTART_COUNT:-0}: from $n"\n'
             'while [ "$n" -lt 10 ]; do\n'
             '    sleep 0.3\n'
             '    n=$((n + 1))\n'
             'done\n'
             'echo "$n" > count.txt\n'
             '"""\n'),),
           shows='write the new number after every step'),
    # ---------------------------------------------------------------- 02 storage tiers
    Mutant("02", "ex1-solution", "files-only", "counts the files but not the folders against the file quota",
           (("100 * usage.inodes / home.quota_files",
             '100 * sum(p.is_file() for p in Path("dataset").rglob("*")) / home.quota_files'),),
           shows="(files and folders)"),
    Mutant("02", "ex1-solution", "fraction", "drops the factor 100: a fraction, not a percentage",
           (("used_bytes_pct = 100 * usage.bytes", "used_bytes_pct = usage.bytes"),),
           shows="2.1: used_bytes_pct = 100 * du('dataset').bytes"),
    Mutant("02", "ex1-solution", "project-tier", "divides by the project tier's quotas, not home's",
           (('home = narval.tier("home")', 'home = narval.tier("project")'),), shows="2.1: "),
    Mutant("02", "ex2-solution", "10-gib-excluded", "'10 GiB or less' written as < 10",
           (("dataset_gib <= 10 and", "dataset_gib < 10 and"),), shows="2.2: up to 10 GiB included: ramdisk"),
    Mutant("02", "ex2-solution", "all-memory", "drops the half: a ramdisk may fill all the job's memory",
           (("dataset_gib <= job_mem_gib / 2", "dataset_gib <= job_mem_gib"),),
           shows="2.2: 2 GiB do not fit in half of 2 GiB of memory"),
    Mutant("02", "ex2-solution", "100-excluded", "'100 GiB or less' written as < 100",
           (("dataset_gib <= 100:", "dataset_gib < 100:"),), shows="2.2: up to 100 GiB included: node-local"),
    Mutant("02", "ex3-solution", "shared-folder", "unpacks into the shared submit folder, not on each node",
           (("d=${SLURM_TMPDIR:-/tmp/$USER-$SLURM_JOB_ID}", "d=$SLURM_SUBMIT_DIR/unpacked"),),
           shows="unpacked into the shared folder"),
    Mutant("02", "ex3-solution", "no-srun", "unpacks and counts in the batch shell: the first node only",
           (("srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 bash -c", "bash -c"),),
           shows="2.3: expected one count file per node"),
    Mutant("02", "ex3-solution", "tmp-once", "unpacks once, in the batch shell, into /tmp: node2 has no copy "
           "(its /tmp is its own)",
           (('\'d=${SLURM_TMPDIR:-/tmp/$USER-$SLURM_JOB_ID}; mkdir -p "$d" && tar -xf dataset.tar -C "$d"\'', "true"),
            ("# each task's node-local folder",
             'd=/tmp/$USER-$SLURM_JOB_ID; mkdir -p "$d" && tar -xf dataset.tar -C "$d"  # once, here\n'
             "# each task's node-local folder"),
            ("d=${SLURM_TMPDIR:-/tmp/$USER-$SLURM_JOB_ID}; ls", "d=/tmp/$USER-$SLURM_JOB_ID; ls")),
           shows="a node that found none has no copy", apart=True),
    Mutant("02", "ex3-solution", "shm-once", "unpacks once, in the batch shell, into the RAM disk /dev/shm: node2 "
           "has no copy (its /dev/shm is its own)",
           (('\'d=${SLURM_TMPDIR:-/tmp/$USER-$SLURM_JOB_ID}; mkdir -p "$d" && tar -xf dataset.tar -C "$d"\'', "true"),
            ("# each task's node-local folder",
             'd=/dev/shm/$USER-$SLURM_JOB_ID; mkdir -p "$d" && tar -xf dataset.tar -C "$d"  # once, in memory\n'
             "# each task's node-local folder"),
            ("d=${SLURM_TMPDIR:-/tmp/$USER-$SLURM_JOB_ID}; ls", "d=/dev/shm/$USER-$SLURM_JOB_ID; ls")),
           shows="a node that found none has no copy", apart=True),
    Mutant("02", "ex3-solution", "one-node", "asks for one node, not two",
           (("#SBATCH --nodes=2\n", "#SBATCH --nodes=1\n"),), shows="2.3: the job should have COMPLETED on 2 nodes"),
    Mutant("02", "ex1-solution", "shell-du",  # as a student
           'measures with du -s (disk blocks, not the apparent size) and find | wc -l',
           ((ANSWER,
             'home = narval.tier("home")\n'
             'size = int(subprocess.run(["du", "-s", "--block-size=1", "dataset"], capture_output=True, text=True,\n'
             '                          check=True).stdout.split()[0])\n'
             'inodes = int(subprocess.run("find dataset | wc -l", shell=True, capture_output=True, text=True, check=True).stdout)\n'
             'used_bytes_pct = 100 * size / home.quota_bytes\n'
             'used_files_pct = 100 * inodes / home.quota_files\n'
             'binding = "files" if used_files_pct > used_bytes_pct else "bytes"\n'),),
           shows='the apparent size (not the disk blocks'),
    Mutant("02", "ex1-solution", "from-memory",  # as a student
           "takes the quotas from the guide's text, 50 GB as 50e9 bytes, not from the profile",
           ((ANSWER,
             'usage = du("dataset")\n'
             'used_bytes_pct = 100 * usage.bytes / 50e9        # Narval home: 50 GB\n'
             'used_files_pct = 100 * usage.inodes / 500_000    # and 500k files\n'
             'binding = "files" if used_files_pct > used_bytes_pct else "bytes"\n'),),
           shows='(50G: 50 * 2**30 bytes)'),
    Mutant("02", "ex2-solution", "memory-only",  # as a student
           'ramdisk whenever the data fit in half the memory, forgetting the 10 GiB cap',
           ((ANSWER,
             '    if dataset_gib <= job_mem_gib / 2:\n'
             '        return "ramdisk"\n'
             '    return "node-local" if dataset_gib <= 100 else "project"\n'),),
           shows='over 10 GiB the guide says node-local'),
    Mutant("02", "ex2-solution", "integer-half",  # as a student
           'halves the memory with //: whole GiB only',
           ((ANSWER,
             '    half = job_mem_gib // 2\n'
             '    if dataset_gib > 100:\n'
             '        return "project"\n'
             '    if dataset_gib > 10 or dataset_gib > half:\n'
             '        return "node-local"\n'
             '    return "ramdisk"\n'),),
           shows='no // rounding'),
    Mutant("02", "ex3-solution", "fixed-tmp",  # as a student
           "unpacks into a fixed /tmp/data on each node: not the job's $SLURM_TMPDIR, never removed",
           ((ANSWER,
             'stage_script = """#!/bin/bash\n'
             '#SBATCH --job-name=stage-all\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=1\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:05:00\n'
             'srun bash -c \'mkdir -p /tmp/data && tar -xf dataset.tar -C /tmp/data && ls /tmp/data | grep -c "\\\\.bin$" > count-$SLURMD_NODENAME.txt\'\n'
             '"""\n'
             'Path("stage_all.sh").write_text(stage_script)\n'
             'stage_job = subprocess.run(["sbatch", "--parsable", "stage_all.sh"], capture_output=True, text=True,\n'
             '                           check=True).stdout.strip().split(";")[0]\n'
             'wait(stage_job)\n'),),
           shows='not into $SLURM_TMPDIR'),
    Mutant("02", "ex3-solution", "user-folder",  # as a student
           "falls back to /tmp/$USER, shared by all the user's jobs on the node, never removed",
           ((ANSWER,
             'stage_script = """#!/bin/bash\n'
             '#SBATCH --job-name=stage-all\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=1\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:05:00\n'
             'srun bash -c \'d=${SLURM_TMPDIR:-/tmp/$USER}; mkdir -p "$d" && cd "$d" && tar -xf "$SLURM_SUBMIT_DIR/dataset.tar" && ls | grep -c "\\\\.bin$" > "$SLURM_SUBMIT_DIR/count-$SLURMD_NODENAME.txt"\'\n'
             '"""\n'
             'Path("stage_all.sh").write_text(stage_script)\n'
             'stage_job = subprocess.run(["sbatch", "--parsable", "stage_all.sh"], capture_output=True, text=True,\n'
             '                           check=True).stdout.strip().split(";")[0]\n'
             'wait(stage_job)\n'),),
           shows='a folder every job on the node shares'),
    Mutant("02", "ex3-solution", "no-cleanup", "leaves its /tmp folder behind where the site sets no $SLURM_TMPDIR",
           (('[ -n "$SLURM_TMPDIR" ] || srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 rm -rf "/tmp/$USER-$SLURM_JOB_ID"\n', ""),),
           shows="remove your folder at the end"),
    # ------------------------------------------------------------ 03 first batch job
    Mutant("03", "ex1-solution", "no-srun", "echoes in the batch shell: only the first node says hello",
           (("srun bash -c 'echo \"hello from $SLURMD_NODENAME\"'", 'echo "hello from $SLURMD_NODENAME"'),),
           shows="no hello from"),
    Mutant("03", "ex1-solution", "two-tasks-one-node", "asks for two tasks, not two nodes: both land on one node",
           (("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n", "#SBATCH --ntasks=2\n"),),
           shows="3.1: the job ran on"),
    Mutant("03", "ex1-solution", "fixed-log-name", "a fixed log name, without the job id",
           (("#SBATCH --output=%x-%j.out", "#SBATCH --output=hello.out"),),
           shows="3.1: expected one log file named with the job id"),
    Mutant("03", "ex2-solution", "waits-in-notebook", "waits for the array in the notebook, then submits "
           "the sum job without --dependency",
           (('total_job = run(f"--dependency=afterok:{array_job}", "sum.sh", array_job)\nwait(array_job)',
             'wait(array_job)\ntotal_job = run("sum.sh", array_job)'),),
           shows="with a dependency: Slurm, not the notebook, holds it back"),
    Mutant("03", "ex2-solution", "doubles", "writes the task id times 2, not times itself",
           (("SLURM_ARRAY_TASK_ID * SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_ID * 2"),),
           shows="3.2: total.txt says '20', not 1 + 4 + 9 + 16 = 30"),
    Mutant("03", "ex2-solution", "from-zero", "numbers the array from 0, as Python would",
           (("#SBATCH --array=1-4", "#SBATCH --array=0-3"),), shows="3.2: the array must have tasks 1 to 4"),
    Mutant("03", "ex3-solution", "bare-seconds", "writes 45 seconds as '45', which Slurm reads as minutes",
           (('"45 seconds": "00:45"', '"45 seconds": "45"'),),
           shows="3.3: --time=45 means 2700 seconds (45 minutes), not 45 seconds"),
    Mutant("03", "ex3-solution", "minutes-seconds", "writes 90 minutes as 1:30, which Slurm reads as 1 min 30 s",
           (('"90 minutes": "01:30:00"', '"90 minutes": "1:30"'),),
           shows="3.3: --time=1:30 means 90 seconds (1 minute 30 seconds), not 90 minutes"),
    Mutant("03", "ex3-solution", "days-as-hours", "writes 2 days and 12 hours as 48:12:00",
           (('"2 days and 12 hours": "2-12:00:00"', '"2 days and 12 hours": "48:12:00"'),),
           shows="3.3: --time=48:12:00 means 173520 seconds (2 days 12 minutes), not 2 days and 12 hours"),
    Mutant("03", "ex3-solution", "bare-minutes", "writes 90 minutes as a bare 90: right, Slurm reads minutes",
           (('"90 minutes": "01:30:00"', '"90 minutes": "90"'),), passes=True),
    Mutant("03", "ex4-solution", "keeps-roomy", "asks again for the roomy 800M, not the measured peak plus 25 %",
           (('right_mem = f"{math.ceil(peak * 1.25 / 2**20)}M"', 'right_mem = "800M"'),), shows="plus 25 %"),
    Mutant("03", "ex4-solution", "no-margin", "asks for the measured peak itself, dropping the factor 1.25",
           (("peak * 1.25 / 2**20", "peak / 2**20"),), shows="MiB is only"),
    Mutant("03", "ex4-solution", "megabytes", "converts to MB (10**6), but Slurm's M is MiB (2**20)",
           (("peak * 1.25 / 2**20", "peak * 1.25 / 10**6"),), shows="more than the peak plus 25 %"),
    Mutant("03", "ex1-solution", "hostnames-loop",  # as a student
           "loops over the job's node names in the batch shell: every hello comes from the first node",
           ((ANSWER,
             'fixed_script = """#!/bin/bash\n'
             '#SBATCH --job-name=hello2\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=1\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:01:00\n'
             'for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do\n'
             '    echo "hello from $node"\n'
             'done\n'
             '"""\n'
             'Path("fixed.sh").write_text(fixed_script)\n'
             'reply = subprocess.run(["sbatch", "--parsable", "--wait", "fixed.sh"], capture_output=True, text=True, check=True)\n'
             'fixed_job = reply.stdout.strip().split(";")[0]\n'),),
           shows='no step ran on'),
    Mutant("03", "ex1-solution", "expanded-in-batch",  # as a student
           'srun echo "hello from $SLURMD_NODENAME": the batch shell expands it once',
           ((ANSWER,
             'fixed_script = """#!/bin/bash\n'
             '#SBATCH --job-name=hello2\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=1\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:01:00\n'
             'srun echo "hello from $SLURMD_NODENAME"\n'
             '"""\n'
             'Path("fixed.sh").write_text(fixed_script)\n'
             'reply = subprocess.run(["sbatch", "--parsable", "--wait", "fixed.sh"], capture_output=True, text=True, check=True)\n'
             'fixed_job = reply.stdout.strip().split(";")[0]\n'),),
           shows="prints the batch shell's node twice"),
    Mutant("03", "ex2-solution", "poll-then-submit",  # as a student
           'polls squeue in the notebook until the array is gone, then submits the sum',
           ((ANSWER,
             'Path("square.sh").write_text("""#!/bin/bash\n'
             '#SBATCH --job-name=sq\n'
             '#SBATCH --array=1-4\n'
             '#SBATCH --output=%x-%A_%a.out\n'
             '#SBATCH --time=00:01:00\n'
             'sleep 4\n'
             'echo $(( SLURM_ARRAY_TASK_ID * SLURM_ARRAY_TASK_ID ))\n'
             '""")\n'
             'Path("sum.sh").write_text("""#!/bin/bash\n'
             '#SBATCH --job-name=sum\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:01:00\n'
             'cat sq-"$1"_*.out | awk \'{ s += $1 } END { print s }\' > total.txt\n'
             '""")\n'
             'submit = lambda *args: subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True,\n'
             '                                      check=True).stdout.strip().split(";")[0]\n'
             'array_job = submit("square.sh")\n'
             'while subprocess.run(["squeue", "-h", "-j", array_job], capture_output=True, text=True).stdout.strip():\n'
             '    time.sleep(1)\n'
             'total_job = submit("sum.sh", array_job)\n'
             'wait(total_job)\n'),),
           shows='Slurm, not the notebook, holds it back'),
    Mutant("03", "ex2-solution", "job-id-outputs",  # as a student
           "names each task's output with %j, its own job id, and sums every sq-*.out",
           ((ANSWER,
             'Path("square.sh").write_text("""#!/bin/bash\n'
             '#SBATCH --job-name=sq\n'
             '#SBATCH --array=1-4\n'
             '#SBATCH --output=sq-%j.out\n'
             '#SBATCH --time=00:01:00\n'
             'sleep 4\n'
             'echo $(( SLURM_ARRAY_TASK_ID * SLURM_ARRAY_TASK_ID ))\n'
             '""")\n'
             'Path("sum.sh").write_text("""#!/bin/bash\n'
             '#SBATCH --job-name=sum\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:01:00\n'
             "cat sq-*.out | awk '{ s += $1 } END { print s }' > total.txt\n"
             '""")\n'
             'submit = lambda *args: subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True,\n'
             '                                      check=True).stdout.strip().split(";")[0]\n'
             'array_job = submit("square.sh")\n'
             'total_job = submit(f"--dependency=afterok:{array_job}", "sum.sh", array_job)\n'
             'wait(array_job)\n'
             'wait(total_job)\n'),),
           shows="named with the array's id and the task's index"),
    Mutant("03", "ex3-solution", "coreutils-timeout",  # as a student
           "stops the sleep with coreutils' timeout instead of a Slurm time limit",
           ((ANSWER,
             'limits = {"90 minutes": "90", "2 days and 12 hours": "2-12", "45 seconds": "0:45"}\n'
             'reply = subprocess.run(["sbatch", "--parsable", "--wait", "--output=timeout-%j.out", "--wrap", "timeout 3 sleep 60"],\n'
             '                       capture_output=True, text=True)\n'
             'timeout_job = reply.stdout.strip().split(";")[0]\n'),),
           shows='not `timeout` in the script'),
    Mutant("03", "ex3-solution", "colon-days",  # as a student
           'writes 2 days and 12 hours as 2:12:00:00, a form Slurm does not read',
           ((ANSWER,
             'limits = {"90 minutes": "1:30:00", "2 days and 12 hours": "2:12:00:00", "45 seconds": "0:0:45"}\n'
             'reply = subprocess.run(["sbatch", "--parsable", "--wait", "--time=00:00:03", "--wrap", "sleep 60"],\n'
             '                       capture_output=True, text=True)\n'
             'timeout_job = reply.stdout.strip().split(";")[0]\n'),),
           shows='3.3: --time=2:12:00:00 for 2 days and 12 hours'),
    Mutant("03", "ex4-solution", "from-request",  # as a student
           'adds 25 % to the roomy request (800M), not to the measured peak',
           ((ANSWER,
             'import math\n'
             '\n'
             'def run_hog(mem):\n'
             '    reply = subprocess.run(["sbatch", "--parsable", f"--mem={mem}", "--time=00:01:00", "--output=hog-%j.out",\n'
             '                            "--wrap", "python3 hog.py"], capture_output=True, text=True, check=True)\n'
             '    job_id = reply.stdout.strip().split(";")[0]\n'
             '    wait(job_id)\n'
             '    return job_id\n'
             '\n'
             'roomy_job = run_hog("800M")\n'
             'right_mem = f"{int(800 * 1.25)}M"   # the request plus 25 %\n'
             'snug_job = run_hog(right_mem)\n'),),
           shows='more than the peak plus 25 %'),
    Mutant("03", "ex4-solution", "whole-gib",  # as a student
           'rounds the request up to whole GiB: 1G for a 200 MiB job',
           ((ANSWER,
             'import math\n'
             '\n'
             'def run_hog(mem):\n'
             '    reply = subprocess.run(["sbatch", "--parsable", f"--mem={mem}", "--time=00:01:00", "--output=hog-%j.out",\n'
             '                            "--wrap", "python3 hog.py"], capture_output=True, text=True, check=True)\n'
             '    job_id = reply.stdout.strip().split(";")[0]\n'
             '    wait(job_id)\n'
             '    return job_id\n'
             '\n'
             'roomy_job = run_hog("800M")\n'
             'peak = Job(roomy_job).efficiency().peak_rss\n'
             'right_mem = f"{math.ceil(peak * 1.25 / 2**30)}G"\n'
             'snug_job = run_hog(right_mem)\n'),),
           shows='more than the peak plus 25 %'),
    Mutant("03", "ex2-solution", "labelled", "prints 'task x: x*x' and sums the last field: the output is not x*x alone",
           (("echo $(( SLURM_ARRAY_TASK_ID * SLURM_ARRAY_TASK_ID ))",
             'echo "task $SLURM_ARRAY_TASK_ID: $(( SLURM_ARRAY_TASK_ID * SLURM_ARRAY_TASK_ID ))"'),
            ("awk '{ s += $1 } END { print s }'", "awk '{ s += $NF } END { print s }'")),
           shows="print x * x, nothing else"),
    # ------------------------------------------------------- 03b software environments
    Mutant("03b", "ex1-solution", "python-only", "loads the python module, not pytorch: the caches stay in $HOME",
           (("module load pytorch", "module load python"),), shows="TORCH_HOME is not where"),
    Mutant("03b", "ex1-solution", "notebook-environment", "leaves out --export=NONE: works only from the notebook",
           (("#SBATCH --export=NONE\n", ""),), shows="submitted from"),
    Mutant("03b", "ex1-solution", "torch-home-home", "sets TORCH_HOME back to ~/.cache/torch after the module",
           (("module load pytorch\n", "module load pytorch\nexport TORCH_HOME=$HOME/.cache/torch\n"),),
           shows="3b.1, submitted from this notebook: TORCH_HOME is not where the pytorch module puts it"),
    Mutant("03b", "ex1-solution", "export-all", "--export=ALL, weaker than asked: the notebook's environment leaks in",
           (("#SBATCH --export=NONE", "#SBATCH --export=ALL"),),
           shows="3b.1, submitted from this notebook: TORCH_HOME is not where"),
    Mutant("03b", "ex1-solution", "login-shell", "a login shell (#!/bin/bash -l) instead of --export=NONE: the "
           "submitting shell's PYTHONPATH still leaks in",
           (("#!/bin/bash\n#SBATCH --job-name=own-env\n#SBATCH --export=NONE\n",
             "#!/bin/bash -l\n#SBATCH --job-name=own-env\n"),),
           shows="3b.1, submitted with PYTHONPATH set: the job imported"),  # adds to the exported environment
    Mutant("03b", "ex2-solution", "drops-hf-home", "deletes the HF_HOME line: the linter is content, the cache "
           "goes back to ~/.cache", (("export HF_HOME=/fsx/$USER/cache/huggingface\n", ""),),
           shows="HF_HOME=(not set"),
    Mutant("03b", "ex2-solution", "hf-only", "moves Hugging Face's cache only, not pip's and torch's",
           (("export PIP_CACHE_DIR=/fsx/$USER/cache/pip\nexport TORCH_HOME=/fsx/$USER/cache/torch\n", ""),),
           shows="PIP_CACHE_DIR=(not set"),
    Mutant("03b", "ex2-solution", "own-name", "writes their own user name instead of $USER",
           (("/fsx/$USER/cache/pip", "/fsx/jdoe/cache/pip"),), shows="3b.2: PIP_CACHE_DIR=/fsx/jdoe/cache/pip"),
    Mutant("03b", "ex2-solution", "no-srun", "runs the download in the batch shell, not as a step",
           (("srun python fetch_weights.py", "python fetch_weights.py"),), shows="3b.2: keep the job's own line"),
    Mutant("03b", "ex3-solution", "host-python", "runs python3 on the host: the step never enters the image",
           ((' ch-run --unset-env=LD_PRELOAD -b "$PWD:/scratch" -b "${SLURM_TMPDIR:-/tmp}:/localscratch" -c /scratch '
             '\\\\\n    "$IMAGE" -- python3', " python3"),), shows="not inside the image"),
    Mutant("03b", "ex3-solution", "no-work-bind", "binds nothing of the job's folder: the image has no inside.py",
           (('-b "$PWD:/scratch" ', ""), ("-c /scratch ", "")), shows="did not find inside.py"),
    Mutant("03b", "ex3-solution", "no-localscratch", "binds no local disk: /localscratch is the image's, read-only",
           ((' -b "${SLURM_TMPDIR:-/tmp}:/localscratch"', ""),), shows="the image is read-only"),
    Mutant("03b", "ex3-solution", "no-srun", "runs ch-run in the batch shell: one container, on the first node",
           (("srun ch-run", "ch-run"),), shows="expected one from each of the 2 nodes"),
    Mutant("03b", "ex1-solution", "source-profile",  # as a student
           'sources /etc/profile for the login environment instead of --export=NONE',
           ((ANSWER,
             'Path("own_env.sh").write_text("""#!/bin/bash\n'
             '#SBATCH --job-name=own-env\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:02:00\n'
             'source /etc/profile   # the login environment\n'
             'module purge\n'
             'module use "$SLURM_SUBMIT_DIR/modulefiles"\n'
             'module load pytorch\n'
             'python report.py\n'
             '""")\n'
             'reply = subprocess.run(["sbatch", "--parsable", "--wait", "own_env.sh"], capture_output=True, text=True, check=True)\n'
             'own_env_job = reply.stdout.strip().split(";")[0]\n'),),
           shows='3b.1, submitted with PYTHONPATH set: the job imported'),
    Mutant("03b", "ex1-solution", "export-on-command-line",  # as a student
           'passes --export=NONE on its own sbatch command line, not in the script',
           ((ANSWER,
             'Path("own_env.sh").write_text("""#!/bin/bash\n'
             '#SBATCH --job-name=own-env\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:02:00\n'
             'module purge\n'
             'module use "$SLURM_SUBMIT_DIR/modulefiles"\n'
             'module load pytorch\n'
             'python report.py\n'
             '""")\n'
             'reply = subprocess.run(["sbatch", "--parsable", "--wait", "--export=NONE", "own_env.sh"], capture_output=True,\n'
             '                       text=True, check=True)\n'
             'own_env_job = reply.stdout.strip().split(";")[0]\n'),),
           shows="3b.1, submitted from a shell without the course's python and module"),
    Mutant("03b", "ex1-solution", "absolute-python",  # as a student
           "runs the course's python by its full path instead of loading the module",
           ((ANSWER,
             'Path("own_env.sh").write_text(f"""#!/bin/bash\n'
             '#SBATCH --job-name=own-env\n'
             '#SBATCH --export=NONE\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:02:00\n'
             '{OURS} report.py\n'
             '""")\n'
             'reply = subprocess.run(["sbatch", "--parsable", "--wait", "own_env.sh"], capture_output=True, text=True, check=True)\n'
             'own_env_job = reply.stdout.strip().split(";")[0]\n'),),
           shows='TORCH_HOME is not where the pytorch module puts it'),
    Mutant("03b", "ex2-solution", "no-export",  # as a student
           'sets the cache variables as plain shell variables, without export',
           ((ANSWER,
             'fixed_fetch = """#!/bin/bash\n'
             '#SBATCH --job-name=fetch\n'
             '#SBATCH --partition=cpu\n'
             '#SBATCH --comment=myproject\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:30:00\n'
             'HF_HOME=/fsx/$USER/cache/huggingface\n'
             'PIP_CACHE_DIR=/fsx/$USER/cache/pip\n'
             'TORCH_HOME=/fsx/$USER/cache/torch\n'
             'srun python fetch_weights.py\n'
             '"""\n'),),
           shows='is set but not exported'),
    Mutant("03b", "ex2-solution", "after-srun",  # as a student
           'adds the cache lines at the end of the script, after the srun they are for',
           ((ANSWER,
             'fixed_fetch = """#!/bin/bash\n'
             '#SBATCH --job-name=fetch\n'
             '#SBATCH --partition=cpu\n'
             '#SBATCH --comment=myproject\n'
             '#SBATCH --output=%x-%j.out\n'
             '#SBATCH --time=00:30:00\n'
             'srun python fetch_weights.py\n'
             'export HF_HOME=/fsx/$USER/cache/huggingface\n'
             'export PIP_CACHE_DIR=/fsx/$USER/cache/pip\n'
             'export TORCH_HOME=/fsx/$USER/cache/torch\n'
             '"""\n'),),
           shows='is not set before srun python fetch_weights.py'),
    Mutant("03b", "ex3-solution", "bare-ch-run",  # as a student
           'runs ch-run IMAGE -- python3 inside.py as for docker: no folder bound in',
           ((ANSWER,
             'Path("in_image.sh").write_text("""#!/bin/bash\n'
             '#SBATCH --job-name=in-image\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=1\n'
             '#SBATCH --time=00:05:00\n'
             '#SBATCH --output=%x-%j.out\n'
             'srun ch-run "$1" -- python3 inside.py\n'
             '""")\n'
             'reply = subprocess.run(["sbatch", "--parsable", "--wait", "in_image.sh", str(IMAGE)], capture_output=True, text=True)\n'
             'in_image_job = reply.stdout.strip().split(";")[0]\n'),),
           shows='did not find inside.py'),
    Mutant("03b", "ex3-solution", "script-bound-only",  # as a student
           "binds the job's folder on /mnt and runs /mnt/inside.py, starting in the image's /",
           ((ANSWER,
             'Path("in_image.sh").write_text("""#!/bin/bash\n'
             '#SBATCH --job-name=in-image\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=1\n'
             '#SBATCH --time=00:05:00\n'
             '#SBATCH --output=%x-%j.out\n'
             'srun ch-run -b "$PWD:/mnt" "$1" -- python3 /mnt/inside.py\n'
             '""")\n'
             'reply = subprocess.run(["sbatch", "--parsable", "--wait", "in_image.sh", str(IMAGE)], capture_output=True, text=True)\n'
             'in_image_job = reply.stdout.strip().split(";")[0]\n'),),
           shows='the image is read-only'),
    # ------------------------------------------------------- 04 interactive salloc/srun
    Mutant("04", "ex1-solution", "two-tasks", "asks for one task per node: two tasks, not four",
           (("--ntasks-per-node=2", "--ntasks=2"),), shows="expected four node names"),
    Mutant("04", "ex1-solution", "no-srun", "runs printenv in salloc's shell, not as a step: one name",
           (("srun --label printenv", "printenv"),), shows="4.1: expected four node names"),
    Mutant("04", "ex1-solution", "no-label", "leaves out --label: the lines do not say which task wrote them",
           (("srun --label printenv", "srun printenv"),), shows="4.1: expected four node names, one per task"),
    Mutant("04", "ex2-solution", "hard-coded", "hard-codes the answer for this allocation: step 1 failed",
           (('    rows = sacct(job, "JobID,State")', '    return [f"{job}.1"]  # the one that failed\n'
             '    rows = sacct(job, "JobID,State")'),),
           shows="4.2: in an allocation whose steps all completed, failed_steps must find none"),
    Mutant("04", "ex2-solution", "no-srun", "runs `false` in the allocation's shell: no step fails",
           (("srun hostname; srun false; srun true", "srun hostname; false; srun true"),),
           shows="4.2: expected three steps, one per srun"),
    Mutant("04", "ex2-solution", "step-numbers", "returns the step numbers, not the step ids",
           (('return [r["JobID"] for r in numbered', 'return [r["JobID"].split(".")[1] for r in numbered'),),
           shows="4.2: failed_steps"),
    Mutant("04", "ex3-solution", "job-name-kept", "fixes the task layout but keeps salloc's job name",
           (("salloc --job-name=train ", "salloc "),), shows="Lightning did not detect Slurm"),
    Mutant("04", "ex3-solution", "no-srun", "starts the script in salloc's shell, without srun",
           (("--time=00:05:00 srun {PY}", "--time=00:05:00 {PY}"),), shows="4.3: use salloc, and srun inside it"),
    Mutant("04", "ex3-solution", "two-per-node", "two tasks per node: four processes for a Trainer of two",
           (("--ntasks-per-node=1", "--ntasks-per-node=2"),), shows="4.3: expected a line from each of two tasks"),
    Mutant("04", "ex1-solution", "allocation-nodelist",  # as a student
           "prints the allocation's node list ($SLURM_JOB_NODELIST), not the node each task runs on",
           ((ANSWER,
             'ex1_output = !salloc -N 2 --ntasks-per-node=2 -t 5 srun -l printenv SLURM_JOB_NODELIST 2>&1\n'
             'ex1_nodes = [line.split(": ", 1)[1] for line in sorted(ex1_output) if re.match(r"\\d+: ", line)]\n'),),
           shows="4.1: expected two tasks on each of two nodes"),
    Mutant("04", "ex1-solution", "expanded-on-login",  # as a student
           "echoes $SLURMD_NODENAME, which the notebook's shell expands (to nothing) before salloc runs",
           ((ANSWER,
             'ex1_output = !salloc --nodes=2 --ntasks-per-node=2 --time=00:05:00 srun --label echo $SLURMD_NODENAME 2>&1\n'
             'ex1_nodes = [line.split(":", 1)[1].strip() for line in sorted(ex1_output) if re.match(r"\\s*\\d+:", line)]\n'),),
           shows="4.1: expected two tasks on each of two nodes"),
    Mutant("04", "ex2-solution", "failed-only",  # as a student
           "counts only steps in state FAILED: a step killed by a signal (CANCELLED), OOM or TIMEOUT is missed",
           (('def failed_steps(job):\n'
             '    rows = sacct(job, "JobID,State")\n'
             '    numbered = [r for r in rows if re.fullmatch(rf"{job}\\.\\d+", r["JobID"])]\n'
             '    numbered.sort(key=lambda r: int(r["JobID"].split(".")[1]))\n'
             '    return [r["JobID"] for r in numbered if r["State"] != "COMPLETED"]\n',
             'def failed_steps(job):\n'
             '    out = subprocess.run(["sacct", "-j", str(job), "-n", "-P", "-o", "JobID,State"],\n'
             '                         capture_output=True, text=True).stdout\n'
             '    failed = []\n'
             '    for line in out.splitlines():\n'
             '        step_id, state = line.split("|")\n'
             '        if "." in step_id and step_id.split(".")[1].isdigit() and state == "FAILED":\n'
             '            failed.append(step_id)\n'
             '    return failed\n'),),
           shows="was killed by a signal and ended CANCELLED, not FAILED"),
    Mutant("04", "ex2-solution", "sorted-as-text",  # as a student
           "sorts the step ids as strings: .10 before .2",
           (('def failed_steps(job):\n'
             '    rows = sacct(job, "JobID,State")\n'
             '    numbered = [r for r in rows if re.fullmatch(rf"{job}\\.\\d+", r["JobID"])]\n'
             '    numbered.sort(key=lambda r: int(r["JobID"].split(".")[1]))\n'
             '    return [r["JobID"] for r in numbered if r["State"] != "COMPLETED"]\n',
             'def failed_steps(job):\n'
             '    rows = sacct(job, "JobID,State")\n'
             '    steps = [r for r in rows if r["JobID"].startswith(f"{job}.") and r["JobID"].split(".")[1].isdigit()]\n'
             '    return sorted(r["JobID"] for r in steps if r["State"] != "COMPLETED")\n'),),
           shows="4.2: the failed steps in step order, by number"),
    Mutant("04", "ex2-solution", "batch-counted", "leaves out .extern only: the batch script's own failure counts",
           (('    numbered = [r for r in rows if re.fullmatch(rf"{job}\\.\\d+", r["JobID"])]\n'
             '    numbered.sort(key=lambda r: int(r["JobID"].split(".")[1]))\n',
             '    numbered = [r for r in rows if "." in r["JobID"] and not r["JobID"].endswith(".extern")]\n'),),
           shows="4.2: only numbered steps count"),
    Mutant("04", "ex3-solution", "one-node",  # as a student
           "names the job but asks for two tasks, not two nodes: both tasks share one node",
           (('fixed_cmd = f"salloc --job-name=train --nodes=2 --ntasks-per-node=1 --time=00:05:00 srun {PY} whoami.py"\n',
             'fixed_cmd = f"salloc -J train -n 2 -t 5 srun {PY} whoami.py"\n'),),
           shows="4.3: one task on each of two nodes"),
    Mutant("04", "ex3-solution", "named-interactive",  # as a student
           "names the job 'interactive', as it is interactive work: a name Lightning ignores",
           (('fixed_cmd = f"salloc --job-name=train --nodes=2 --ntasks-per-node=1 --time=00:05:00 srun {PY} whoami.py"\n',
             'fixed_cmd = f"salloc --job-name=interactive --nodes=2 --ntasks-per-node=1 --time=5 srun {PY} whoami.py"\n'),),
           shows="4.3: Lightning did not detect Slurm"),
    # -------------------------------------------------- 05 Jupyter on a compute node
    Mutant("05", "ex1-solution", "one-node-only", "writes a Host entry for ng20304 alone, not for every GPU node",
           (("Host ng*", "Host ng20304"),), shows="every GPU node goes through the login node"),
    Mutant("05", "ex1-solution", "no-jump", "forgets ProxyJump for the GPU nodes",
           (("    User jdoe\n    ProxyJump narval\n", "    User jdoe\n"),), shows="5.1: ng20304 must be reached through"),
    Mutant("05", "ex1-solution", "alias-as-host", "writes the alias as HostName, not the profile's login host",
           (("HostName {login_host}", "HostName narval"),), shows="5.1: Host narval needs HostName"),
    Mutant("05", "ex2-solution", "skips-preferred", "starts looking one port above the preferred one",
           (("range(preferred, 65536)", "range(preferred + 1, 65536)"),),
           shows="a free preferred port is returned as it is"),
    Mutant("05", "ex2-solution", "no-range-check", "accepts any number as a port",
           (('        raise ValueError(f"port {preferred!r} is not in 1024..65535")\n', "        pass\n"),),
           shows="5.2: pick_local_port(80) should raise ValueError"),
    Mutant("05", "ex2-solution", "never-checks", "returns the preferred port without checking that it is free",
           (("        if port_is_free(port):", "        if True:"),), shows="is in use: return the next free port"),
    Mutant("05", "ex3-solution", "from-notebook", "fetches from the notebook, not from a step on the node",
           (('["srun", "--overlap", "--ntasks=1", PY, "ex3_fetch.py",', '[PY, "ex3_fetch.py",'),),
           shows="no step ran in the job", own_network="CalledProcessError"),  # 127.0.0.1 is the login node
    Mutant("05", "ex3-solution", "no-umask", "makes the job's folder without umask 077: others can read the token",
           (("umask 077\n", ""),), shows="5.3: the job's folder must have mode 700"),
    Mutant("05", "ex3-solution", "token-in-log", "prints the token into the job's log, to find it later",
           (('export JUPYTER_TOKEN="$({PY} -c \'import secrets; print(secrets.token_urlsafe(32))\')"\n',
             'export JUPYTER_TOKEN="$({PY} -c \'import secrets; print(secrets.token_urlsafe(32))\')"\n'
             'echo "token: $JUPYTER_TOKEN"\n'),), shows="5.3: the token is printed in"),
    Mutant("05", "ex1-solution", "host-star",  # as a student
           'routes every host (Host *) through the login node, not only the GPU nodes',
           ((ANSWER,
             'login_host = load_profile("narval").login_hosts[0]\n'
             'narval_config = f"""\n'
             'Host narval\n'
             '    HostName {login_host}\n'
             '    ProxyJump none\n'
             '\n'
             'Host *\n'
             '    User jdoe\n'
             '    ProxyJump narval\n'
             '"""\n'),),
           shows='5.1: ssh github.com would jump through'),
    Mutant("05", "ex1-solution", "global-user",  # as a student
           'sets User jdoe for every host, above the Host entries',
           ((ANSWER,
             'login_host = load_profile("narval").login_hosts[0]\n'
             'narval_config = f"""User jdoe\n'
             '\n'
             'Host narval\n'
             '    HostName {login_host}\n'
             '\n'
             'Host ng*\n'
             '    ProxyJump narval\n'
             '"""\n'),),
           shows='5.1: ssh github.com would log in as jdoe'),
    Mutant("05", "ex1-solution", "fixed-hostname",  # as a student
           'a fixed HostName under Host ng*: every GPU node is ng20304',
           ((ANSWER,
             'login_host = load_profile("narval").login_hosts[0]\n'
             'narval_config = f"""\n'
             'Host narval\n'
             '    HostName {login_host}\n'
             '    User jdoe\n'
             '\n'
             'Host ng*\n'
             '    HostName ng20304\n'
             '    User jdoe\n'
             '    ProxyJump narval\n'
             '"""\n'),),
           shows='5.1: ssh ng10101 must reach ng10101 itself'),
    Mutant("05", "ex2-solution", "connect-test",  # as a student
           'calls a port free when nothing answers a connect: a bound port that does not listen yet is taken',
           ((ANSWER,
             'def pick_local_port(preferred):\n'
             '    if not 1024 <= preferred <= 65535:\n'
             '        raise ValueError(f"{preferred} is not a port I may use")\n'
             '    port = preferred\n'
             '    while port <= 65535:\n'
             '        with socket.socket() as sock:\n'
             '            if sock.connect_ex(("127.0.0.1", port)) != 0:   # nobody answers: free\n'
             '                return port\n'
             '        port += 1\n'
             '    raise ValueError("no free port")\n'),),
           shows='is bound by another program, not listening yet'),
    Mutant("05", "ex2-solution", "plus-one",  # as a student
           'when the preferred port is taken, returns the one above it without checking it',
           ((ANSWER,
             'def pick_local_port(preferred):\n'
             '    if preferred < 1024 or preferred > 65535:\n'
             '        raise ValueError("ports are 1024..65535")\n'
             '    with socket.socket() as sock:\n'
             '        try:\n'
             '            sock.bind(("127.0.0.1", preferred))\n'
             '            return preferred\n'
             '        except OSError:\n'
             '            return preferred + 1   # the next one\n'),),
           shows='in use: return the next free port above them'),
    Mutant("05", "ex2-solution", "any-port",  # as a student
           'when the preferred port is taken, lets the system pick any free port',
           ((ANSWER,
             'def pick_local_port(preferred):\n'
             '    if not 1024 <= preferred <= 65535:\n'
             '        raise ValueError(f"port {preferred} is outside 1024..65535")\n'
             '    with socket.socket() as sock:\n'
             '        try:\n'
             '            sock.bind(("127.0.0.1", preferred))\n'
             '        except OSError:\n'
             '            sock.bind(("127.0.0.1", 0))   # let the system choose one\n'
             '        return sock.getsockname()[1]\n'),),
           shows='in use: return the next free port above'),
    Mutant("05", "ex3-solution", "fixed-port",  # as a student
           'starts the server on a fixed port of its own (8891): a second server on the node cannot listen',
           ((ANSWER,
             'Path("jupyter.sh").write_text(f"""#!/bin/bash\n'
             '#SBATCH --job-name=ex3\n'
             '#SBATCH --time=00:05:00\n'
             'umask 077\n'
             'mkdir ex3-$SLURM_JOB_ID\n'
             'export JUPYTER_RUNTIME_DIR=$PWD/ex3-$SLURM_JOB_ID\n'
             'export JUPYTER_TOKEN=$({PY} -c "import secrets; print(secrets.token_hex(24))")\n'
             'srun {PY} tiny_server.py --ip 127.0.0.1 --port 8891\n'
             '""")\n'
             'ex3_job = subprocess.run(["sbatch", "--parsable", "jupyter.sh"], capture_output=True, text=True, check=True).stdout.strip()\n'
             'ex3_server = wait_for_server_file(f"ex3-{ex3_job}", timeout=120)\n'
             'Path("fetch.py").write_text("""import json, sys, urllib.request\n'
             'from hpcnb.lessons.tunnel import read_server_file\n'
             'info = read_server_file(sys.argv[1])\n'
             'req = urllib.request.Request(f"http://127.0.0.1:{info.port}/api/status", headers={"Authorization": f"token {info.token}"})\n'
             'with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as reply:\n'
             '    print(reply.status, json.dumps(json.load(reply)))\n'
             '""")\n'
             'res = subprocess.run(["srun", "--overlap", "-n", "1", PY, "fetch.py", f"ex3-{ex3_job}"], capture_output=True,\n'
             '                     text=True, env={**os.environ, "SLURM_JOB_ID": ex3_job}, check=True)\n'
             'code, body = res.stdout.split(" ", 1)\n'
             'ex3_status, ex3_answer = int(code), json.loads(body)\n'
             'subprocess.run(["scancel", ex3_job])\n'
             'while subprocess.run(["squeue", "-h", "-j", ex3_job], capture_output=True, text=True).stdout.strip():\n'
             '    time.sleep(0.5)\n'),),
           shows='starts the server on the fixed port 8891'),
    Mutant("05", "ex3-solution", "token-from-notebook",  # as a student
           "makes the token in the notebook and writes it into the job's script",
           ((ANSWER,
             'import secrets\n'
             'token = secrets.token_urlsafe(32)\n'
             'Path("ex3.sh").write_text(f"""#!/bin/bash\n'
             '#SBATCH --time=00:05:00\n'
             '#SBATCH --output=ex3-%j.log\n'
             'umask 077\n'
             'mkdir ex3-$SLURM_JOB_ID\n'
             'export JUPYTER_RUNTIME_DIR=$PWD/ex3-$SLURM_JOB_ID JUPYTER_TOKEN={token}\n'
             'exec {PY} tiny_server.py --ip 127.0.0.1 --port 0\n'
             '""")\n'
             'ex3_job = subprocess.run(["sbatch", "--parsable", "ex3.sh"], capture_output=True, text=True, check=True).stdout.strip()\n'
             'ex3_server = wait_for_server_file(f"ex3-{ex3_job}", timeout=120)\n'
             'Path("fetch.py").write_text("""import json, sys, urllib.request\n'
             'from hpcnb.lessons.tunnel import read_server_file\n'
             'info = read_server_file(sys.argv[1])\n'
             'req = urllib.request.Request(f"http://127.0.0.1:{info.port}/api/status", headers={"Authorization": f"token {info.token}"})\n'
             'with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as reply:\n'
             '    print(reply.status, json.dumps(json.load(reply)))\n'
             '""")\n'
             'res = subprocess.run(["srun", "--overlap", "-n", "1", PY, "fetch.py", f"ex3-{ex3_job}"], capture_output=True,\n'
             '                     text=True, env={**os.environ, "SLURM_JOB_ID": ex3_job}, check=True)\n'
             'code, body = res.stdout.split(" ", 1)\n'
             'ex3_status, ex3_answer = int(code), json.loads(body)\n'
             'subprocess.run(["scancel", ex3_job])\n'
             'while subprocess.run(["squeue", "-h", "-j", ex3_job], capture_output=True, text=True).stdout.strip():\n'
             '    time.sleep(0.5)\n'),),
           shows='5.3: the token is written in ex3.sh'),
    # ------------------------------------------------------- 06 single-device tuning
    Mutant("06", "ex1-solution", "plain-srun", "a plain srun: on Slurm 22.05-23.02 the step gets 1 CPU",
           (('srun -c "$SLURM_CPUS_PER_TASK" python', "srun python"),), shows="pass the CPUs on"),
    Mutant("06", "ex1-solution", "one-cpu", "asks for one CPU per task, less than the task says",
           (("#SBATCH --cpus-per-task=2", "#SBATCH --cpus-per-task=1"),), shows="6.1: ask for 2 CPUs per task"),
    Mutant("06", "ex1-solution", "no-srun", "runs python in the batch shell, not as a step",
           (('srun -c "$SLURM_CPUS_PER_TASK" python', "python"),), shows="6.1: run the python line as exactly one job step"),
    Mutant("06", "ex1-solution", "srun-cpus-env", "exports SRUN_CPUS_PER_TASK, as the lesson offers: right",
           (('srun -c "$SLURM_CPUS_PER_TASK" python', 'export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK\nsrun python'),),
           passes=True),
    Mutant("06", "ex2-solution", "swallows-errors", "catches every exception, not only out-of-memory errors",
           (("except (torch.cuda.OutOfMemoryError, MemoryError):", "except Exception:"),),
           shows="only out-of-memory errors end the search"),
    Mutant("06", "ex2-solution", "returns-failing", "returns the batch that ran out of memory, not the last that fit",
           (("            break\n", "            return batch\n"),), shows="6.2: batches above 300 run out of memory"),
    Mutant("06", "ex2-solution", "fixed-start", "starts from the lesson's 16, not from start",
           (("best, batch = None, start", "best, batch = None, 16"),), shows="6.2: begin at start"),
    Mutant("06", "ex3-solution", "over-loop", "divides by the training loop's time, not loading + step",
           (("return load / (load + step)", 'return load / seconds["training loop"]'),),
           shows="not / the training loop"),
    Mutant("06", "ex3-solution", "by-position", "takes the rows by position, not by their setting",
           (('load, step = seconds["data loading only"], seconds["model step only"]',
             'load, step = rows[0]["seconds"], rows[1]["seconds"]'),),
           shows="6.3: find the rows by their setting"),
    Mutant("06", "ex3-solution", "percent", "returns a percentage, not a fraction",
           (("return load / (load + step)", "return 100 * load / (load + step)"),), shows="6.3: share = loading / (loading + step)"),
    Mutant("06", "ex1-solution", "fixed-cpus",  # as a student
           "passes a fixed 2 to srun, not the job's $SLURM_CPUS_PER_TASK",
           ((ANSWER,
             'SCRIPT = """#!/bin/bash\n'
             '#SBATCH -c 2\n'
             '#SBATCH -t 5\n'
             'srun --cpus-per-task=2 python -c "from hpcnb.lessons.tuning import dataloader_workers; print(f\'workers={dataloader_workers(reserve=1)}\')"\n'
             '"""\n'),),
           shows='6.1: submitted with sbatch --cpus-per-task=1'),
    Mutant("06", "ex1-solution", "fixed-srun-env",  # as a student
           'exports SRUN_CPUS_PER_TASK=2, a number of its own',
           ((ANSWER,
             'SCRIPT = """#!/bin/bash\n'
             '#SBATCH --cpus-per-task=2\n'
             '#SBATCH --time=5:00\n'
             'export SRUN_CPUS_PER_TASK=2\n'
             'srun python -c "from hpcnb.lessons.tuning import dataloader_workers; print(f\'workers={dataloader_workers(reserve=1)}\')"\n'
             '"""\n'),),
           shows='6.1: submitted with sbatch --cpus-per-task=1'),
    Mutant("06", "ex1-solution", "two-tasks",
           'asks for two tasks as well: the python line runs twice',
           ((ANSWER,
             'SCRIPT = """#!/bin/bash\n'
             '#SBATCH --ntasks=2\n'
             '#SBATCH --cpus-per-task=2\n'
             '#SBATCH --time=00:05:00\n'
             'srun -c $SLURM_CPUS_PER_TASK python -c "from hpcnb.lessons.tuning import dataloader_workers; print(f\'workers={dataloader_workers(reserve=1)}\')"\n'
             '"""\n'),),
           shows='6.1: one task runs the python line once'),
    Mutant("06", "ex2-solution", "oom-by-message",  # as a student
           "catches RuntimeError and looks for 'out of memory' in its text: a host MemoryError escapes",
           ((ANSWER,
             '    batch, best = start, None\n'
             '    while batch <= limit:\n'
             '        try:\n'
             '            measure(batch)\n'
             '        except RuntimeError as err:\n'
             '            if "out of memory" in str(err):\n'
             '                break\n'
             '            raise\n'
             '        best = batch\n'
             '        batch *= 2\n'
             '    return best\n'),),
           shows="6.2: a MemoryError (the host's memory ran out) ends the search too"),
    Mutant("06", "ex2-solution", "runtime-error",  # as a student
           "catches every RuntimeError (CUDA's out-of-memory error is one): a CUDA crash ends the search",
           ((ANSWER,
             '    best = None\n'
             '    for k in range(64):\n'
             '        batch = start * 2**k\n'
             '        if batch > limit:\n'
             '            break\n'
             '        try:\n'
             '            measure(batch)\n'
             '            best = batch\n'
             '        except (RuntimeError, MemoryError):\n'
             '            break\n'
             '    return best\n'),),
           shows='6.2: a RuntimeError that is not out of memory (a CUDA error) must propagate'),
    Mutant("06", "ex3-solution", "loop-minus-step",  # as a student
           'takes loading as training loop minus model step, as a share of the loop',
           ((ANSWER,
             '    loop = next(r["seconds"] for r in rows if r["setting"] == "training loop")\n'
             '    step = next(r["seconds"] for r in rows if r["setting"] == "model step only")\n'
             '    return (loop - step) / loop\n'),),
           shows='6.3: share = loading / (loading + step), not / the training loop'),
    Mutant("06", "ex3-solution", "rounded",  # as a student
           'rounds the share to two decimals',
           ((ANSWER,
             '    load = [r["seconds"] for r in rows if "loading" in r["setting"]][0]\n'
             '    step = [r["seconds"] for r in rows if "step" in r["setting"]][0]\n'
             '    return round(load / (load + step), 2)\n'),),
           shows='return it unrounded'),
    # ---------------------------------------------------------- 07 TF32 and precision
    Mutant("07", "ex1-solution", "12-bits", "clears 12 mantissa bits instead of 13",
           (("i & ~0x1FFF", "i & ~0xFFF"),), shows="7.1: keep the sign, the exponent"),
    Mutant("07", "ex1-solution", "rounds", "rounds to nearest (the library's default), not toward zero",
           ((ANSWER,
             "    return precision.to_tf32(x, rounding=\"nearest\")\n"),), shows="7.1: "),
    Mutant("07", "ex1-solution", "int-bits", "returns the masked bits as int32",
           (("(i & ~0x1FFF).view(torch.float32)", "(i & ~0x1FFF)"),), shows="7.1: return float32"),
    Mutant("07", "ex2-solution", "seed-ignored", "always draws the matrices from seed 0",
           (("torch.Generator().manual_seed(seed)", "torch.Generator().manual_seed(0)"),), shows="7.2: use the seed"),
    Mutant("07", "ex2-solution", "one-operand", "rounds one operand to TF32, not both",
           (("precision.to_tf32(a) @ precision.to_tf32(b)", "precision.to_tf32(a) @ b"),),
           shows="7.2: the same experiment in hpcnb.lessons.precision gives"),
    Mutant("07", "ex2-solution", "ratio-from-lesson", "copies a ratio from the lesson instead of computing it",
           (('RATIO = rel_error(256, "tf32") / rel_error(256, "fp32")', "RATIO = 1000"),),
           shows="7.2: RATIO = rel_error(256, 'tf32') / rel_error(256, 'fp32')"),
    Mutant("07", "ex3-solution", "no-finally", "restores the level only when the block ends normally",
           (("    try:\n        yield\n    finally:\n        torch.set_float32_matmul_precision(saved)",
             "    yield\n    torch.set_float32_matmul_precision(saved)"),),
           shows="restore the level after an exception too"),
    Mutant("07", "ex3-solution", "fixed-restore", "restores 'highest', PyTorch's default, not the level it found",
           (("torch.set_float32_matmul_precision(saved)", 'torch.set_float32_matmul_precision("highest")'),),
           shows="7.3: entered at 'medium', left at 'highest'"),
    Mutant("07", "ex3-solution", "never-sets", "saves and restores, but never sets the level asked for",
           (("    torch.set_float32_matmul_precision(level)\n", ""),), shows="7.3: inside the block the level"),
    Mutant("07", "ex1-solution", "struct-loop",  # as a student
           "truncates each number's bits with struct, in a loop over x.tolist(): a 2-D tensor fails",
           ((ANSWER,
             '    out = []\n'
             '    for v in x.tolist():\n'
             '        i = struct.unpack(">I", struct.pack(">f", v))[0] & ~0x1FFF\n'
             '        out.append(struct.unpack(">f", struct.pack(">I", i))[0])\n'
             '    return torch.tensor(out, dtype=torch.float32)\n'),),
           shows='7.1: a 2-D tensor (here transposed, 4 x 3) must work too'),
    Mutant("07", "ex1-solution", "frexp",  # as a student
           'truncates with float arithmetic (frexp, trunc, ldexp): wrong on subnormal numbers',
           ((ANSWER,
             '    mantissa, exponent = torch.frexp(x)\n'
             '    return torch.ldexp(torch.trunc(mantissa * 2048) / 2048, exponent)\n'),),
           shows='7.1: on -0.0, infinities, NaN and subnormal numbers too'),
    Mutant("07", "ex1-solution", "in-place",
           "clears the bits in place on x's own view and returns x",
           ((ANSWER,
             '    i = x.view(torch.int32)\n'
             '    i &= ~0x1FFF\n'
             '    return x\n'),),
           shows='7.1: tf32_truncate changed the tensor it was given'),
    Mutant("07", "ex2-solution", "float64-draws",  # as a student
           "draws A and B in float64 and casts them down: other matrices than the task's",
           ((ANSWER,
             '    g = torch.Generator().manual_seed(seed)\n'
             '    A = torch.randn(n, n, generator=g, dtype=torch.float64)\n'
             '    B = torch.randn(n, n, generator=g, dtype=torch.float64)\n'
             '    exact = A @ B\n'
             '    if fmt == "tf32":\n'
             '        C = precision.to_tf32(A.float()) @ precision.to_tf32(B.float())\n'
             '    else:\n'
             '        C = A.float() @ B.float()\n'
             '    return (torch.linalg.norm(C.double() - exact) / torch.linalg.norm(exact)).item()\n'),),
           shows="7.2: rel_error(48, 'fp32', seed=3) should be"),
    Mutant("07", "ex2-solution", "same-matrix",  # as a student
           'seeds a new generator for each matrix: B is A',
           ((ANSWER,
             '    a = torch.randn(n, n, generator=torch.Generator().manual_seed(seed))\n'
             '    b = torch.randn(n, n, generator=torch.Generator().manual_seed(seed))\n'
             '    exact = a.double() @ b.double()\n'
             '    c = precision.to_tf32(a) @ precision.to_tf32(b) if fmt == "tf32" else a @ b\n'
             '    return float(torch.linalg.norm(c.double() - exact) / torch.linalg.norm(exact))\n'),),
           shows="7.2: rel_error(48, 'fp32', seed=3) should be"),
    Mutant("07", "ex3-solution", "swallows",  # as a student
           "catches the block's exception to print it: the error vanishes",
           ((ANSWER,
             '    old = torch.get_float32_matmul_precision()\n'
             '    torch.set_float32_matmul_precision(level)\n'
             '    try:\n'
             '        yield\n'
             '    except Exception as err:\n'
             '        print("error inside the block:", err)\n'
             '    finally:\n'
             '        torch.set_float32_matmul_precision(old)\n'),),
           shows="7.3: the block's exception vanished"),
    Mutant("07", "ex3-solution", "saved-on-function",  # as a student
           'keeps the saved level on the function itself: nested blocks overwrite it',
           ((ANSWER,
             '    matmul_precision.saved = torch.get_float32_matmul_precision()\n'
             '    torch.set_float32_matmul_precision(level)\n'
             '    try:\n'
             '        yield\n'
             '    finally:\n'
             '        torch.set_float32_matmul_precision(matmul_precision.saved)\n'),),
           shows='7.3: nested blocks (high, then medium inside it)'),
    # ---------------------------------------------------------------------- 08 DDP
    Mutant("08", "ex1-solution", "port-no-modulo", "derives the port as 16000 + job id: beyond 65535 soon",
           (('16000 + int(env["SLURM_JOB_ID"]) % 16000', '16000 + int(env["SLURM_JOB_ID"])'),),
           shows="8.1: under srun, take rank, local rank and world size"),
    Mutant("08", "ex1-solution", "brackets-by-hand", "parses the node list itself: fine for node[1-2] only",
           (('    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, '
             'check=True)\n    return out.stdout.split()[0]',
             '    return nodelist.split(",")[0].replace("[", "").split("-")[0]'),),
           shows="do not parse the list yourself"),
    Mutant("08", "ex2-solution", "no-set-epoch", "never calls sampler.set_epoch: every epoch sees the same order",
           (("    sampler.set_epoch(epoch)\n", ""),), shows="call sampler.set_epoch(epoch) every epoch"),
    Mutant("08", "ex3-solution", "one-worker-per-node", "starts one worker per torchrun, not two",
           (("--nproc-per-node=2", "--nproc-per-node=1"),), shows="8.3: expected 4 workers on 2 nodes"),
    Mutant("08", "ex1-solution", "slurm-only", "reads Slurm's variables only: under torchrun every worker of a node is rank 0",
           (("return int(env[torchrun] if torchrun in env else env[slurm])", "return int(env[slurm])"),),
           shows="8.1: under torchrun, RANK, LOCAL_RANK, WORLD_SIZE and MASTER_PORT win"),
    Mutant("08", "ex1-solution", "no-offset", "drops the 16000 from the port: ports below 1024 need root",
           (('16000 + int(env["SLURM_JOB_ID"]) % 16000', 'int(env["SLURM_JOB_ID"]) % 16000'),),
           shows="8.1: under srun, take rank, local rank and world size"),
    Mutant("08", "ex2-solution", "whole-dataset", "gives the sampler one replica: every rank trains on all the data",
           (("DistributedSampler(data, num_replicas=world_size, rank=rank,", "DistributedSampler(data, num_replicas=1, rank=0,"),),
           shows="8.2: with 2 processes each should train on half the data"),
    Mutant("08", "ex2-solution", "batch-per-rank", "keeps 64 per process: the global batch doubles with 2 processes",
           (("batch_size=64 // world_size", "batch_size=64"),), shows="8.2: 1 and 2 processes end with different weights"),
    Mutant("08", "ex3-solution", "no-srun", "starts torchrun in the batch shell, without srun: the first node only",
           (("srun --ntasks-per-node=1 --cpus-per-task=$SLURM_CPUS_PER_TASK --kill-on-bad-exit=1 \\\\\n    torchrun",
             "torchrun"),), shows="8.3: start torchrun with srun"),
    Mutant("08", "ex3-solution", "rendezvous-at-localhost", "meets at localhost: on two nodes each waits at its own",
           (("--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT", "--rdzv-endpoint=localhost:$MASTER_PORT"),),
           shows="SL206 the rendezvous is at localhost on 2 nodes"),
    Mutant("08", "ex3-solution", "one-node", "asks for one node, not two",
           (("#SBATCH --nodes=2\n", "#SBATCH --nodes=1\n"),), shows="8.3: expected 4 workers on 2 nodes"),
    Mutant("08", "ex4-solution", "every-rank", "every rank writes into the run's folder: an event file per process",
           (("SummaryWriter(logdir) if rank == 0 else None", "SummaryWriter(logdir)"),),
           shows="8.4: expected one event file, rank 0's"),
    Mutant("08", "ex4-solution", "rank-folders", "each rank writes a run of its own (runs/ex4-0, runs/ex4-1)",
           (("SummaryWriter(logdir) if rank == 0 else None", 'SummaryWriter(f"{logdir}-{rank}")'),),
           shows="8.4: expected one event file, rank 0's"),
    Mutant("08", "ex4-solution", "last-rank", "rank 1 writes, not rank 0: one file, but not rank 0's curve",
           (("if rank == 0 else None", "if rank == 1 else None"),), shows="8.4: the curve must be rank 0's losses"),
    Mutant("08", "ex1-solution", "truthy-or",  # as a student
           "falls back to Slurm's variable when torchrun's is 0: `int(env.get('RANK', 0)) or ...`",
           ((ANSWER,
             'def world_from_env(env):\n'
             '    rank = int(env.get("RANK", 0)) or int(env["SLURM_PROCID"])\n'
             '    local_rank = int(env.get("LOCAL_RANK", 0)) or int(env["SLURM_LOCALID"])\n'
             '    world_size = int(env.get("WORLD_SIZE", 0)) or int(env["SLURM_NTASKS"])\n'
             '    master_port = int(env.get("MASTER_PORT", 0)) or 16000 + int(env["SLURM_JOB_ID"]) % 16000\n'
             '    return {"rank": rank, "local_rank": local_rank, "world_size": world_size, "master_port": master_port}\n'
             '\n'
             '\n'
             'def master_addr(nodelist):\n'
             '    return subprocess.check_output(["scontrol", "show", "hostnames", nodelist], text=True).splitlines()[0]\n'),),
           shows='8.1: under torchrun RANK=0 and LOCAL_RANK=0 win over SLURM_PROCID=1'),
    Mutant("08", "ex1-solution", "regex-nodelist",  # as a student
           'expands the first entry of the node list with a regular expression: one bracket group only',
           ((ANSWER,
             'def world_from_env(env):\n'
             '    if "RANK" in env:\n'
             '        names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")\n'
             '        return dict(zip(("rank", "local_rank", "world_size", "master_port"), (int(env[n]) for n in names)))\n'
             '    return {"rank": int(env["SLURM_PROCID"]), "local_rank": int(env["SLURM_LOCALID"]),\n'
             '            "world_size": int(env["SLURM_NTASKS"]), "master_port": 16000 + int(env["SLURM_JOB_ID"]) % 16000}\n'
             '\n'
             '\n'
             'def master_addr(nodelist):\n'
             '    # the first entry, and the first number of its brackets: gpu[07-08],cpu3 -> gpu07\n'
             '    prefix, ranges = re.match(r"([^,\\[]+)(?:\\[([^\\]]+)\\])?", nodelist).groups()\n'
             '    return prefix + re.split(r"[,-]", ranges)[0] if ranges else prefix\n'),),
           shows='8.1: the first host of rack[1-2]-gpu[3-4] is rack1-gpu3'),
    Mutant("08", "ex2-solution", "tutorial-port",  # as a student
           "follows PyTorch's tutorial: init_method='tcp://localhost:29500', one port for every job",
           ((ANSWER,
             'Path("ddp.py").write_text(\'\'\'\n'
             'import argparse\n'
             'import os\n'
             '\n'
             'import torch\n'
             'import torch.distributed as dist\n'
             'import torch.nn.functional as F\n'
             'from torch.nn.parallel import DistributedDataParallel\n'
             'from torch.utils.data import DataLoader\n'
             'from torch.utils.data.distributed import DistributedSampler\n'
             '\n'
             'from hpcnb.lessons import training\n'
             'from hpcnb.lessons.distributed import leave\n'
             '\n'
             'parser = argparse.ArgumentParser()\n'
             'parser.add_argument("--out", default="ddp")\n'
             'args = parser.parse_args()\n'
             'torch.set_num_threads(1)\n'
             '\n'
             'rank = int(os.environ["SLURM_PROCID"])\n'
             'world_size = int(os.environ["SLURM_NTASKS"])\n'
             'dist.init_process_group("gloo", init_method="tcp://localhost:29500", rank=rank, world_size=world_size)\n'
             '\n'
             'data = training.make_dataset(samples=1024)\n'
             'sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, seed=0)\n'
             'loader = DataLoader(data, batch_size=64 // world_size, sampler=sampler)\n'
             'model = DistributedDataParallel(training.make_model(hidden=64))\n'
             'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
             '\n'
             'seen = 0\n'
             'for epoch in range(2):\n'
             '    sampler.set_epoch(epoch)\n'
             '    for x, y in loader:\n'
             '        optimizer.zero_grad()\n'
             '        loss = F.mse_loss(model(x), y)\n'
             '        loss.backward()\n'
             '        optimizer.step()\n'
             '        seen += x.shape[0]\n'
             '\n'
             'if rank == 0:\n'
             '    training.save_result(args.out, model, world_size=world_size, samples_per_epoch=seen // 2)\n'
             '    print("saved", args.out)\n'
             'leave()\n'
             "''')\n"),),
           shows='8.2: jobs 61234567 and 61234568 both use the port 29500'),
    Mutant("08", "ex2-solution", "local-ids",  # as a student
           'one node, so takes the local ids: RANK from SLURM_LOCALID, WORLD_SIZE from SLURM_NTASKS_PER_NODE',
           ((ANSWER,
             'Path("ddp.py").write_text(\'\'\'\n'
             'import argparse\n'
             'import os\n'
             '\n'
             'import torch\n'
             'import torch.distributed as dist\n'
             'import torch.nn.functional as F\n'
             'from torch.nn.parallel import DistributedDataParallel\n'
             'from torch.utils.data import DataLoader\n'
             'from torch.utils.data.distributed import DistributedSampler\n'
             '\n'
             'from hpcnb.lessons import training\n'
             'from hpcnb.lessons.distributed import leave\n'
             '\n'
             'parser = argparse.ArgumentParser()\n'
             'parser.add_argument("--out", default="ddp")\n'
             'args = parser.parse_args()\n'
             'torch.set_num_threads(1)\n'
             '\n'
             "# one node: the node's ids are the job's\n"
             'os.environ["RANK"] = os.environ["SLURM_LOCALID"]\n'
             'os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS_PER_NODE"]\n'
             'os.environ["MASTER_ADDR"] = "localhost"\n'
             'os.environ["MASTER_PORT"] = str(16000 + int(os.environ["SLURM_JOB_ID"]) % 16000)\n'
             'dist.init_process_group(backend="gloo")\n'
             'rank, world_size = dist.get_rank(), dist.get_world_size()\n'
             '\n'
             'data = training.make_dataset(samples=1024)\n'
             'sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, seed=0)\n'
             'loader = DataLoader(data, batch_size=64 // world_size, sampler=sampler)\n'
             'model = DistributedDataParallel(training.make_model(hidden=64))\n'
             'optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
             '\n'
             'seen = 0\n'
             'for epoch in range(2):\n'
             '    sampler.set_epoch(epoch)\n'
             '    for x, y in loader:\n'
             '        optimizer.zero_grad()\n'
             '        loss = F.mse_loss(model(x), y)\n'
             '        loss.backward()\n'
             '        optimizer.step()\n'
             '        seen += x.shape[0]\n'
             '\n'
             'if rank == 0:\n'
             '    training.save_result(args.out, model, world_size=world_size, samples_per_epoch=seen // 2)\n'
             '    print("saved", args.out)\n'
             'leave()\n'
             "''')\n"),),
           shows='8.2: as task 1 of a job submitted with --ntasks=2'),
    Mutant("08", "ex3-solution", "port-29500",  # as a student
           "meets at the first node on torchrun's usual port 29500: two jobs on one node collide",
           ((ANSWER,
             'torchrun_script = """#!/bin/bash\n'
             '#SBATCH -J ex3\n'
             '#SBATCH -N 2\n'
             '#SBATCH --ntasks-per-node=1\n'
             '#SBATCH -c 2\n'
             '#SBATCH -t 5\n'
             '#SBATCH -o ex3-%j.out\n'
             'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
             'srun --kill-on-bad-exit=1 torchrun --nnodes=2 --nproc_per_node=2 --rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d --rdzv_endpoint=$head:29500 -m hpcnb.scripts.ddp_train --epochs 1 --out ex3\n'
             '"""\n'),),
           shows='8.3: jobs 61234567 and 61234568 both meet at port 29500'),
    Mutant("08", "ex3-solution", "sed-nodelist",  # as a student
           'cuts the first node out of $SLURM_JOB_NODELIST with sed: right for node[1-2] only',
           ((ANSWER,
             'torchrun_script = """#!/bin/bash\n'
             '#SBATCH --job-name=ex3\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=1\n'
             '#SBATCH --cpus-per-task=2\n'
             '#SBATCH --time=00:05:00\n'
             '#SBATCH --output=%x-%j.out\n'
             "MASTER_ADDR=$(echo $SLURM_JOB_NODELIST | sed -e 's/\\\\[//' -e 's/[-,].*//')\n"
             'MASTER_PORT=$((16000 + SLURM_JOB_ID % 16000))\n'
             'srun --kill-on-bad-exit=1 torchrun --nnodes=2 --nproc-per-node=2 --rdzv-id=$SLURM_JOB_ID --rdzv-backend=c10d \\\\\n'
             '    --rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT -m hpcnb.scripts.ddp_train --epochs 1 --out ex3\n'
             '"""\n'),),
           shows='8.3: on the nodes gpu-a[07-08] torchrun must meet at gpu-a07'),
    Mutant("08", "ex4-solution", "slurm-procid",  # as a student
           'asks SLURM_PROCID, not the rank it is given: under torchrun every worker of the first node is 0',
           ((ANSWER,
             'Path("board.py").write_text(\'\'\'\n'
             'import os\n'
             '\n'
             'from torch.utils.tensorboard import SummaryWriter\n'
             '\n'
             '\n'
             'def writer_for(rank, logdir):\n'
             '    if os.environ.get("SLURM_PROCID", "0") == "0":\n'
             '        return SummaryWriter(logdir)\n'
             '    return None\n'
             "''')\n"),),
           shows='8.4: under torchrun on 2 nodes, rank 1 (node 1, worker 1) got a writer'),
    Mutant("08", "ex4-solution", "local-rank",  # as a student
           'lets the first process of each node log (local rank 0): one curve per node',
           ((ANSWER,
             'Path("board.py").write_text(\'\'\'\n'
             'import os\n'
             '\n'
             'from torch.utils.tensorboard import SummaryWriter\n'
             '\n'
             '\n'
             'def writer_for(rank, logdir):\n'
             '    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", rank)))\n'
             '    return SummaryWriter(log_dir=logdir) if local_rank == 0 else None\n'
             "''')\n"),),
           shows='8.4: under torchrun on 2 nodes, rank 2 (node 2, worker 0) got a writer'),
    # ---------------------------------------------------------------- 09 Lightning
    Mutant("09", "ex1-solution", "ignores-job-name", "any job with SLURM_NTASKS counts, even 'interactive'",
           (('return "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")',
             'return "SLURM_NTASKS" in env'),), shows="Lightning says"),
    Mutant("09", "ex2-solution", "name-kept", "fixes the tasks per node but keeps the name 'interactive'",
           (("#SBATCH --job-name=lightning", "#SBATCH --job-name=interactive"),), shows="SLURMEnvironment"),
    Mutant("09", "ex3-solution", "batch-shell-only", "sends the signal to the batch shell only (B:)",
           (("#SBATCH --signal=SIGUSR1@120", "#SBATCH --signal=B:SIGUSR1@120"),),
           shows="the steps must get the signal"),
    Mutant("09", "ex1-solution", "bash-counts", "leaves out 'bash': Lightning ignores that name too",
           (('not in ("bash", "interactive")', '!= "interactive"'),), shows="9.1: {'SLURM_NTASKS': '2', 'SLURM_JOB_NAME': 'bash'}"),
    Mutant("09", "ex1-solution", "job-id", "takes SLURM_JOB_ID, not SLURM_NTASKS, as the sign of a Slurm job",
           (('"SLURM_NTASKS" in env and', '"SLURM_JOB_ID" in env and'),), shows="9.1: {'SLURM_NTASKS': '4', 'SLURM_JOB_NAME': 'train'}"),
    Mutant("09", "ex2-solution", "no-srun", "starts the training in the batch shell, without srun",
           (("srun --kill-on-bad-exit=1 python", "python"),), shows="9.2: start the training with srun"),
    Mutant("09", "ex2-solution", "one-task-per-node", "one task per node for a Trainer of two devices per node",
           (("#SBATCH --ntasks-per-node=2", "#SBATCH --ntasks-per-node=1"),), shows="9.2: one task per device"),
    Mutant("09", "ex3-solution", "signal-60", "sends the warning 60 s before the end, not 120",
           (("--signal=SIGUSR1@120", "--signal=SIGUSR1@60"),), shows="9.3: send the signal 120 seconds before the end"),
    Mutant("09", "ex3-solution", "one-minute", "writes one hour as 1:00, which Slurm reads as one minute",
           (("#SBATCH --time=01:00:00", "#SBATCH --time=1:00"),), shows="9.3: --time=1:00 is not one hour"),
    Mutant("09", "ex3-solution", "no-append", "leaves out --open-mode=append: a requeued run empties the log",
           (("#SBATCH --open-mode=append\n", ""),), shows="9.3: "),
    Mutant("09", "ex1-solution", "prefix",  # as a student
           "takes names that start with 'bash' or 'interactive' for interactive jobs",
           ((ANSWER,
             'def lightning_sees_slurm(env):\n'
             '    name = env.get("SLURM_JOB_NAME", "")\n'
             '    return "SLURM_NTASKS" in env and not name.startswith(("bash", "interactive"))\n'),),
           shows="9.1: {'SLURM_NTASKS': '2', 'SLURM_JOB_NAME': 'interactive-gpu'}"),
    Mutant("09", "ex1-solution", "any-case",  # as a student
           "compares the job name in lower case: 'Interactive' is not Lightning's 'interactive'",
           ((ANSWER,
             'def lightning_sees_slurm(env):\n'
             '    if "SLURM_NTASKS" not in env:\n'
             '        return False\n'
             '    return env.get("SLURM_JOB_NAME", "").strip().lower() not in ("bash", "interactive")\n'),),
           shows="9.1: {'SLURM_NTASKS': '8', 'SLURM_JOB_NAME': 'Interactive'}"),
    Mutant("09", "ex2-solution", "no-kill",  # as a student
           'writes a fresh script with the name and layout right, and srun without --kill-on-bad-exit',
           ((ANSWER,
             'fixed_script = """#!/bin/bash\n'
             '#SBATCH --job-name=train\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=2\n'
             '#SBATCH --time=00:05:00\n'
             '#SBATCH --output=%x-%j.out\n'
             'srun python -m hpcnb.scripts.lightning_train --nodes 2 --devices 2 --epochs 1 --out ex2\n'
             '"""\n'),),
           shows='9.2: when one process crashes (here rank 3)'),
    Mutant("09", "ex2-solution", "no-time",  # as a student
           "drops the time limit with the bad lines: the job gets the partition's default",
           ((ANSWER,
             'fixed_script = """#!/bin/bash\n'
             '#SBATCH --job-name=lightning-ddp\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=2\n'
             '#SBATCH --output=%x-%j.out\n'
             'srun --kill-on-bad-exit=1 python -m hpcnb.scripts.lightning_train --nodes 2 --devices 2 --epochs 1 --out ex2\n'
             '"""\n'),),
           shows='9.2: same resources: the broken script asks for 5 minutes'),
    Mutant("09", "ex3-solution", "no-srun",  # as a student
           'starts the training in the batch shell (Lightning would start its processes): no step gets the signal',
           ((ANSWER,
             'requeue_script = """#!/bin/bash\n'
             '#SBATCH --job-name=long-training\n'
             '#SBATCH --nodes=1\n'
             '#SBATCH --ntasks-per-node=2\n'
             '#SBATCH --time=1:00:00\n'
             '#SBATCH --signal=USR1@120\n'
             '#SBATCH --requeue\n'
             '#SBATCH --open-mode=append\n'
             '#SBATCH --output=train-%j.out\n'
             'python -m hpcnb.scripts.lightning_train --devices 2 --requeue\n'
             '"""\n'),),
           shows='9.3: start the training with srun'),
    Mutant("09", "ex3-solution", "one-task",  # as a student
           "srun -n 1, counting on Lightning to start the second device's process",
           ((ANSWER,
             'requeue_script = """#!/bin/bash\n'
             '#SBATCH --job-name=long-training\n'
             '#SBATCH --nodes=1\n'
             '#SBATCH --ntasks-per-node=2\n'
             '#SBATCH --time=60\n'
             '#SBATCH --signal=SIGUSR1@120\n'
             '#SBATCH --requeue\n'
             '#SBATCH --open-mode=append\n'
             '#SBATCH --output=%x-%j.out\n'
             'srun -n 1 python -m hpcnb.scripts.lightning_train --devices 2 --requeue\n'
             '"""\n'),),
           shows='9.3: srun must start the 2 tasks'),
    # ------------------------------------------------------------------- 10 Horovod
    Mutant("10", "ex1-solution", "split-by-comma", "splits the node list at commas: node[1-2] stays one host",
           (('out.stdout.split()', 'nodelist.split(",")'),),
           shows="10.1: horovod_hosts('node[1-2]', 2) is"),
    Mutant("10", "ex2-solution", "same-seed", "gives every worker seed 0 instead of broadcasting rank 0's state",
           (('source.replace(anchor, anchor + (\n    "hvd.broadcast_parameters(model.state_dict(), root_rank=0)\\n"\n'
             '    "hvd.broadcast_optimizer_state(optimizer, root_rank=0)\\n"))',
             'source.replace("seed=hvd.rank()", "seed=0")'),),
           shows="a shared seed is not enough"),
    Mutant("10", "ex3-solution", "per-worker-values", "passes the per-worker batch and the unscaled learning rate",
           (('{"batch": 2 * 16, "lr": 2 * 0.05}', '{"batch": 16, "lr": 0.05}'),),
           shows="DDP and Horovod end with different weights"),
    Mutant("10", "ex1-solution", "no-slots", "lists the hosts without their slots",
           (('f"{host}:{tasks_per_node}"', 'host'),), shows="10.1: horovod_hosts('node[1-2]', 2) is 'node1,node2'"),
    Mutant("10", "ex1-solution", "fixed-slots", "copies the lesson's 2 slots per host instead of tasks_per_node",
           (('f"{host}:{tasks_per_node}"', 'f"{host}:2"'),), shows="10.1: horovod_hosts('node1', 4) is 'node1:2'"),
    Mutant("10", "ex2-solution", "optimizer-only", "broadcasts the optimizer's state but not the weights",
           (('    "hvd.broadcast_parameters(model.state_dict(), root_rank=0)\\n"\n', ""),),
           shows="10.2: the workers start from different weights"),
    Mutant("10", "ex2-solution", "fixed-in-place", "fixes broken_hvd.py itself and writes no fixed_hvd.py",
           (('Path("fixed_hvd.py").write_text(', 'Path("broken_hvd.py").write_text('),),
           shows="10.2 is unanswered: write your answer in the cell above"),
    Mutant("10", "ex3-solution", "lr-unscaled", "scales the batch but not the learning rate",
           (('{"batch": 2 * 16, "lr": 2 * 0.05}', '{"batch": 2 * 16, "lr": 0.05}'),),
           shows="10.3: DDP and Horovod end with different weights"),
    Mutant("10", "ex3-solution", "batch-unscaled", "scales the learning rate but passes the per-worker batch",
           (('{"batch": 2 * 16, "lr": 2 * 0.05}', '{"batch": 16, "lr": 2 * 0.05}'),),
           shows="10.3: DDP and Horovod end with different weights"),
    Mutant("10", "ex1-solution", "own-expander",  # as a student
           'expands the node list with a parser of its own: one bracket group per name',
           ((ANSWER,
             'def horovod_hosts(nodelist, tasks_per_node):\n'
             '    hosts = []\n'
             '    for part in re.findall(r"[^,\\[]+(?:\\[[^\\]]*\\])?", nodelist):\n'
             '        group = re.fullmatch(r"([^\\[]+)\\[([^\\]]*)\\]", part)\n'
             '        if not group:\n'
             '            hosts.append(part)\n'
             '            continue\n'
             '        prefix, ranges = group.groups()\n'
             '        for span in ranges.split(","):\n'
             '            low, _, high = span.partition("-")\n'
             '            hosts += [f"{prefix}{i:0{len(low)}d}" for i in range(int(low), int(high or low) + 1)]\n'
             '    return ",".join(f"{host}:{tasks_per_node}" for host in hosts)\n'),),
           shows="10.1: horovod_hosts('rack[1-2]-gpu[3-4]', 1) is"),
    Mutant("10", "ex1-solution", "shell-unquoted",  # as a student
           'runs scontrol through a shell with the node list unquoted',
           ((ANSWER,
             'def horovod_hosts(nodelist, tasks_per_node):\n'
             '    hosts = os.popen(f"scontrol show hostnames {nodelist}").read().split()\n'
             '    return ",".join(f"{host}:{tasks_per_node}" for host in hosts)\n'),),
           shows='10.1: with a file named node3 in the folder'),
    Mutant("10", "ex2-solution", "weights-only",  # as a student
           "broadcasts rank 0's weights right after building the model, not the optimizer's state",
           ((ANSWER,
             'text = Path("broken_hvd.py").read_text()\n'
             'line = "model = training.make_model(hidden=64, seed=hvd.rank())\\n"\n'
             'text = text.replace(line, line + "hvd.broadcast_parameters(model.state_dict(), root_rank=0)\\n")\n'
             'Path("fixed_hvd.py").write_text(text)\n'),),
           shows='10.2: the workers start alike but end apart'),
    Mutant("10", "ex2-solution", "average-weights",  # as a student
           "averages the workers' initial weights (allreduce) instead of sending rank 0's state",
           ((ANSWER,
             'text = Path("broken_hvd.py").read_text()\n'
             'line = "model = training.make_model(hidden=64, seed=hvd.rank())\\n"\n'
             'text = text.replace(line, line + (\n'
             '    "with torch.no_grad():\\n"\n'
             '    "    for name, p in model.named_parameters():\\n"\n'
             '    "        p.copy_(hvd.allreduce(p, op=hvd.Average, name=f\'init.{name}\'))\\n"))\n'
             'Path("fixed_hvd.py").write_text(text)\n'),),
           shows='10.2: the workers start alike but end apart'),
    Mutant("10", "ex3-solution", "per-process-batch",  # as a student
           "gives DDP the per-worker batch (as 8.2's processes take) and Horovod's scaled rate",
           ((ANSWER,
             'workers, per_worker, base_lr = 2, 16, 0.05\n'
             'ddp_args = {"batch": per_worker, "lr": base_lr * workers}\n'),),
           shows='10.3: DDP and Horovod end with different weights'),
    Mutant("10", "ex3-solution", "sqrt-rate",  # as a student
           'scales the learning rate by the square root of the workers',
           ((ANSWER,
             'ddp_args = {"batch": 16 * 2, "lr": 0.05 * 2 ** 0.5}\n'),),
           shows='10.3: DDP and Horovod end with different weights'),
    # ----------------------------------------------------------- 11 scaling curves
    Mutant("11", "ex1-solution", "fitted-speedup", "reports the fitted model's speed-up, not the measured one",
           (("speedup_64, efficiency_64 = at_64.speedup, at_64.efficiency",
             "speedup_64 = amdahl_speedup(s, 64)\nefficiency_64 = speedup_64 / 64"),),
           shows="11.1: the measured speed-up at 64 is T(1) / T(64)"),
    Mutant("11", "ex2-solution", "no-accumulation", "forgets the gradient accumulation in the global batch",
           (("global_batch(32, 4 * 4, accumulation=2)", "global_batch(32, 4 * 4)"),),
           shows="11.2: global batch = 32 per GPU x 16 GPUs x 2 accumulation steps = 1024, not 512"),
    Mutant("11", "ex3-solution", "one-node", "asks for 2 tasks but not for 2 nodes: both land on one node",
           (('"--nodes=2", "--ntasks-per-node=1"', '"--ntasks=2"'),), shows="11.3: two tasks on two nodes"),
    Mutant("11", "ex1-solution", "speedup-as-efficiency", "takes the speed-up for the efficiency: drops the / 64",
           (("speedup_64, efficiency_64 = at_64.speedup, at_64.efficiency", "speedup_64 = efficiency_64 = at_64.speedup"),),
           shows="11.1: efficiency = speed-up / tasks"),
    Mutant("11", "ex1-solution", "last-above", "reports the last power of two above 50 %, not the first below",
           (("if amdahl_speedup(s, n) / n < 0.5)", "if amdahl_speedup(s, n) / n < 0.5) // 2"),),
           shows="11.1: n_half="),
    Mutant("11", "ex2-solution", "one-node", "counts the GPUs of one node only: 4, not 4 x 4",
           (("global_batch(32, 4 * 4, accumulation=2)", "global_batch(32, 4, accumulation=2)"),),
           shows="11.2: global batch = 32 per GPU x 16 GPUs x 2 accumulation steps"),
    Mutant("11", "ex2-solution", "sqrt-as-linear", "uses the linear rule for the square-root one",
           (('rule="sqrt"', 'rule="linear"'),), shows="11.2: square-root rule"),
    Mutant("11", "ex3-solution", "strong", "runs --kind strong: the global batch stays, the per-task one shrinks",
           (("--kind weak", "--kind strong"),), shows="11.3: run --kind weak"),
    Mutant("11", "ex3-solution", "halved-batch", "splits the 1024 between the two tasks, as strong scaling would",
           (("--batch 1024", "--batch 512"),), shows="11.3: weak scaling keeps 1024 per task"),
    Mutant("11", "ex1-solution", "per-node",  # as a student
           'divides the speed-up by the 16 nodes, not the 64 GPUs',
           ((ANSWER,
             'write_runs("cluster_runs.csv", table)\n'
             'runs = read_runs("cluster_runs.csv")\n'
             's = fit_amdahl(runs).serial_fraction\n'
             't = {r.tasks: r.seconds for r in runs}\n'
             'speedup_64 = t[1] / t[64]\n'
             'efficiency_64 = speedup_64 / 16   # 64 GPUs are 16 nodes\n'
             'n_half = 1\n'
             'while amdahl_speedup(s, n_half) / n_half >= 0.5:\n'
             '    n_half *= 2\n'),),
           shows='11.1: efficiency = speed-up / tasks'),
    Mutant("11", "ex1-solution", "any-count",  # as a student
           'searches every task count, not the powers of two',
           ((ANSWER,
             'write_runs("cluster_runs.csv", table)\n'
             'runs = read_runs("cluster_runs.csv")\n'
             's = fit_amdahl(runs).serial_fraction\n'
             'speedup_64 = table[0]["seconds"] / table[-1]["seconds"]\n'
             'efficiency_64 = speedup_64 / 64\n'
             'n_half = next(n for n in range(1, 1025) if amdahl_speedup(s, n) / n < 0.5)\n'),),
           shows='is not a power of two'),
    Mutant("11", "ex2-solution", "by-hand",  # as a student
           'multiplies it out by hand and forgets the accumulation',
           ((ANSWER,
             'import math\n'
             '\n'
             'gbatch = 32 * 16\n'
             'lr_linear = 0.1 * gbatch / 256\n'
             'lr_sqrt = 0.1 * math.sqrt(gbatch / 256)\n'),),
           shows='11.2: global batch = 32 per GPU x 16 GPUs x 2 accumulation steps = 1024, not 512'),
    Mutant("11", "ex2-solution", "rate-without-accumulation",  # as a student
           'counts the accumulation in the batch but scales the rate for one pass',
           ((ANSWER,
             'gbatch = global_batch(32, 16, accumulation=2)\n'
             'lr_linear = lr_scaling(0.1, 256, 32 * 16, rule="linear")\n'
             'lr_sqrt = lr_scaling(0.1, 256, 32 * 16, rule="sqrt")\n'),),
           shows='11.2: linear rule'),
    Mutant("11", "ex3-solution", "all-cpus",  # as a student
           'a job script that asks for both CPUs of each node for its one task',
           ((ANSWER,
             'from hpcnb.jobs import submit\n'
             '\n'
             'Path("weak.sh").write_text("""#!/bin/bash\n'
             '#SBATCH --job-name=weak\n'
             '#SBATCH --nodes=2\n'
             '#SBATCH --ntasks-per-node=1\n'
             '#SBATCH --cpus-per-task=2\n'
             '#SBATCH --time=00:05:00\n'
             '#SBATCH --output=weak-%j.out\n'
             'srun python -m hpcnb.scripts.scaling_train --kind weak --batch 1024 --steps 30\n'
             '""")\n'
             'job = submit("weak.sh")\n'
             'job.wait(quiet=True)\n'
             'line = [l for l in job.output_path.read_text().splitlines() if l.startswith("SCALING")][0]\n'
             'weak_run = dict(pair.split("=", 1) for pair in line.split()[1:])\n'),),
           shows='11.3: the job must hold one CPU for each of its 2 tasks'),
    Mutant("11", "ex3-solution", "exclusive",  # as a student
           'takes the nodes --exclusive for clean timings',
           ((ANSWER,
             'out = subprocess.run("sbatch --parsable --wait --exclusive -N 2 --ntasks-per-node=1 -t 5 -o weak-%j.out "\n'
             '                     "--wrap \'srun python -m hpcnb.scripts.scaling_train --kind weak --batch 1024 --steps 30\'",\n'
             '                     shell=True, capture_output=True, text=True).stdout\n'
             'job_id = out.strip().split(";")[0]\n'
             'text = Path(f"weak-{job_id}.out").read_text()\n'
             'weak_run = dict(re.findall(r"(\\w+)=(\\S+)", text[text.index("SCALING"):].splitlines()[0]))\n'),),
           shows='11.3: the job must hold one CPU for each of its 2 tasks'),
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
    Mutant("12", "ex1-solution", "never-restores", "starts from step 0 every time, ignoring the checkpoint",
           (("    start = ck.restore(model, opt)\n", "    start = 0\n"),),
           shows="12.1: after training to step 4, the next call resumes at step 4"),
    Mutant("12", "ex1-solution", "from-zero", "restores the checkpoint, then trains again from step 0",
           (("train(model, opt, range(start, until))", "train(model, opt, range(0, until))"),),
           shows="12.1: resumed training differs from uninterrupted training"),
    Mutant("12", "ex2-solution", "no-requeue", "saves and exits on the warning, but never requeues the job",
           (('        subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]])  # Slurm ends this run\n', ""),),
           shows="12.2: the second run must go on from the warning's checkpoint"),
    Mutant("12", "ex2-solution", "lesson-guard", "takes the lesson's SignalGuard instead of writing the handler",
           (("from hpcnb.lessons.checkpoint import Checkpointer\n",
             "from hpcnb.lessons.checkpoint import Checkpointer, SignalGuard\n"),),
           shows="12.2: write the handler yourself (signal module)"),
    Mutant("12", "ex3-solution", "three-tasks", "stops at three tasks of 20 steps: no run is left to show a finished training is not redone",
           (("--array=1-4%1", "--array=1-3%1"),), shows="12.3: an array of tasks 1 to 4"),
    Mutant("12", "ex3-solution", "ten-per-run", "10 steps per run: four runs train 40, not 60",
           (("--steps-per-run 20", "--steps-per-run 10"),), shows="12.3: the chain never finished the training"),
    Mutant("12", "ex1-solution", "kernel-memory", 'keeps the model in the kernel between calls and saves it in the folder it is given',
           ((ANSWER,
             '''    global _model, _opt, _step   # keep the training in memory between calls
    if "_model" not in globals():
        _model, _opt = make_model()
        _step = 0
    start = _step
    train(_model, _opt, range(start, until))
    Checkpointer(ckpt_dir).save(until, _model, _opt)
    _step = until
    return start
'''),),
           shows='12.1: ex1-other has no checkpoint yet'),  # as a student
    Mutant("12", "ex1-solution", "weights-by-name", "restores the weights by hand from the newest file's name, not the optimizer's momentum",
           ((ANSWER,
             '''    from hpcnb.lessons.checkpoint import load_checkpoint
    model, opt = make_model()
    last = latest_checkpoint(ckpt_dir)
    start = int(last.stem.split("-")[1]) if last else 0
    if last:
        model.load_state_dict(load_checkpoint(last)["model"])
    train(model, opt, range(start, until))
    Checkpointer(ckpt_dir).save(max(start, until), model, opt)
    return start
'''),),
           shows='was the optimizer state saved and restored?'),  # as a student
    Mutant("12", "ex2-solution", "save-in-handler", 'saves, requeues and exits inside the signal handler',
           ((ANSWER,
             '''Path("warned.py").write_text("""import os, signal, subprocess, sys, time

from hpcnb.lessons.checkpoint import Checkpointer
from ex2_model import make_model, train

model, opt = make_model()
ck = Checkpointer("ckpt-ex2")
start = ck.restore(model, opt)
done = start

def on_warning(signum, frame):   # save, requeue, leave: all at once, when the warning comes
    ck.save(done, model, opt)
    print(f"checkpoint at step {done}", flush=True)
    subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]])
    sys.exit(0)

signal.signal(signal.SIGUSR1, on_warning)
print(f"run {int(os.environ.get('SLURM_RESTART_COUNT', 0)) + 1}: resuming from step {start}", flush=True)
for step in range(start, 100):
    train(model, opt, [step])
    done = step + 1
    time.sleep(0.05)
ck.save(100, model, opt)
""")
'''),),
           shows='12.2: the handler on_warning() must only note the warning'),  # as a student
    Mutant("12", "ex2-solution", "second-run", "counts the runs by whether a checkpoint exists: every run after the first says 'run 2'",
           ((ANSWER,
             '''Path("warned.py").write_text("""import os
import signal
import subprocess
import threading
import time

warning = threading.Event()
signal.signal(signal.SIGUSR1, lambda signum, frame: warning.set())

from hpcnb.lessons.checkpoint import Checkpointer
from ex2_model import make_model, train

model, opt = make_model()
ck = Checkpointer("ckpt-ex2")
start = ck.restore(model, opt)
run = 2 if start > 0 else 1      # a checkpoint means Slurm restarted us
print(f"run {run}: resuming from step {start}", flush=True)
for step in range(start, 100):
    train(model, opt, [step])
    time.sleep(0.05)
    if warning.is_set():
        ck.save(step + 1, model, opt)
        print(f"checkpoint at step {step + 1}", flush=True)
        subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]])
        raise SystemExit(0)
ck.save(100, model, opt)
""")
'''),),
           shows="12.2: the third run (SLURM_RESTART_COUNT=2) must say 'run 3'"),  # as a student
    Mutant("12", "ex3-solution", "dependencies", 'chains four jobs with --dependency instead of an array throttled to one task at a time',
           ((ANSWER,
             '''previous = None
for part in range(4):   # four jobs, each after the one before
    after = [f"--dependency=afterany:{previous}"] if previous else []
    previous = subprocess.run(["sbatch", "--parsable", *after, "--time=00:05:00", "--output=ex3-%j.out", "--wrap",
                               "python -m hpcnb.scripts.ckpt_train --ckpt-dir ckpt-ex3 --steps 60 "
                               "--steps-per-run 20 --step-seconds 0 --out ex3.json"],
                              capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
chain_job = previous
Job(chain_job).wait(quiet=True)
'''),),
           shows='12.3: an array of tasks 1 to 4'),  # as a student
    Mutant("12", "ex3-solution", "one-go", 'an array of 4 without --steps-per-run: the first task trains all 60 steps',
           ((ANSWER,
             '''reply = subprocess.run(["sbatch", "--parsable", "--wait", "--array=1-4%1", "--time=00:05:00",
                        "--output=ex3-%A_%a.out", "--wrap",
                        "python -m hpcnb.scripts.ckpt_train --ckpt-dir ckpt-ex3 --steps 60 --step-seconds 0 --out ex3.json"],
                       capture_output=True, text=True, check=True)
chain_job = reply.stdout.strip().split(";")[0]
'''),),
           shows="12.3: task 2 should say 'resuming from step 20'"),  # as a student
    Mutant("12", "ex2-solution", "saves-every-10", "also saves every 10 steps, as the lesson's ckpt_train does every 5",
           (("    time.sleep(0.05)\n", "    time.sleep(0.05)\n    if (step + 1) % 10 == 0:\n        ck.save(step + 1, model, opt)\n"),),
           shows="12.2: save only when warned and at step 100"),
    # ------------------------------------------------------------------ 13 stragglers
    Mutant("13", "ex1-solution", "no-ratio", "flags by the z-score alone: a rank 30 % slower counts",
           (("t >= ratio * m and score(t) >= z", "score(t) >= z"),), shows="30 % slower is below the 1.5x ratio"),
    Mutant("13", "ex2-solution", "hard-coded", "hard-codes the answer of this run: rank 1",
           (("    times = read_step_logs(path)", "    return [1]  # the slow rank of this run\n"
                                                 "    times = read_step_logs(path)"),),
           shows="flagged_in_log must find the slow rank in the log it is given"),
    Mutant("13", "ex3-solution", "straggler-included", "counts the straggler's own waiting too",
           (("others = [rec for rank, rec in ranks.items() if rank != 1]", "others = list(ranks.values())"),),
           shows="13.3: leave the straggler (rank 1) out"),
    Mutant("13", "ex1-solution", "fixed-ratio", "writes the ratio 1.5 into the test instead of the parameter",
           (("t >= ratio * m", "t >= 1.5 * m"),), shows="13.1: use the ratio you are given"),
    Mutant("13", "ex1-solution", "mad-zero", "scores 0 when the median deviation is 0: a lone slow rank is missed",
           (("return math.inf if t > m else 0.0", "return 0.0"),), shows="13.1: when all others are equal (MAD 0)"),
    Mutant("13", "ex2-solution", "this-run-log", "reads this run's log, whatever path it is given",
           (("    times = read_step_logs(path)", '    times = read_step_logs(f"straggler-{straggler_job}.out")'),),
           shows="13.2: flagged_in_log must find the slow rank in the log it is given"),
    Mutant("13", "ex2-solution", "wait-times", "judges the ranks by their waiting, not their computing",
           (('{r: rec["compute_s"] for r, rec in times.items()}', '{r: rec["wait_s"] for r, rec in times.items()}'),),
           shows="13.2: rank 1 was made 4x slower"),
    Mutant("13", "ex3-solution", "over-compute", "divides the waiting by the computing only",
           (('total = sum(sum(rec["compute_s"]) + sum(rec["wait_s"]) for rec in others)',
             'total = sum(sum(rec["compute_s"]) for rec in others)'),),
           shows="13.3: divide by all their step time (waiting + computing)"),
    Mutant("13", "ex3-solution", "rank-0-only", "takes rank 0 alone for the healthy ranks",
           (("others = [rec for rank, rec in ranks.items() if rank != 1]", "others = [ranks[0]]"),),
           shows="13.3: both healthy ranks (0 and 2), not rank 0 alone"),
    Mutant("13", "ex1-solution", "mean-stdev", 'scores the ranks with the mean and the standard deviation',
           ((ANSWER,
             '''    mean = statistics.mean(times.values())
    spread = statistics.pstdev(times.values())
    return sorted(r for r, t in times.items()
                  if t >= ratio * mean and (spread == 0 and t > mean or spread > 0 and (t - mean) / spread >= z))
'''),),
           shows='13.1: ranks 3 and 12, sorted'),  # as a student
    Mutant("13", "ex1-solution", "middle-one", 'takes the middle element of the sorted times as the median',
           ((ANSWER,
             '''    values = sorted(times.values())
    m = values[len(values) // 2]                          # the middle one
    mad = sorted(abs(t - m) for t in values)[len(values) // 2]
    slow = []
    for r, t in times.items():
        z_score = 0.6745 * (t - m) / mad if mad else (math.inf if t > m else 0)
        if t >= ratio * m and z_score >= z:
            slow.append(r)
    return sorted(slow)
'''),),
           shows='13.1: with an even number of ranks the median is the mean of the two middle times'),  # as a student
    Mutant("13", "ex2-solution", "means", "gives find_stragglers each rank's mean step time: one long pause makes a straggler",
           ((ANSWER,
             '''reply = subprocess.run(["sbatch", "--parsable", "--wait", "--nodes=2", "--ntasks=3", "--cpus-per-task=1",
                        "--time=00:05:00", "--output=straggler-%j.out", "--wrap",
                        "srun python -m hpcnb.scripts.straggler_train --steps 13 "
                        "--out ex2.json --simulate-slow-rank 1 --simulate-factor 4"],
                       capture_output=True, text=True, check=True)
straggler_job = reply.stdout.strip().split(";")[0]
log_times = read_step_logs(f"straggler-{straggler_job}.out")

def flagged_in_log(path):
    per_rank = {r: statistics.mean(rec["compute_s"]) for r, rec in read_step_logs(path).items()}   # each rank's mean
    return sorted(t.rank for t in find_stragglers(per_rank) if t.slow)

found = flagged_in_log(f"straggler-{straggler_job}.out")
'''),),
           shows='13.2: rank 4 paused once'),  # as a student
    Mutant("13", "ex2-solution", "step-totals", 'judges the ranks by their step times, computing plus waiting',
           ((ANSWER,
             '''reply = subprocess.run(["sbatch", "--parsable", "--wait", "-N", "2", "-n", "3", "-c", "1", "--time=00:05:00",
                        "--output=straggler-%j.out", "--wrap",
                        "srun python -m hpcnb.scripts.straggler_train --steps 13 "
                        "--out ex2.json --simulate-slow-rank 1 --simulate-factor 4"],
                       capture_output=True, text=True, check=True)
straggler_job = reply.stdout.strip().split(";")[0]
log_times = read_step_logs(f"straggler-{straggler_job}.out")

def flagged_in_log(path):
    steps = {r: [c + w for c, w in zip(rec["compute_s"], rec["wait_s"])] for r, rec in read_step_logs(path).items()}
    return sorted(t.rank for t in find_stragglers(steps) if t.slow)   # the time each step took on each rank

found = flagged_in_log(f"straggler-{straggler_job}.out")
'''),),
           shows='13.2: rank 1 was made 4x slower'),  # as a student
    Mutant("13", "ex3-solution", "mean-of-shares", "averages the two healthy ranks' shares instead of adding up their times",
           ((ANSWER,
             '''ranks, _ = load_times("ex2.json")
shares = [sum(rec["wait_s"]) / (sum(rec["wait_s"]) + sum(rec["compute_s"])) for rank, rec in ranks.items() if rank != 1]
waiting_share = sum(shares) / len(shares)   # the average healthy rank
'''),),
           shows='13.3: add up the times of ranks 0 and 2, then divide'),  # as a student
    Mutant("13", "ex3-solution", "from-the-log", "computes the share from the log's rounded lines",
           ((ANSWER,
             '''waited = sum(sum(rec["wait_s"]) for rank, rec in log_times.items() if rank != 1)
computed = sum(sum(rec["compute_s"]) for rank, rec in log_times.items() if rank != 1)
waiting_share = waited / (waited + computed)
'''),),
           shows="13.3: the log's lines are rounded to the microsecond"),  # as a student
    Mutant("13", "ex1-solution", "positions", "returns the positions of the slow times, not the ranks they belong to",
           (("return sorted(r for r, t in times.items() if", "return sorted(r for r, t in enumerate(times.values()) if"),),
           shows="13.1: return the ranks, the keys of times"),
    Mutant("13", "ex1-solution", "strictly-above", "flags only ranks strictly above ratio x M",
           (("t >= ratio * m", "t > ratio * m"),), shows="13.1: 'at least ratio x M'"),
    Mutant("13", "ex1-solution", "no-constant", "leaves out the 0.6745 of the robust z-score",
           (("return 0.6745 * (t - m) / mad", "return (t - m) / mad"),),
           shows="13.1: the robust z-score is 0.6745 x (t - M) / MAD"),
    # ------------------------------------------------------- 14 sharding
    Mutant("14", "ex1-solution", "no-optim", "counts parameters and gradients, not the optimizer state",
           (('r["grad_bytes"] + r["optim_bytes"]', 'r["grad_bytes"]'),),
           shows="14.1: count the optimizer state too"),
    Mutant("14", "ex1-solution", "mean-rank", "takes the average rank, not the one that holds the most",
           (("return max((", "return statistics.mean(("),),
           shows="14.1: the rank that holds the most must fit"),
    Mutant("14", "ex2-solution", "any-rank", "calls a part split if any one rank holds less than DDP",
           (("if all(r[", "if any(r["),),
           shows="14.2: rank 0 holds all the optimizer state"),
    Mutant("14", "ex2-solution", "summed", "compares the bytes summed over the ranks with DDP's rank 0",
           (('if all(r[f"{part}_bytes"] <= 0.75 * full[f"{part}_bytes"] for r in ranks.values())',
             'if sum(r[f"{part}_bytes"] for r in ranks.values()) <= 0.75 * full[f"{part}_bytes"]'),),
           shows="14.2: ZeRO-1 splits the optimizer state only"),
    Mutant("14", "ex3-solution", "two-ranks", "loads on 2 ranks, as the checkpoint was saved: no resharding",
           (("nodes=2, ntasks=3,", "nodes=2, ntasks=2,"), ('["load-3"]', '["load-2"]')),
           shows="14.3: load the checkpoint in 3 ranks"),
    Mutant("14", "ex3-solution", "other-width", "loads with the script's default width, not the saved model's",
           ((" --load ckpt --width 256 --depth 4", " --load ckpt"), ('["load-3"]', '.get("load-3", {})')),
           shows="the same --width and --depth as the saved model?"),
    Mutant("14", "ex1-solution", "one-node", 'one job of 2 tasks per strategy, on one node',
           ((ANSWER,
             '''outputs = []
for strategy in ("ddp", "zero1", "fsdp"):   # one job of 2 tasks per strategy, on whatever node is free
    extra = " --save ckpt" if strategy == "fsdp" else ""
    job = submit(wrap=f"srun --label python -m hpcnb.scripts.sharded_train --width 256 --depth 4 --steps 3 --strategy {strategy}{extra}",
                 ntasks=2, cpus_per_task=1, mem="2G", time="00:05:00", output=f"sizes-{strategy}-%j.out")
    job.wait(timeout=300, quiet=True)
    outputs.append(job.output_path.read_text())
sizes_job = job.id
runs = read_records("".join(outputs))

def worst_bytes_per_param(ranks):
    return max((r["param_bytes"] + r["grad_bytes"] + r["optim_bytes"]) / r["n_params"] for r in ranks.values())

widest = {s: largest_width(BUDGET, worst_bytes_per_param(runs[s]), DEPTH) for s in ("ddp", "zero1", "fsdp")}
'''),),
           shows='14.1: one job of 2 tasks on 2 nodes'),  # as a student
    Mutant("14", "ex1-solution", "rank-zero", "takes rank 0's bytes as the most a rank holds",
           ((ANSWER,
             '''steps = " && ".join(f"srun --label --kill-on-bad-exit=1 python -m hpcnb.scripts.sharded_train --width 256 --depth 4 "
                    f"--steps 3 --strategy {s}" + (" --save ckpt" if s == "fsdp" else "") for s in ("ddp", "zero1", "fsdp"))
job = submit(wrap=steps, nodes=2, ntasks=2, cpus_per_task=1, mem="2G", time="00:05:00", output="sizes-%j.out")
sizes_job = job.id
job.wait(timeout=300, quiet=True)
runs = read_records(job.output_path.read_text())

def worst_bytes_per_param(ranks):
    first = ranks[0]   # rank 0 holds the most: it is where everything starts
    return (first["param_bytes"] + first["grad_bytes"] + first["optim_bytes"]) / first["n_params"]

widest = {s: largest_width(BUDGET, worst_bytes_per_param(runs[s]), DEPTH) for s in ("ddp", "zero1", "fsdp")}
'''),),
           shows='14.1: 100 parameters split 30/30/40 over 3 ranks'),  # as a student
    Mutant("14", "ex2-solution", "less-than-ddp", "calls a part split when every rank holds less than DDP's, not at most three quarters",
           ((ANSWER,
             '''def sharded_parts(ranks, ddp):
    parts = set()
    for part in ("param", "grad", "optim"):
        if max(r[part + "_bytes"] for r in ranks.values()) < ddp[0][part + "_bytes"]:   # every rank holds less
            parts.add(part)
    return parts

holds = {s: sharded_parts(ranks, runs["ddp"]) for s, ranks in runs.items()}
'''),),
           shows="14.2: 'at most three quarters'"),  # as a student
    Mutant("14", "ex2-solution", "totals", "compares a rank's mean share with DDP's ranks added up",
           ((ANSWER,
             '''def sharded_parts(ranks, ddp):
    split = set()
    for part in ("param", "grad", "optim"):
        held = sum(r[f"{part}_bytes"] for r in ranks.values()) / len(ranks)     # a rank's share
        if held <= 0.75 * sum(r[f"{part}_bytes"] for r in ddp.values()) / len(ranks):
            split.add(part)
    return split

holds = {s: sharded_parts(ranks, runs["ddp"]) for s, ranks in runs.items()}
'''),),
           shows="14.2: compare with what one DDP rank holds, not with DDP's ranks added up"),  # as a student
    Mutant("14", "ex3-solution", "two-per-node", "reads '3 tasks on 2 nodes' as 2 nodes of 2 tasks: loads on 4 ranks",
           ((ANSWER,
             '''job = submit(wrap="srun --label --kill-on-bad-exit=1 python -m hpcnb.scripts.sharded_train --load ckpt --width 256 --depth 4",
             nodes=2, ntasks_per_node=2, cpus_per_task=1, mem="2G", time="00:05:00", output="reshard-%j.out")
reshard_job = job.id
job.wait(timeout=300, quiet=True)
norms = {rank: r["norm"] for loaded in read_records(job.output_path.read_text()).values() for rank, r in loaded.items()}
'''),),
           shows='14.3: load the checkpoint in 3 ranks'),  # as a student
    Mutant("14", "ex3-solution", "three-steps", "loads in three one-task steps: each process loads the whole model alone",
           ((ANSWER,
             '''job = submit(wrap="for i in 0 1 2; do srun --ntasks=1 python -m hpcnb.scripts.sharded_train --load ckpt --width 256 --depth 4; done",
             nodes=2, ntasks=3, cpus_per_task=1, mem="2G", time="00:05:00", output="reshard-%j.out")
reshard_job = job.id
job.wait(timeout=300, quiet=True)
records = read_records(job.output_path.read_text())
norms = {rank: r["norm"] for rank, r in enumerate(next(iter(records.values())).values())}
'''),),
           shows="14.3: load the checkpoint in 3 ranks"),  # as a student
    Mutant("14", "ex1-solution", "rank-share", "divides by the rank's share of the parameters, not the whole model's",
           (('/ r["n_params"] for r in ranks.values())', '/ (r["n_params"] / len(ranks)) for r in ranks.values())'),),
           shows="14.1: rank 0 holds 160 bytes for a model of 20 parameters"),
    Mutant("14", "ex2-solution", "strictly-below", "calls a part split only below three quarters, not at it",
           (("<= 0.75 *", "< 0.75 *"),), shows="14.2: 'at most three quarters'"),
    Mutant("14", "ex3-solution", "own-checkpoint", "trains again on 3 ranks and loads that new checkpoint, not the saved one",
           (('''job = submit(wrap="srun --label --kill-on-bad-exit=1 python -m hpcnb.scripts.sharded_train --load ckpt --width 256 --depth 4",''',
             '''job = submit(wrap="srun --label --kill-on-bad-exit=1 python -m hpcnb.scripts.sharded_train --strategy fsdp --save ckpt3 "
                  "--width 256 --depth 4 --steps 3 && "
                  "srun --label --kill-on-bad-exit=1 python -m hpcnb.scripts.sharded_train --load ckpt3 --width 256 --depth 4",'''),),
           shows="14.3: each rank's full norm must be the saved model's"),  # as a student
    Mutant("15", "ex1-solution", "outermost", "takes the outermost frame of the script (the <module> line), not the innermost",
           (("if reading[rank] == 0 and Path(frame[1]).name == script:", "if Path(frame[1]).name == script:"),),
           shows="15.1: rank 1 waits in read_batch, line 75"),
    Mutant("15", "ex1-solution", "any-file", "takes the innermost frame of any file: torch's line, not the script's",
           (("if reading[rank] == 0 and Path(frame[1]).name == script:", "if reading[rank] == 0:"),),
           shows="15.1: the innermost frame of the script (line 85), not torch's line"),
    Mutant("15", "ex1-solution", "first-dump", "keeps each rank's first dump, not its last",
           (("            if reading[rank]:\n                found[rank] = reading[rank]",
             "            if reading[rank]:\n                found.setdefault(rank, reading[rank])"),),
           shows="15.1: rank 0's last dump says line 108"),
    Mutant("15", "ex2-solution", "rank-0", "names rank 0, whose output shows the errors",
           (("stuck_rank = next(rank for rank, line in lines.items() if counts[line] == 1)", "stuck_rank = 0"),),
           shows="15.2: rank 0 waits at the same line as another rank"),
    Mutant("15", "ex2-solution", "collective-line", "names the all-reduce's line, where the healthy ranks wait",
           (("stuck_line = lines[stuck_rank]", "stuck_line = counts.most_common(1)[0][0]"),),
           shows="is where the healthy ranks wait (the all-reduce)"),
    Mutant("15", "ex3-solution", "other-rank", "takes the last OpType of the line: the other rank's, after 'but'",
           (("ops[int(m[1])] = m[2]", "ops[int(m[1])] = re.findall(r\"OpType=(\\w+)\", line)[-1]"),),
           shows="15.3: rank 2, which skipped the all-reduce, says it runs a BARRIER"),
    Mutant("15", "ex3-solution", "no-detail", "forgets TORCH_DISTRIBUTED_DEBUG=DETAIL: the ranks time out instead",
           ((',\n             export="ALL,TORCH_DISTRIBUTED_DEBUG=DETAIL")', ")"),),
           shows="was TORCH_DISTRIBUTED_DEBUG=DETAIL in its environment?"),
    Mutant("15", "ex1-solution", "one-block", "follows one dump at a time, whatever rank writes, and takes any path that ends with the script's name",
           ((ANSWER,
             '''    found, rank, in_dump, seen = {}, None, False, False
    for line in text.splitlines():
        m = re.match(r"(\\d+): (.*)", line)
        if not m:
            continue
        if "most recent call first" in m[2]:
            rank, in_dump, seen = int(m[1]), True, False
        elif in_dump and int(m[1]) == rank and m[2].startswith("  File"):
            frame = re.search(r'File "(.+)", line (\\d+)', m[2])
            if not seen and frame[1].endswith(script):
                found[rank], seen = int(frame[2]), True
        elif m[2].strip():
            in_dump = False
    return found
'''),),
           shows="15.1: compare the file's whole name"),  # as a student
    Mutant("15", "ex1-solution", "split-by-rank", "reads each rank's lines with an unpadded label and keeps the first script frame of each dump",
           ((ANSWER,
             '''    by_rank = collections.defaultdict(list)
    for line in text.splitlines():
        if re.match(r"^\\d+: ", line):
            label, _, rest = line.partition(": ")
            by_rank[int(label)].append(rest)
    found = {}
    for rank, lines in by_rank.items():
        for line in lines:   # the last dump wins: later frames overwrite earlier ones
            if "most recent call first" in line:
                first = True
            frame = re.search(r'File "(.*?)", line (\\d+)', line)
            if frame and script in frame[1] and first:
                found[rank], first = int(frame[2]), False
    return found
'''),),
           shows='15.1: with 10 tasks or more srun --label pads the labels'),  # as a student
    Mutant("15", "ex2-solution", "deepest", 'names the rank stuck furthest down the script (the highest line)',
           ((ANSWER,
             '''job = submit(wrap="srun --label --kill-on-bad-exit=1 python -m hpcnb.scripts.faulty_ddp --fault mystery --timeout 60",
             nodes=2, ntasks=3, cpus_per_task=1, time="00:03:00", output="hang-%j.out")
hang_job = job.id
wait_for_silence(job, quiet=2, timeout=120)
subprocess.run(["scancel", "--signal=USR1", hang_job], check=True)
until(lambda: dumped_ranks(job.output_path) == {0, 1, 2}, timeout=30, what="the three stack dumps")
lines = stuck_lines(job.output_path.read_text())
stuck_rank = max(lines, key=lines.get)   # the rank stuck furthest down the script
stuck_line = lines[stuck_rank]
subprocess.run(["scancel", hang_job], check=True)
job.wait(timeout=60, quiet=True)
'''),),
           shows='waits at the same line as another rank'),  # as a student
    Mutant("15", "ex2-solution", "let-it-time-out", 'takes the dumps, then lets the job wait out its timeout instead of cancelling it',
           ((ANSWER,
             '''job = submit(wrap="srun --label --kill-on-bad-exit=1 python -m hpcnb.scripts.faulty_ddp --fault mystery --timeout 60",
             nodes=2, ntasks=3, cpus_per_task=1, time="00:03:00", output="hang-%j.out")
hang_job = job.id
wait_for_silence(job, quiet=2, timeout=120)
subprocess.run(["scancel", "--signal=USR1", hang_job], check=True)
until(lambda: dumped_ranks(job.output_path) == {0, 1, 2}, timeout=30, what="the three stack dumps")
lines = stuck_lines(job.output_path.read_text())
stuck_rank = [r for r, n in lines.items() if list(lines.values()).count(n) == 1][0]
stuck_line = lines[stuck_rank]
job.wait(timeout=150, quiet=True)   # its --timeout 60 ends it by itself
'''),),
           shows='15.2: cancel the job once you have its dumps'),  # as a student
    Mutant("15", "ex3-solution", "kill-on-bad-exit", 'keeps --kill-on-bad-exit and reads single-digit ranks and upper-case op names',
           ((ANSWER,
             '''job = submit(wrap="TORCH_DISTRIBUTED_DEBUG=DETAIL srun --label --kill-on-bad-exit=1 python -m hpcnb.scripts.faulty_ddp --fault skip --rank 2",
             nodes=2, ntasks=3, cpus_per_task=1, time="00:03:00", output="detail-%j.out")
detail_job = job.id
job.wait(timeout=120, quiet=True)

def running_ops(text):
    return {int(rank): op for rank, op in re.findall(r"Rank (\\d) is running collective: CollectiveFingerPrint\\(.*?OpType=([A-Z]+)", text)}

ops = running_ops(job.output_path.read_text())
'''),),
           shows='15.3: 12 ranks: two-digit ranks'),  # as a student
    Mutant("15", "ex3-solution", "export-only", 'exports TORCH_DISTRIBUTED_DEBUG=DETAIL alone (--export without ALL): the job loses its environment',
           ((ANSWER,
             '''job = submit(wrap="srun --label python -m hpcnb.scripts.faulty_ddp --fault skip --rank 2", nodes=2, ntasks=3,
             cpus_per_task=1, time="00:03:00", output="detail-%j.out", export="TORCH_DISTRIBUTED_DEBUG=DETAIL")
detail_job = job.id
job.wait(timeout=120, quiet=True)

def running_ops(text):
    ops = {}
    for line in text.splitlines():
        if "is running collective" in line:
            mine = line.split(", but ")[0]
            ops[int(re.search(r"Rank (\\d+) is running", mine)[1])] = re.search(r"OpType=(\\w+)", mine)[1]
    return ops

ops = running_ops(job.output_path.read_text())
'''),),
           shows='was TORCH_DISTRIBUTED_DEBUG=DETAIL in its environment?'),  # as a student
    Mutant("15", "ex1-solution", "fixed-script", "looks for faulty_ddp.py whatever script it is given",
           (("Path(frame[1]).name == script", 'Path(frame[1]).name == "faulty_ddp.py"'),),
           shows="15.1: look for the script you are given (train.py here)"),
    Mutant("15", "ex2-solution", "as-text", "keeps the rank and the line as the text they were read from",
           (("stuck_line = lines[stuck_rank]", "stuck_rank, stuck_line = str(stuck_rank), str(lines[stuck_rank])"),),
           shows="15.2: stuck_rank and stuck_line are ints"),
    Mutant("15", "ex3-solution", "one-digit", "reads a rank as one digit",
           ((r'r"Rank (\d+) is running collective', r'r"Rank (\d) is running collective'),),
           shows="15.3: 12 ranks: two-digit ranks"),
    Mutant("15", "ex4-solution", "with-backend", "keeps the backend in the op's name: 'gloo:all_reduce'",
           (('e["profiling_name"].split(":", 1)[-1]', 'e["profiling_name"]'),),
           shows="15.4: ranks 0 and 2 wait in an all_reduce (the op without its 'gloo:' prefix)"),
    Mutant("15", "ex4-solution", "unsorted", "lists the stuck ranks in the dumps' order, not sorted",
           (("return seq, op, sorted(rank for rank, o in here.items() if o != op)",
             "return seq, op, [rank for rank, o in here.items() if o != op]"),),
           shows="15.4: two ranks stuck, one with no entry, one in a barrier: stuck is the sorted list [1, 3]"),
    Mutant("15", "ex4-solution", "missing-is-fine", "counts only a rank in another op as stuck, not a rank with no entry",
           (("return seq, op, sorted(rank for rank, o in here.items() if o != op)",
             "return seq, op, sorted(rank for rank, o in here.items() if o is not None and o != op)"),),
           shows="15.4: rank 2 has no entry at sequence id 5"),
    Mutant("15", "ex4-solution", "majority-of-all", "takes the majority over every rank, a missing entry included",
           (("collections.Counter(o for o in here.values() if o is not None)", "collections.Counter(here.values())"),),
           shows="15.4: three ranks never got there: the op is the one most ranks *with an entry* recorded"),
    Mutant("15", "ex4-solution", "by-state", "trusts the entries' state: the first one not completed",  # as a student
           ((FIRST_MISMATCH,
             '''def first_mismatch(dumps):
    for rank in sorted(dumps):
        for entry in dumps[rank]["entries"]:
            if entry["state"] != "completed":   # the collective this rank hangs in
                return entry["collective_seq_id"], entry["profiling_name"].split(":")[1], [rank]
    return None
'''),),
           shows="15.4: the ranks' records first differ at sequence id 4"),  # as a student
    Mutant("15", "ex4-solution", "last-entries", "compares each rank's last entry only",  # as a student
           ((FIRST_MISMATCH,
             '''def first_mismatch(dumps):
    last = {}
    for rank, dump in dumps.items():
        entry = dump["entries"][-1]   # where each rank is now
        last[rank] = (entry["collective_seq_id"], entry["profiling_name"].split(":")[-1])
    if len(set(last.values())) == 1:
        return None
    seq_id, op = collections.Counter(last.values()).most_common(1)[0][0]
    return seq_id, op, sorted(rank for rank in last if last[rank] != (seq_id, op))
'''),),
           shows="15.4: NCCL's ranks queue collectives ahead"),  # as a student
]
