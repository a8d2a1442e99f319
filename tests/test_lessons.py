"""hpcnb.setup(): the first line of every lesson, on a laptop and inside a portal's job."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, os, shutil, sys
import hpcnb
work = hpcnb.setup("probe")
print(json.dumps({"cwd": os.getcwd(), "work": str(work), "sbatch": shutil.which("sbatch"),
                  "python": shutil.which("python3"), "env": dict(os.environ)}))
"""


def _run_setup(folder: Path, extra_env: dict[str, str]) -> tuple[dict, str]:
    (folder / "work" / "probe").mkdir(parents=True)
    (folder / "work" / "probe" / "old-output.txt").write_text("from the last run")
    env = {**os.environ, "HPCNB_SLURM": "local", **extra_env}
    res = subprocess.run([sys.executable, "-c", PROBE], cwd=folder, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(res.stdout.splitlines()[-1]), res.stderr


def test_setup_puts_slurm_and_this_python_first_and_starts_clean(tmp_path: Path) -> None:
    seen, stderr = _run_setup(tmp_path, {})
    work = tmp_path / "work" / "probe"
    assert seen["cwd"] == seen["work"] == str(work) and not any(work.iterdir())
    assert Path(seen["sbatch"]).parent.name.startswith("bin-")         # the local Slurm's commands
    assert Path(seen["python"]).parent == Path(sys.executable).parent  # jobs get this environment
    assert "inside Slurm job" not in stderr


def test_setup_inside_a_portal_job_drops_the_jobs_variables_once(tmp_path: Path) -> None:
    portal = {"SLURM_JOB_ID": "77", "SLURM_MEM_PER_NODE": "2048", "SLURM_CPUS_PER_TASK": "4",
              "SRUN_DEBUG": "3", "SLURM_CONF": "/etc/slurm/slurm.conf"}
    seen, stderr = _run_setup(tmp_path, portal)
    assert not {"SLURM_JOB_ID", "SLURM_MEM_PER_NODE", "SLURM_CPUS_PER_TASK", "SRUN_DEBUG"} & set(seen["env"])
    assert seen["env"]["SLURM_CONF"] == "/etc/slurm/slurm.conf"        # what the site sets on purpose stays
    assert stderr.count("this notebook runs inside Slurm job 77") == 1


def test_every_lesson_opens_with_questions_time_and_its_exercises() -> None:
    """Issue 13, item 8: each lesson's first cell asks its questions, says how long it runs and
    links its own exercise notebook, which exists in exercises/ and solutions/."""
    root = Path(__file__).resolve().parent.parent
    lessons = sorted((root / "notebooks").glob("[0-9][0-9]*-*.ipynb"))
    assert len(lessons) >= 14
    for lesson in lessons:
        head = "".join(json.loads(lesson.read_text())["cells"][0]["source"])
        assert "**Questions**" in head and "**Time**" in head, lesson.name
        exercise = f"{lesson.stem}-exercises.ipynb"
        assert f"(../exercises/{exercise})" in head, f"{lesson.name} does not link ../exercises/{exercise}"
        assert (root / "exercises" / exercise).is_file() and (root / "solutions" / exercise).is_file(), exercise


ROOT = Path(__file__).resolve().parent.parent
# Issue 25: lessons 6 and 7 are edited on another branch, which drops their solutions links too.
def _markdown(notebook: Path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
                     if c["cell_type"] == "markdown")


def test_every_relative_link_of_a_lesson_or_exercise_finds_its_file() -> None:
    """Issue 25, item 1: in the lab (`make lab` serves the repository root) each link opens a notebook."""
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "exercises").glob("*.ipynb"))
    broken = [f"{nb.relative_to(ROOT)} -> {target}" for nb in notebooks
              for target in re.findall(r"\]\(((?!https?:|#|mailto:)[^)\s#]+)", _markdown(nb))
              if not (nb.parent / target).exists()]
    assert not broken, broken


def test_lessons_send_students_to_the_exercises_not_the_solutions() -> None:
    """Issue 25: a link into ../solutions/ is a spoiler, and dead in the students' release."""
    lessons = sorted((ROOT / "notebooks").glob("*.ipynb"))
    spoilers = [nb.name for nb in lessons if "solutions/" in _markdown(nb)]
    assert not spoilers, spoilers


SLURM_USE = re.compile(r"\b(sbatch|srun|salloc|squeue|sacct|scancel|submit\()|%%jobscript")


def test_every_notebook_that_runs_slurm_starts_with_setup() -> None:
    """Lessons, exercises and solutions: no PATH put together by hand (plumbing); a notebook that runs
    Slurm's commands calls hpcnb.setup() in its first code cell."""
    notebooks = [p for folder in ("notebooks", "exercises", "solutions") for p in sorted((ROOT / folder).glob("*.ipynb"))]
    assert len(notebooks) >= 3 * 14
    for notebook in notebooks:
        code = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
        name = notebook.relative_to(ROOT)
        assert not any('os.environ["PATH"]' in c or "slurm_env()" in c for c in code), f"{name} sets PATH itself"
        if SLURM_USE.search("\n".join(code)):
            assert "hpcnb.setup(" in code[0], f"{name}: its first code cell does not call hpcnb.setup()"
