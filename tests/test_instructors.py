"""INSTRUCTORS.md agrees with itself and with the lessons: each lesson's header gives the same
teaching and exercise minutes and the same measured run times as the guide's table, and each
schedule's slots add up to those minutes."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = (ROOT / "INSTRUCTORS.md").read_text()
LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# | 3 Your first batch job | 45 | 25 | 60 s / 2 min (before its memory section) | ✔ |
ROW = re.compile(r"^\| (\w+) [^|]+\| (\d+) \| (\d+) \| (\d+ (?:s|min)) / (\d+ (?:s|min))[^|]*\|\s*(✔?)\s*\|$", re.M)
TABLE = {m[1]: {"teaching": int(m[2]), "exercises": int(m[3]), "local": m[4], "real": m[5], "core": bool(m[6])}
         for m in ROW.finditer(GUIDE)}


def _number(path: Path) -> str:
    return path.name.split("-")[0].lstrip("0")


def _header(path: Path) -> str:
    """The lesson's ``**Time**`` line."""
    cells = nbformat.read(path, as_version=4).cells
    lines = [line for cell in cells[:4] if cell.cell_type == "markdown"
             for line in cell.source.splitlines() if line.startswith("**Time**")]
    assert len(lines) == 1, f"{path.name}: {len(lines)} '**Time**' lines in its first cells, want one"
    return lines[0]


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def test_the_table_lists_every_lesson() -> None:
    assert sorted(TABLE) == sorted(_number(p) for p in LESSONS)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_each_lesson_header_gives_the_guides_minutes_and_times(path: Path) -> None:
    row, header = TABLE[_number(path)], _header(path)
    assert f"teaching {row['teaching']} min and exercises {row['exercises']} min" in header, (
        f"{path.name}: its header should say 'teaching {row['teaching']} min and exercises {row['exercises']} min' "
        f"as INSTRUCTORS.md does:\n{header}")
    local = re.search(r"run in about (\d+ (?:s|min))", header)
    real = re.search(r"(\d+ (?:s|min)) on a real Slurm 22\.05", header)
    assert local and real, f"{path.name}: no local or real run time in its header:\n{header}"
    assert (local[1], real[1]) == (row["local"], row["real"]), (
        f"{path.name}: its header says {local[1]} / {real[1]}, INSTRUCTORS.md {row['local']} / {row['real']}")


def test_one_day_slots_are_the_core_lessons_minutes() -> None:
    day = GUIDE.split("**One day")[1].split("**Two days")[0]
    slots = re.findall(r"^\| (\d\d:\d\d)-(\d\d:\d\d) \| (.*) \|$", day, re.M)
    taught = {}
    for start, end, what in slots:
        lesson = re.match(r"lesson (\w+) \((\d+) \+ (\d+)\)", what)
        if lesson:
            row = TABLE[lesson[1]]
            assert (int(lesson[2]), int(lesson[3])) == (row["teaching"], row["exercises"]), what
            assert _minutes(end) - _minutes(start) == row["teaching"] + row["exercises"], f"{start}-{end}: {what}"
            taught[lesson[1]] = True
    assert sorted(taught) == sorted(n for n, row in TABLE.items() if row["core"])
    worked = sum(_minutes(e) - _minutes(s) for s, e, what in slots if not re.match(r"(break|lunch)", what))
    stated = re.search(r"(\d+) h (\d+) min of teaching and exercises", day)
    assert stated and int(stated[1]) * 60 + int(stated[2]) == worked


def test_two_days_give_each_lesson_its_minutes_once() -> None:
    days = GUIDE.split("**Two days")[1].split("## Per lesson")[0]
    slots = re.findall(r"(\w+) \((\d+)\)", days)
    lessons = {name: int(m) for name, m in slots if name in TABLE}
    assert lessons == {n: row["teaching"] + row["exercises"] for n, row in TABLE.items()}
    assert len([name for name, _ in slots if name in TABLE]) == len(TABLE)
    stated = re.search(r"(\d+) h (\d+) min\)", days)
    assert stated and int(stated[1]) * 60 + int(stated[2]) == sum(int(m) for _, m in slots)
