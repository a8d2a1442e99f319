"""The node-hour budget in INSTRUCTORS.md (issue 39, item 7): computed from every job the lessons
and their exercises submit (hpcnb.course.budget, read by hpcnb.course.budget_reading), and still
what they ask for today."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from hpcnb.course.budget import budget_table, jobscript_cells, requests, submissions
from hpcnb.course.budget_reading import read_course
from hpcnb.lessons.jobscripts import partition_for
from hpcnb.sites import load_profile
from hpcnb.slurm.times import parse_time

ROOT = Path(__file__).resolve().parent.parent

#: One notebook with each kind of submission a lesson makes (and one step that is no job).
FIXTURE = [
    "%%jobscript job.sh\n#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --time=00:10:00\nsrun hostname\n",
    'from hpcnb.jobs import submit\njob = submit("job.sh", nodes=2, time="0:30:00")',
    "reply = !sbatch --parsable -N 3 -t 20 --wrap 'srun hostname'",
    "%%writefile plain.sh\n#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --time=00:10:00\nsrun hostname\n",
    "!sbatch --nodes=4 plain.sh",
    "out = !salloc -N 2 --time=00:05:00 srun hostname 2>&1",
    "!sbatch --array=0-3%2 --time=5 --wrap 'echo $SLURM_ARRAY_TASK_ID'",
    'SIZES = (1, 2)\nfor n in SIZES:\n    submit(wrap="srun hostname", nodes=n, time="10")',
    'submit(wrap="srun hostname", nodes=len(SIZES) + 5, time="7")',
    '!srun --overlap --jobid={job.id} hostname\n!srun -t 3 hostname',
    'import subprocess\nsubprocess.run(["sbatch", "--time=00:02:00", "plain.sh"], check=True)',
    'for n in sizes():\n    submit(wrap="srun hostname", nodes=n, time="1")',
]


@pytest.fixture
def lesson(tmp_path: Path) -> list:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in FIXTURE])
    nbformat.write(notebook, tmp_path / "99-pretend.ipynb")
    return read_course([tmp_path])


def _asked(jobs: list, site: str = "local") -> list[tuple[str, int, int, int]]:
    return [(r.script, r.nodes, r.seconds // 60, r.jobs) for r in requests(site, jobs)]


def test_every_kind_of_submission_counts_with_what_it_asks_for(lesson: list) -> None:
    assert _asked(lesson) == [
        ("job.sh", 2, 30, 1),          # submit(): its keywords over the script's #SBATCH lines
        ("--wrap", 3, 20, 1),          # sbatch --wrap -N 3 -t 20
        ("plain.sh", 4, 10, 1),        # sbatch --nodes=4 over #SBATCH --nodes=1, the script's time
        ("salloc", 2, 5, 1),           # one allocation: the srun in it is a step
        ("--wrap", 1, 5, 4),           # an array: one job per task
        ("--wrap", 1, 10, 1), ("--wrap", 2, 10, 1),   # a loop over literal node counts: each value
        ("--wrap", 1, 7, 1),           # a computed --nodes: the default, 1
        ("srun", 1, 3, 1),             # a stand-alone srun is a job; srun --overlap is not
        ("plain.sh", 1, 2, 1),         # subprocess.run(["sbatch", ...]): --time over the script's
        ("--wrap", 1, 1, 1),           # a loop over computed values: counted once
    ]


def test_what_is_not_read_is_counted_and_listed_under_the_table(lesson: list) -> None:
    notes = [(job.label, job.notes) for job in lesson if job.notes]
    assert notes == [("--wrap", ("--nodes={len(SIZES) + 5}",)),
                     ("--wrap", ("in a loop over `sizes()`: counted once", "--nodes={n}"))]
    table = budget_table(("local",), students=2, jobs=lesson)
    assert table.splitlines()[-1] == ("Not read statically, so counted with the script's or the site's defaults: "
                                      "99 --wrap: --nodes={len(SIZES) + 5}; "
                                      "99 --wrap: in a loop over `sizes()`: counted once, --nodes={n}.")


def test_the_table_counts_jobs_and_node_hours(lesson: list) -> None:
    row = budget_table(("local",), students=2, jobs=lesson).splitlines()[2]
    hours = (2 * 30 + 3 * 20 + 4 * 10 + 2 * 5 + 4 * 5 + 10 + 2 * 10 + 7 + 3 + 2 + 1) / 60
    assert row == ("| 99 | 14 | job.sh 2x30min, --wrap 3x20min, plain.sh 4x10min, salloc 2x5min, --wrap 1x5min x4, "
                   "--wrap 1x10min, --wrap 2x10min, --wrap 1x7min, srun 1x3min, plain.sh 1x2min, --wrap 1x1min | "
                   f"{hours:.2f} | {2 * hours:.2f} |")


def test_a_jobscript_no_submission_names_counts_once(tmp_path: Path) -> None:
    cell = "%%jobscript lonely.sh\n#!/bin/bash\n#SBATCH --nodes=1-2\n#SBATCH --time=00:10:00\nsrun hostname\n"
    (job,) = requests("local", _notebook(tmp_path, cell))
    assert (job.lesson, job.script, job.nodes, job.seconds, job.jobs) == ("97", "lonely.sh", 2, 600, 1)


def _notebook(folder: Path, *cells: str) -> list:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), folder / "97-x.ipynb")
    return read_course([folder])


def test_no_time_asked_is_the_partitions_default_and_none_at_all_counts_zero(tmp_path: Path) -> None:
    partition = partition_for(load_profile("cscs-alps"), False)
    jobs = _notebook(tmp_path, "!salloc -N 2 hostname")
    (job,) = requests("cscs-alps", jobs)
    assert (job.nodes, job.seconds) == (2, parse_time(partition.default_time or partition.max_time))
    (local,) = requests("local", jobs)   # the local debug partition: no default, no limit
    assert local.unlimited and local.node_hours == 0
    assert budget_table(("local",), jobs=jobs).endswith("count 0 there: 1 at local.")


def test_gpus_are_counted_as_the_site_grants_them(tmp_path: Path) -> None:
    both, one = requests("cscs-alps", _notebook(
        tmp_path, "%%jobscript gpu.sh --gpus-per-node 2\n#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --time=30\nsrun x\n",
        'submit("gpu.sh")', 'submit("gpu.sh", nodes=1, **hpcnb.gpu_options(1))'))
    assert (both.nodes, both.gpus_per_node, both.gpu_hours) == (2, 2, pytest.approx(2 * 2 * 0.5))
    assert (one.nodes, one.gpus_per_node) == (1, 1)


def test_the_instructors_table_is_what_the_lessons_ask_for_today() -> None:
    text = (ROOT / "INSTRUCTORS.md").read_text()
    found = re.search(r"<!-- budget: python -m hpcnb.course.budget -->\n(.*?)\n<!-- /budget -->", text, re.S)
    assert found, "INSTRUCTORS.md: no node-hour budget table between its <!-- budget --> markers"
    assert found[1] == budget_table(), \
        "INSTRUCTORS.md's node-hour table is out of date: paste what `python -m hpcnb.course.budget` prints"


def test_every_lesson_that_submits_a_job_is_in_the_table() -> None:
    jobs = submissions()
    lessons = {job.lesson.lstrip("0") for job in jobs}
    rows = {line.split("|")[1].strip() for line in budget_table().splitlines()[2:] if line.startswith("|")}
    assert {"1", "3", "4", "8", "12", "15"} <= lessons and lessons | {"**all**"} == rows
    assert len(jobs) > 2 * len(jobscript_cells())   # not only the %%jobscript cells: sbatch, salloc, submit()...


def test_every_job_the_lessons_submit_gives_a_time_limit() -> None:
    """The course teaches "always give a time limit": at Alps, where ``normal`` has no default time,
    no job of the lessons gets the partition's maximum, but lesson 3's ``broken.sh`` (sbatch refuses
    it: its ``--time`` after a command is what that cell lints) and lesson 12's ``long.sh`` (its limit
    is computed to fit the machine: the point of its cell)."""
    profile = load_profile("cscs-alps")
    at_most = [(r.lesson, r.script) for r in requests("cscs-alps")
               if r.seconds == parse_time(partition_for(profile, r.gpus_per_node > 0).max_time)]
    assert sorted(at_most) == [("03", "broken.sh"), ("12", "long.sh")], \
        f"jobs with no time limit of their own, given the partition's maximum at cscs-alps: {at_most}"
