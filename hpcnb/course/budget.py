"""The course's node-hour budget (INSTRUCTORS.md), from the lessons' own job scripts.

Every ``%%jobscript`` cell of the lessons (``notebooks/``) and their exercises (``solutions/``) is
rendered for a site as the lesson renders it (:func:`hpcnb.lessons.jobscripts.for_site`), and its
``#SBATCH`` lines read as sbatch reads them: ``--nodes`` (the upper bound of a range; 1 when not
given), ``--time`` (the partition's default when not given), ``--array`` (one job per task) and the
GPUs per node the site grants. Requested limits are an upper bound of what a class uses.

``python -m hpcnb.course.budget [STUDENTS]`` prints the table that INSTRUCTORS.md holds.
"""
from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hpcnb.course.nbgrader_io import ROOT, SOLUTIONS_DIR
from hpcnb.jobscript import parse_script
from hpcnb.lessons.jobscripts import for_site, partition_for
from hpcnb.sites import load_profile
from hpcnb.slurm.arrays import parse_array
from hpcnb.slurm.times import parse_time

__all__ = ["JobRequest", "SITES", "STUDENTS", "budget_table", "jobscript_cells", "requests"]

NOTEBOOKS_DIR = ROOT / "notebooks"
SITES = ("local", "cscs-alps")   # the laptop's and one GPU site's
STUDENTS = 20


@dataclass(frozen=True)
class JobRequest:
    """What one lesson's job script asks for at a site."""

    lesson: str          # "01", "03b"...: the notebook's number (its exercises count with it)
    script: str          # the file the cell writes
    nodes: int
    seconds: int         # the time limit asked for (or the partition's default)
    jobs: int            # 1, or the array's tasks
    gpus_per_node: int   # as the site grants them (0: none)

    @property
    def node_hours(self) -> float:
        return self.jobs * self.nodes * self.seconds / 3600

    @property
    def gpu_hours(self) -> float:
        return self.node_hours * self.gpus_per_node


def jobscript_cells(folders: Iterable[Path] = (NOTEBOOKS_DIR, SOLUTIONS_DIR)) -> list[tuple[str, str, int, str]]:
    """(notebook, file, GPUs per node asked, body) of every ``%%jobscript`` cell of the course's
    numbered notebooks, in file order."""
    cells = []
    for notebook in sorted(p for folder in folders for p in Path(folder).glob("[0-9]*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and source.startswith("%%jobscript"):
                magic, _, body = source.partition("\n")
                words = shlex.split(magic)[1:]
                gpus = int(words[words.index("--gpus-per-node") + 1]) if "--gpus-per-node" in words else 0
                cells.append((notebook.name, words[0], gpus, body))
    return cells


def _request(notebook: str, name: str, gpus: int, body: str, site: str) -> JobRequest:
    """One cell's script at ``site``, read as sbatch reads it. Raises ValueError for a script
    with no time limit at all (none asked, the partition's INFINITE)."""
    profile = load_profile(site)
    script = for_site(body, profile, gpus_per_node_wanted=gpus, project="course")
    parsed = parse_script(script.text)
    value = lambda option: (d.value if (d := parsed.get(option)) else None)   # noqa: E731
    nodes = int((value("nodes") or "1").split("-")[-1])
    partition = partition_for(profile, script.gpus_per_node > 0)
    time = value("time") or partition.default_time or partition.max_time
    seconds = parse_time(time)
    if seconds is None:
        raise ValueError(f"{notebook} {name}: no time limit at {site} (--time={time}): no budget")
    jobs = len(parse_array(value("array"))[0]) if value("array") else 1
    return JobRequest(notebook.split("-")[0], name, nodes, seconds, jobs, script.gpus_per_node)


def requests(site: str, cells: list[tuple[str, str, int, str]] | None = None) -> list[JobRequest]:
    """What each of the course's job scripts (``cells``: :func:`jobscript_cells`) asks for at ``site``."""
    return [_request(*cell, site) for cell in (jobscript_cells() if cells is None else cells)]


def _hours(value: float) -> str:
    return f"{value:.2f}"


def budget_table(sites: tuple[str, ...] = SITES, students: int = STUDENTS,
                 cells: list[tuple[str, str, int, str]] | None = None) -> str:
    """The Markdown table: per lesson (with its exercises) its job scripts, node-hours per student
    at each site, GPU-hours per student where the site grants GPUs, and the last site's node-hours
    for a class of ``students``; then the totals."""
    cells = jobscript_cells() if cells is None else cells
    per_site = {site: requests(site, cells) for site in sites}
    lessons = sorted({r.lesson for rs in per_site.values() for r in rs}, key=lambda n: (int(n[:2]), n))
    gpu_sites = [s for s in sites if any(r.gpus_per_node for r in per_site[s])]
    last = sites[-1]
    head = ["lesson", f"job scripts at {last}: nodes x time limit", *[f"node-h / student, {s}" for s in sites],
            *[f"GPU-h / student, {s}" for s in gpu_sites], f"node-h, {students} students, {last}"]
    rows = [head, ["---"] * len(head)]

    def row(label: str, scripts: str, chosen: set[str]) -> list[str]:
        pick = {s: [r for r in per_site[s] if r.lesson in chosen] for s in sites}
        return [label, scripts, *[_hours(sum(r.node_hours for r in pick[s])) for s in sites],
                *[_hours(sum(r.gpu_hours for r in pick[s])) for s in gpu_sites],
                _hours(students * sum(r.node_hours for r in pick[last]))]

    for lesson in lessons:
        mine = [r for r in per_site[last] if r.lesson == lesson]
        scripts = ", ".join(f"{r.script} {r.nodes}x{r.seconds // 60}min" + (f" x{r.jobs}" if r.jobs > 1 else "")
                            for r in mine)
        rows.append(row(lesson.lstrip("0"), scripts, {lesson}))
    rows.append(row("**all**", f"{len(per_site[last])} scripts", set(lessons)))
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


if __name__ == "__main__":
    print(budget_table(students=int(sys.argv[1]) if len(sys.argv) > 1 else STUDENTS))
