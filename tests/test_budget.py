"""The node-hour budget in INSTRUCTORS.md (issue 39, item 7): computed from the lessons' own job
scripts (hpcnb.course.budget), and still what they ask for today."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpcnb.course.budget import budget_table, jobscript_cells, requests
from hpcnb.lessons.jobscripts import partition_for
from hpcnb.sites import load_profile
from hpcnb.slurm.times import parse_time

ROOT = Path(__file__).resolve().parent.parent


def _cell(body: str, gpus: int = 0) -> list[tuple[str, str, int, str]]:
    return [("99-pretend.ipynb", "job.sh", gpus, "#!/bin/bash\n" + body + "srun hostname\n")]


def test_the_instructors_table_is_what_the_lessons_ask_for_today() -> None:
    text = (ROOT / "INSTRUCTORS.md").read_text()
    found = re.search(r"<!-- budget: python -m hpcnb.course.budget -->\n(.*?)\n<!-- /budget -->", text, re.S)
    assert found, "INSTRUCTORS.md: no node-hour budget table between its <!-- budget --> markers"
    assert found[1] == budget_table(), \
        "INSTRUCTORS.md's node-hour table is out of date: paste what `python -m hpcnb.course.budget` prints"


def test_every_lesson_that_writes_a_job_script_is_in_the_table() -> None:
    lessons = {name.split("-")[0].lstrip("0") for name, *_ in jobscript_cells()}
    rows = {line.split("|")[1].strip() for line in budget_table().splitlines()[2:]}
    assert {"1", "3", "8", "15"} <= lessons and lessons | {"**all**"} == rows


def test_a_script_counts_its_nodes_time_and_array_tasks() -> None:
    (job,) = requests("local", _cell("#SBATCH --nodes=1-2\n#SBATCH --array=0-5%2\n#SBATCH --time=00:10:00\n"))
    assert (job.lesson, job.script, job.nodes, job.seconds, job.jobs) == ("99", "job.sh", 2, 600, 6)
    assert job.node_hours == pytest.approx(2.0)   # 6 jobs x 2 nodes (the range's upper bound) x 10 min


def test_no_time_asked_is_the_partitions_default() -> None:
    profile = load_profile("cscs-alps")
    partition = partition_for(profile, False)
    (job,) = requests("cscs-alps", _cell("#SBATCH --ntasks=1\n"))
    assert job.nodes == 1 and job.seconds == parse_time(partition.default_time or partition.max_time)


def test_gpus_are_counted_as_the_site_grants_them() -> None:
    (job,) = requests("cscs-alps", _cell("#SBATCH --nodes=2\n#SBATCH --time=30\n", gpus=2))
    assert job.gpus_per_node == 2 and job.gpu_hours == pytest.approx(2 * 2 * 0.5)
    table = budget_table(("local", "cscs-alps"), students=3, cells=_cell("#SBATCH --nodes=2\n#SBATCH --time=30\n",
                                                                          gpus=2))
    assert table.splitlines()[2] == "| 99 | job.sh 2x30min | 1.00 | 1.00 | 2.00 | 2.00 | 3.00 |"
