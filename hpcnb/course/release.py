"""The students' kit (``hpcnb grading release``): the committed course without solutions or tests,
exercises generated afresh, the kit's README and Makefile; and the check that it carries no solution.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hpcnb.course.exercises import (
    _MARKER,
    _STUB_LINES,
    _show,
    _significant,
    _strings,
    _text_lines,
    check,
    generate,
    secret_regions,
)
from hpcnb.course.nbgrader_io import _BASE, SOLUTIONS_DIR, GradingError, _nbgrader_meta, _read, solution_notebooks

__all__ = ["BUNDLE", "KIT", "bundle_problems", "release"]

#: What students get of the course checkout: its files as committed (exercises/ is generated afresh
#: from solutions/; the README and Makefile are the students' kit's, KIT).
BUNDLE = ("pyproject.toml", "environment.yml", "ci/install-system-deps.sh", "ci/build-horovod.sh", "hpcnb",
          "notebooks", "START.md")
KIT = Path(__file__).with_name("kit")  # README.md, Makefile: what students read and run
_NOT_BUNDLED = {"__pycache__", ".ipynb_checkpoints", "work", "solutions", "tests"}


def _bundle_files(root: Path) -> Iterator[Path]:
    for name in BUNDLE:
        top = root / name
        if top.is_file():
            yield top
        for path in sorted(top.rglob("*")) if top.is_dir() else []:
            rel = path.relative_to(root).parts
            if path.is_file() and not any(p in _NOT_BUNDLED or p.startswith(".") for p in rel) \
                    and path.suffix != ".pyc":
                yield path


def _committed(root: Path, names: Iterable[str], into: Path) -> bool:
    """Extract ``names`` of ``root``'s git HEAD into ``into`` (False: ``root`` is no git checkout)."""
    import io
    import tarfile

    def git(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)

    top = git("rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(os.fsdecode(top.stdout.strip())).resolve() != root.resolve():
        return False
    listed = git("ls-tree", "-z", "--name-only", "HEAD", "--", *names).stdout.decode().split("\0")
    archive = git("archive", "--format=tar", "HEAD", "--", *filter(None, listed))
    if archive.returncode != 0:
        raise GradingError(f"git archive HEAD failed in {root}: {archive.stderr.decode().strip()}")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return True


def release(out: Path, *, root: Path = _BASE, solutions: Path = SOLUTIONS_DIR, quiet: bool = False) -> list[str]:
    """Write the student bundle to ``out`` (a new folder, or a ``.tar.gz``): the course as committed
    (a git checkout; else its files as they are, with a warning) without ``solutions/`` and tests,
    exercises generated from the solutions, the students' kit's README and Makefile; returns its files.
    Nothing is written when the bundle would carry a solution (GradingError; see :func:`bundle_problems`)."""
    out, root, solutions = Path(out), Path(root), Path(solutions)
    shown = _show(solutions)
    if out.exists() and (out.is_file() or any(out.iterdir())):
        raise GradingError(f"{out} exists: give a new folder or archive name")
    with tempfile.TemporaryDirectory(prefix="hpcnb-release-") as tmp:
        source = Path(tmp) / "committed"
        if _committed(root, (*BUNDLE, "solutions"), source):
            if solutions.resolve() == (root / "solutions").resolve():
                solutions = source / "solutions"
        else:
            source = root
            print(f"warning: {root} is not a git checkout: the bundle takes its files as they are "
                  "(notebooks with their outputs)", file=sys.stderr)
        folder = Path(tmp) / out.name.removesuffix(".tar.gz")
        for path in [*_bundle_files(source), *sorted(KIT.iterdir())]:
            dest = folder / (path.name if path.parent == KIT else path.relative_to(source))
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        generate(solutions, folder / "exercises", quiet=True)
        problems = bundle_problems(folder, solutions)
        if problems:
            raise GradingError("the student bundle would carry solutions:\n  " + "\n  ".join(problems))
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.name.endswith(".tar.gz"):
            import tarfile

            with tarfile.open(out, "w:gz") as tar:
                tar.add(folder, arcname=folder.name)
        else:
            shutil.copytree(folder, out, dirs_exist_ok=True)
    if not quiet:
        print(f"wrote {out}: {len(files)} files, exercises/ from {shown}, no solutions")
    return files


def bundle_problems(bundle: Path, solutions: Path = SOLUTIONS_DIR) -> list[str]:
    """Why ``bundle`` is not fit for students: a ``solutions``/``tests`` folder, a notebook with
    nbgrader markers or filled-in solution cells, a hidden test anywhere, or exercises that are
    not the generated ones (:func:`check`). Lessons may share code with solutions: they teach it."""
    hidden: set[str] = set()
    shown = _taught_lines(Path(solutions).parent)
    for path in solution_notebooks(solutions).values():
        secrets, public = secret_regions(_read(path))
        shown |= _text_lines(public)
        hidden |= {line.strip() for what, text in secrets if what.startswith("hidden")
                   for line in text.splitlines() if _significant(line)}
    hidden -= shown  # a line some exercise shows, or a lesson teaches, is no secret
    problems = [f"{p.relative_to(bundle)}: a {p.name}/ folder" for p in sorted(bundle.rglob("*"))
                if p.is_dir() and p.name in ("solutions", "tests")]
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        rel = path.relative_to(bundle)
        try:
            raw = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        text = raw
        if path.suffix == ".ipynb":
            try:
                nb = json.loads(raw)
                text = "\n".join(_strings(nb))
                problems += _notebook_problems(rel, nb)
            except json.JSONDecodeError:
                problems.append(f"{rel}: not a notebook (JSON)")
        problems += [f"{rel}: hidden test {line!r}" for line in sorted(hidden & _text_lines(text))]
    return problems + check(solutions, bundle / "exercises")


def _taught_lines(course: Path) -> set[str]:
    """Every line of the course's lessons (``notebooks/``, none with nbgrader cells) and package code."""
    lines: set[str] = set()
    for path in sorted((course / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        if not any(_nbgrader_meta(cell) for cell in nb.get("cells", [])):
            lines |= _text_lines("\n".join(_strings(nb)))
    for path in sorted((course / "hpcnb").rglob("*.py")):
        lines |= _text_lines(path.read_text(encoding="utf-8"))
    return lines


def _notebook_problems(rel: Path, nb: dict[str, Any]) -> list[str]:
    """nbgrader markers, and solution cells that hold more than nbgrader's stub."""
    problems = []
    for cell in nb.get("cells", []):
        source = "".join(cell.get("source", ""))
        if _MARKER.search(source):
            problems.append(f"{rel}: nbgrader marker in a cell")
        meta = _nbgrader_meta(cell)
        if meta.get("solution") and not _text_lines(source) & _STUB_LINES:
            problems.append(f"{rel}: solution cell {meta.get('grade_id')!r} is filled in")
    return sorted(set(problems))
