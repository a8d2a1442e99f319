"""Student exercises from worked solutions (``hpcnb grading generate``) and the check that they
are up to date and leak nothing (``hpcnb grading check``).

``generate`` copies only the solution notebooks into the temporary course (nbgrader would
copy every other file of a source folder into the release), runs ``generate_assignment``
(LockCells, ClearSolutions, ClearOutput, ComputeChecksums, SaveCells, ClearHiddenTests ...)
and writes the student versions to ``exercises/``; exercises whose solution is gone are removed.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpcnb.course.nbgrader_io import (
    EXERCISES_DIR,
    ROOT,
    SOLUTIONS_DIR,
    GradingError,
    _build_source,
    _nbgrader_meta,
    _read,
    solution_notebooks,
)

__all__ = ["check", "generate", "secret_regions"]

#: Folders under exercises/ that are no exercise: Jupyter's checkpoints, the files a run writes.
_SKIPPED_DIRS = {".ipynb_checkpoints", "work"}
_MARKER = re.compile(r"(BEGIN|END)\s+(SOLUTION|HIDDEN\s+TESTS)\b")
_STUB_LINES = {"# YOUR CODE HERE", "raise NotImplementedError()", "YOUR ANSWER HERE"}


# ---------------------------------------------------------------------------- generate

def _release(notebooks: dict[str, Path], into: Path) -> dict[str, Path]:
    """Student versions of ``notebooks`` written into ``into``; ``{stem: path}``."""
    import nbformat

    into.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="hpcnb-generate-") as tmp:
        course = Path(tmp)
        _build_source(course, notebooks, db=False)
        for stem in notebooks:
            released = course / "release" / stem / f"{stem}.ipynb"
            if not released.exists():
                raise GradingError(f"nbgrader wrote no student version of {stem}.ipynb")
            nb = _read(released)
            target = into / f"{stem}.ipynb"
            nbformat.write(nb, os.fspath(target))
            written[stem] = target
    return written


def generate(solutions: Path = SOLUTIONS_DIR, exercises: Path = EXERCISES_DIR, *, quiet: bool = False) -> list[Path]:
    """Write ``exercises/<name>.ipynb`` for every ``solutions/<name>.ipynb``; remove stale ones."""
    solutions, exercises = Path(solutions), Path(exercises)
    notebooks = solution_notebooks(solutions)
    exercises.mkdir(parents=True, exist_ok=True)
    written = _release(notebooks, exercises)
    for old in sorted(exercises.glob("*.ipynb")):
        if old.stem not in notebooks:
            old.unlink()
            if not quiet:
                print(f"removed {old} (no {solutions.name}/{old.name} any more)")
    for path in written.values():
        if not quiet:
            print(f"wrote {path}")
    if not notebooks and not quiet:
        print(f"no notebooks in {solutions}: nothing to generate")
    problems = _leaks(notebooks, exercises)
    if problems:
        raise GradingError("the generated exercises still hold solution text:\n  " + "\n  ".join(problems))
    return list(written.values())


# ------------------------------------------------------------------------------- check

def _regions(source: str, begin: str, end: str) -> list[str]:
    """Text between ``### BEGIN X`` and ``### END X`` lines (markers excluded)."""
    out, current = [], None
    for line in source.splitlines():
        if begin in line:
            current = []
        elif end in line and current is not None:
            out.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    if current:
        out.append("\n".join(current))
    return out


def secret_regions(nb: Any) -> tuple[list[tuple[str, str]], str]:
    """``([(what, text), ...], public_text)``: solution code/answers and hidden tests of a solution
    notebook, and all the text that students may see (everything else)."""
    secrets: list[tuple[str, str]] = []
    public: list[str] = []
    for index, cell in enumerate(nb.cells):
        meta = _nbgrader_meta(cell)
        name = meta.get("grade_id") or f"cell {index + 1}"
        source = cell.get("source", "")
        if meta.get("solution"):
            found = _regions(source, "BEGIN SOLUTION", "END SOLUTION")
            if found:
                secrets += [(f"solution cell {name!r}", text) for text in found]
                public.append(_outside(source, "BEGIN SOLUTION", "END SOLUTION"))
            else:  # the whole cell is the answer (nbgrader replaces it by the stub)
                secrets.append((f"solution cell {name!r}", source))
        elif meta.get("grade") or meta.get("task") or meta.get("locked"):
            found = _regions(source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
            secrets += [(f"hidden tests of {name!r}", text) for text in found]
            public.append(_outside(source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"))
        else:
            public.append(source)
    return secrets, "\n".join(public)


def _outside(source: str, begin: str, end: str) -> str:
    keep, inside = [], False
    for line in source.splitlines():
        if begin in line:
            inside = True
        elif end in line and inside:
            inside = False
        elif not inside:
            keep.append(line)
    return "\n".join(keep)


def _significant(line: str) -> bool:
    """A line distinctive enough that finding it in an exercise means it leaked."""
    text = line.strip()
    return len(re.sub(r"[^A-Za-z0-9_]", "", text)) >= 5 and text not in _STUB_LINES


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _text_lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if line.strip()}


def _leaks(notebooks: dict[str, Path], exercises: Path) -> list[str]:
    """Markers, solution code or hidden tests found in any file under ``exercises``."""
    per_notebook: dict[str, list[tuple[str, str]]] = {}
    for stem, path in notebooks.items():
        secrets, public = secret_regions(_read(path))
        allowed = _text_lines(public)
        per_notebook[stem] = [
            (what, line.strip()) for what, text in secrets for line in text.splitlines()
            if _significant(line) and line.strip() not in allowed
        ]
    problems: list[str] = []
    if not exercises.is_dir():
        return problems
    for path in sorted(p for p in exercises.rglob("*") if p.is_file()):
        if _SKIPPED_DIRS & set(path.relative_to(exercises).parts[:-1]):
            continue  # Jupyter's checkpoints, and what running an exercise wrote (work/)
        rel = _show(path)
        try:
            raw = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files cannot carry code text we would recognise
        if path.suffix == ".ipynb":
            try:
                text = "\n".join(_strings(json.loads(raw)))
            except json.JSONDecodeError:
                text = raw
            candidates = per_notebook.get(path.stem) or [s for v in per_notebook.values() for s in v]
        else:
            text, candidates = raw, [s for v in per_notebook.values() for s in v]
        for match in _MARKER.finditer(text):
            line = text[:match.start()].count("\n") + 1
            problems.append(f"{rel}: nbgrader marker '### {match.group(0)}' (line {line} of its text)")
        present = _text_lines(text)
        reported: set[tuple[str, str]] = set()
        for what, line in candidates:
            if line in present and (what, line) not in reported:
                reported.add((what, line))
                kind = "hidden test" if what.startswith("hidden") else "solution code"
                problems.append(f"{rel}: {kind} leaked, {line!r} from the {what}")
    return problems


def _show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _same_notebook(a: Path, b: Path) -> bool:
    try:
        return json.loads(a.read_text(encoding="utf-8")) == json.loads(b.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False


def check(solutions: Path = SOLUTIONS_DIR, exercises: Path = EXERCISES_DIR) -> list[str]:
    """Problems with ``exercises/`` (empty list: up to date and nothing leaked)."""
    solutions, exercises = Path(solutions), Path(exercises)
    notebooks = solution_notebooks(solutions)
    problems: list[str] = []
    existing = {p.stem: p for p in sorted(exercises.glob("*.ipynb"))} if exercises.is_dir() else {}
    with tempfile.TemporaryDirectory(prefix="hpcnb-check-") as tmp:
        try:
            fresh = _release(notebooks, Path(tmp))
        except GradingError as err:
            return [str(err)]
        for stem, path in fresh.items():
            if stem not in existing:
                problems.append(f"{_show(exercises / path.name)} is missing (solution {_show(notebooks[stem])})")
            elif not _same_notebook(existing[stem], path):
                problems.append(f"{_show(existing[stem])} is out of date with {_show(notebooks[stem])}")
    for stem, path in existing.items():
        if stem not in notebooks:
            problems.append(f"{_show(path)} has no solution in {_show(solutions)} (stale)")
    problems += _leaks(notebooks, exercises)
    return problems
