"""The course's node-hour budget (INSTRUCTORS.md), from every job the lessons submit.

Every job that a lesson (``notebooks/``) or its exercises (``solutions/``) submit, read statically
(:mod:`hpcnb.course.budget_reading`: ``submit()``, ``!sbatch``, ``!salloc``, stand-alone ``!srun``,
``subprocess.run(["sbatch", ...])``, loops over literal node counts), is priced at each site as
sbatch would read it: its command line (or ``submit()`` keywords) over its script's ``#SBATCH``
lines, the script rendered for the site as the lesson renders it
(:func:`hpcnb.lessons.jobscripts.for_site`). ``--nodes`` (the upper bound of a range; 1 when not
given), ``--time`` (the partition's default when not given), ``--array`` (one job per task) and
the GPUs per node the site grants. Requested limits are an upper bound of what a class uses; what
could not be read counts with the site's defaults and is listed under the table.

``python -m hpcnb.course.budget [STUDENTS]`` prints the table that INSTRUCTORS.md holds.
"""
from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hpcnb.course.budget_reading import Submission, read_course
from hpcnb.course.nbgrader_io import ROOT, SOLUTIONS_DIR
from hpcnb.jobscript import ParsedScript, parse_script
from hpcnb.lessons.jobscripts import for_site, gpus_per_node, partition_for
from hpcnb.sites import Profile, load_profile
from hpcnb.slurm.arrays import parse_array
from hpcnb.slurm.gpus import NotAGpu, parse_gpus
from hpcnb.slurm.times import parse_time

__all__ = ["JobRequest", "SITES", "STUDENTS", "budget_table", "jobscript_cells", "not_read", "requests",
           "submissions"]

NOTEBOOKS_DIR = ROOT / "notebooks"
FOLDERS = (NOTEBOOKS_DIR, SOLUTIONS_DIR)
SITES = ("local", "cscs-alps")   # the laptop's and one GPU site's
STUDENTS = 20


@dataclass(frozen=True)
class JobRequest:
    """What one job a lesson submits asks for at a site."""

    lesson: str          # "01", "03b"...: the notebook's number (its exercises count with it)
    script: str          # the script's file, or the command ("--wrap", "salloc", "srun")
    nodes: int
    seconds: int         # the time limit asked for (or the partition's default)
    jobs: int            # 1, or the array's tasks
    gpus_per_node: int   # as the site grants them (0: none)
    unlimited: bool = False   # no time asked, none by default, the partition's INFINITE: counts 0

    @property
    def node_hours(self) -> float:
        return self.jobs * self.nodes * self.seconds / 3600

    @property
    def gpu_hours(self) -> float:
        return self.node_hours * self.gpus_per_node


def jobscript_cells(folders: Iterable[Path] = FOLDERS) -> list[tuple[str, str, int, str]]:
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


def submissions(folders: Iterable[Path] = FOLDERS) -> list[Submission]:
    """Every job the course's notebooks submit (:func:`hpcnb.course.budget_reading.read_course`)."""
    return read_course(folders)


def _gpus_asked(value: str | None, option: str) -> int | None:
    """The GPUs per node that ``--gres``/``--gpus-per-node`` ask for (None: not a GPU request)."""
    try:
        return parse_gpus(value, f"--{option}")[0] if value is not None else None
    except NotAGpu:
        return None


def _script(job: Submission, profile: Profile) -> tuple[ParsedScript | None, int]:
    """The job's script as sbatch reads it at this site, and the GPUs per node it gets there."""
    if job.body is None or job.body.text is None:
        return None, 0
    if not job.body.site:
        return parse_script(job.body.text), 0
    script = for_site(job.body.text, profile, gpus_per_node_wanted=job.body.gpus_wanted, project="course")
    return parse_script(script.text), script.gpus_per_node


def _request(job: Submission, site: str) -> JobRequest:
    """One job at ``site``: its command line over its script's lines, as sbatch reads them. A job
    with no time limit at all (none asked, the partition's INFINITE) counts 0 hours, ``unlimited``."""
    profile = load_profile(site)
    parsed, gpus = _script(job, profile)

    def value(option: str) -> str | None:
        given = job.option(option)
        if given is None and parsed is not None and (directive := parsed.get(option)):
            given = directive.value
        return None if given is None or "{" in given else given

    asked = next((n for o in ("gpus-per-node", "gres") if (n := _gpus_asked(value(o), o)) is not None), None)
    if asked is not None and (gpus == 0 or job.option("gpus-per-node") or job.option("gres")):
        gpus = gpus_per_node(profile, asked)
    partition = partition_for(profile, gpus > 0)
    time = value("time") or partition.default_time or partition.max_time
    seconds = parse_time(time)
    nodes = int((value("nodes") or "1").split("-")[-1])
    jobs = len(parse_array(array)[0]) if (array := value("array")) else 1
    return JobRequest(job.lesson, job.label, nodes, seconds or 0, jobs, gpus, unlimited=seconds is None)


def requests(site: str, jobs: list[Submission] | None = None) -> list[JobRequest]:
    """What each job the course submits (``jobs``: :func:`submissions`) asks for at ``site``."""
    return [_request(job, site) for job in (submissions() if jobs is None else jobs)]


def not_read(jobs: list[Submission]) -> str:
    """The note under the table: each submission with something that could not be read."""
    seen: dict[str, int] = {}
    for job in jobs:
        if job.notes:
            key = f"{job.lesson.lstrip('0')} {job.label}: {', '.join(job.notes)}"
            seen[key] = seen.get(key, 0) + 1
    items = [key + (f" (x{count})" if count > 1 else "") for key, count in seen.items()]
    return ("Not read statically, so counted with the script's or the site's defaults: " + "; ".join(items) + "."
            if items else "Every submission was read statically.")


def _hours(value: float) -> str:
    return f"{value:.2f}"


def _minutes(seconds: int) -> str:
    return f"{seconds // 60}min" if seconds % 60 == 0 else f"{seconds}s"


def _what(mine: list[JobRequest]) -> str:
    """A lesson's jobs, alike ones together: ``ddp.sh 2x5min x3`` (3 jobs)."""
    counts: dict[tuple[str, int, int], int] = {}
    for r in mine:
        counts[(r.script, r.nodes, r.seconds)] = counts.get((r.script, r.nodes, r.seconds), 0) + r.jobs
    return ", ".join(f"{script} {nodes}x{_minutes(seconds)}" + (f" x{jobs}" if jobs > 1 else "")
                     for (script, nodes, seconds), jobs in counts.items())


def budget_table(sites: tuple[str, ...] = SITES, students: int = STUDENTS,
                 jobs: list[Submission] | None = None) -> str:
    """The Markdown table: per lesson (with its exercises) its jobs, node-hours per student at each
    site, GPU-hours per student where the site grants GPUs, and the last site's node-hours for a
    class of ``students``; then the totals, and the note of what could not be read."""
    jobs = submissions() if jobs is None else jobs
    per_site = {site: requests(site, jobs) for site in sites}
    lessons = sorted({r.lesson for rs in per_site.values() for r in rs}, key=lambda n: (int(n[:2]), n))
    gpu_sites = [s for s in sites if any(r.gpus_per_node for r in per_site[s])]
    last = sites[-1]
    head = ["lesson", "jobs", f"jobs at {last}: script or command, nodes x time limit (x jobs)",
            *[f"node-h / student, {s}" for s in sites], *[f"GPU-h / student, {s}" for s in gpu_sites],
            f"node-h, {students} students, {last}"]
    rows = [head, ["---"] * len(head)]

    def row(label: str, what: str, chosen: set[str]) -> list[str]:
        pick = {s: [r for r in per_site[s] if r.lesson in chosen] for s in sites}
        return [label, str(sum(r.jobs for r in pick[last])), what,
                *[_hours(sum(r.node_hours for r in pick[s])) for s in sites],
                *[_hours(sum(r.gpu_hours for r in pick[s])) for s in gpu_sites],
                _hours(students * sum(r.node_hours for r in pick[last]))]

    for lesson in lessons:
        rows.append(row(lesson.lstrip("0"), _what([r for r in per_site[last] if r.lesson == lesson]), {lesson}))
    rows.append(row("**all**", f"{len(jobs)} submissions", set(lessons)))
    unlimited = [f"{n} at {site}" for site in sites if (n := sum(r.jobs for r in per_site[site] if r.unlimited))]
    counted_zero = (f" Jobs that ask for no time limit where their partition has none (INFINITE) count 0 there: "
                    f"{', '.join(unlimited)}.") if unlimited else ""
    return "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n\n" + not_read(jobs) + counted_zero


if __name__ == "__main__":
    print(budget_table(students=int(sys.argv[1]) if len(sys.argv) > 1 else STUDENTS))
