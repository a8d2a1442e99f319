"""Issue 38 (items 4 and 5): collect and return follow no link and write into no folder someone else
could have prepared; odd files and odd names are skipped or graded, with a line; autograde keeps
earlier grades; the instructor's dry run (``collect --from``) and the feedback page.

The tests of another user's reach make real Unix users (as root; skipped otherwise); the grading
tests grade tiny made-up notebooks (seconds each)."""
from __future__ import annotations

import csv
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from hpcnb import cli
from hpcnb.course import grading
from hpcnb.course.grading import autograde

COURSE = "hpcnb-course"
TINY = "01-tiny"  # lesson 1's number: its exercise ex1 is "1.1"
WRONG = "answer = 41"
SECRET = b"root's own file\n"

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="needs root and useradd")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


# ------------------------------------------------------------------------------------ helpers

def _cell(kind: str, source: str, grade_id: str, points: float = 0, solution: bool = False) -> nbformat.NotebookNode:
    meta = {"nbgrader": {"grade": points > 0, "grade_id": grade_id, "locked": not solution, "schema_version": 3,
                         "solution": solution, "task": False, **({"points": points} if points else {})}}
    return (new_code_cell if kind == "code" else new_markdown_cell)(source, metadata=meta)


def tiny(answer: str = "answer = 42") -> nbformat.NotebookNode:
    """A one-exercise notebook, as the course writes them (ex1-solution, ex1-test with a message)."""
    return new_notebook(cells=[
        _cell("markdown", "Set `answer` to 42.", "ex1-task"),
        _cell("code", f"### BEGIN SOLUTION\n{answer}\n### END SOLUTION", "ex1-solution", solution=True),
        _cell("code", 'assert answer == 42, f"1.1: the answer is 42, not {answer!r}: ' + "long " * 80 + '"',
              "ex1-test", points=1),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def _solutions(tmp_path: Path, *stems: str) -> Path:
    folder = tmp_path / "solutions"
    folder.mkdir()
    for stem in stems:
        nbformat.write(tiny(), folder / f"{stem}.ipynb")
    return folder


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture
def student() -> Iterator[str]:
    """A Unix user with a 0700 home (as ci/portal.sh makes them), removed afterwards."""
    name = f"hps{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
    try:
        os.chmod(pwd.getpwnam(name).pw_dir, 0o700)
        yield name
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder everyone can write in, as /tmp (1777)."""
    folder = Path(tempfile.mkdtemp(prefix="hpcnb-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _as(user: str, *command: str) -> None:
    subprocess.run(["runuser", "-u", user, "--", *command], check=True, capture_output=True)


def _root_file(tmp_path: Path) -> Path:
    target = tmp_path / "root-only"
    target.write_bytes(SECRET)
    target.chmod(0o600)
    return target


def _hand_in(user: str, names: list[str]) -> Path:
    """``names`` in the user's ~/hpcnb-course/exercises/, written by the user."""
    exercises = Path(pwd.getpwnam(user).pw_dir) / COURSE / "exercises"
    _as(user, "mkdir", "-p", str(exercises))
    for name in names:
        _as(user, "cp", "/dev/null", str(exercises / name))
    return exercises


# ------------------------------------------------------------------------ collect: where it writes

@needs_root
def test_collect_replaces_a_planted_link_and_writes_nothing_through_it(student: str, tmp_path: Path) -> None:
    """A link waiting at SUBMISSIONS/<user>/<notebook> (root's own folder, an earlier collect's) is
    replaced by the notebook; the file it pointed at is untouched."""
    _hand_in(student, ["01-ok.ipynb"])
    target = _root_file(tmp_path)
    subs = tmp_path / "SUBMISSIONS"
    (subs / student).mkdir(parents=True)
    (subs / student / "01-ok.ipynb").symlink_to(target)
    assert cli.main(["grading", "collect", str(subs), "--users", student]) == 0
    assert target.read_bytes() == SECRET
    collected = subs / student / "01-ok.ipynb"
    assert stat.S_ISREG(collected.lstat().st_mode) and collected.read_bytes() == b""


@needs_root
def test_collect_refuses_a_folder_a_student_prepared(student: str, shared: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """SUBMISSIONS/ in a shared folder, made first by a student with a link in it: refused, nothing
    written; a SUBMISSIONS/ of root's that others can write in: refused too."""
    _hand_in(student, ["01-ok.ipynb"])
    target = _root_file(tmp_path)
    subs = shared / "SUBMISSIONS"
    _as(student, "mkdir", "-p", str(subs / student))
    _as(student, "ln", "-s", str(target), str(subs / student / "01-ok.ipynb"))
    assert cli.main(["grading", "collect", str(subs), "--users", student]) == 2
    err = capsys.readouterr().err
    assert f"{subs}: belongs to {student}, not root: nothing is written into a folder someone else" in err
    assert len(err.strip().splitlines()) == 1
    assert target.read_bytes() == SECRET and (subs / student / "01-ok.ipynb").is_symlink()

    open_to_all = shared / "OPEN"
    open_to_all.mkdir(mode=0o777)
    open_to_all.chmod(0o777)
    assert cli.main(["grading", "collect", str(open_to_all), "--users", student]) == 2
    assert f"{open_to_all}: others can write in it (mode 777): chmod go-w {open_to_all}" in capsys.readouterr().err
    assert list(open_to_all.iterdir()) == []


@needs_root
def test_autograde_refuses_an_out_folder_a_student_prepared(student: str, shared: Path, tmp_path: Path) -> None:
    """autograde's --out as collect's SUBMISSIONS: a grades/ a student made first (a link to a root
    file in it, named as grades.csv) is refused before anything is graded or written."""
    target = _root_file(tmp_path)
    out = shared / "grades"
    _as(student, "mkdir", "-p", str(out))
    _as(student, "ln", "-s", str(target), str(out / "grades.csv"))
    (tmp_path / "subs").mkdir()
    with pytest.raises(grading.GradingError, match=f"{out}: belongs to {student}, not root"):
        autograde(tmp_path / "subs", out, quiet=True)
    assert target.read_bytes() == SECRET


@needs_root
def test_collect_skips_a_directory_a_fifo_and_a_link_and_takes_the_rest(student: str, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    exercises = _hand_in(student, ["01-ok.ipynb", "02-ok.ipynb", "05-ok.ipynb"])
    _as(student, "mkdir", str(exercises / "04-dir.ipynb"))
    _as(student, "mkfifo", str(exercises / "03-pipe.ipynb"))
    _as(student, "ln", "-s", "/etc/shadow", str(exercises / "00-link.ipynb"))
    subs = tmp_path / "SUBMISSIONS"
    assert cli.main(["grading", "collect", str(subs), "--users", student]) == 0
    said = capsys.readouterr().out
    assert f"{student}: skipped 04-dir.ipynb: a directory, not a regular file" in said
    assert f"{student}: skipped 03-pipe.ipynb: a FIFO, not a regular file" in said
    assert f"{student}: skipped 00-link.ipynb: a symbolic link, not followed" in said
    assert f"{student}: 3 notebook(s) -> {subs / student}" in said
    assert sorted(p.name for p in (subs / student).iterdir()) == ["01-ok.ipynb", "02-ok.ipynb", "05-ok.ipynb"]
    info = subs.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o700)


# ------------------------------------------------------------------------ return: what it reads, where

@needs_root
def test_return_reads_no_link_and_refuses_a_feedback_folder_others_can_write(student: str, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A page in FEEDBACK/ that is a link (to root's file) is not copied into the student's home; a
    student's feedback/ that others can write in is refused; FEEDBACK/ others can write in too."""
    target = _root_file(tmp_path)
    pages = tmp_path / "feedback" / student
    pages.mkdir(parents=True)
    (pages / "01-ok.html").write_text("<p>ok</p>")
    (pages / "02-secret.html").symlink_to(target)
    assert cli.main(["grading", "return", str(tmp_path / "feedback"), "--users", student]) == 0
    assert f"{student}: skipped 02-secret.html: a symbolic link, not followed" in capsys.readouterr().out
    mine = Path(pwd.getpwnam(student).pw_dir) / COURSE / "feedback"
    assert sorted(p.name for p in mine.iterdir()) == ["01-ok.html"]

    _as(student, "chmod", "777", str(mine))
    assert cli.main(["grading", "return", str(tmp_path / "feedback"), "--users", student]) == 1
    assert f"{student}: feedback not returned: {mine}: others can write in it (mode 777)" in capsys.readouterr().out
    (tmp_path / "feedback").chmod(0o777)
    assert cli.main(["grading", "return", str(tmp_path / "feedback"), "--users", student]) == 2
    assert "others can write in it" in capsys.readouterr().err


# ------------------------------------------------------------------------ the dry run and odd names

ODD = ["--help", "new\nline", "Zoë", " blank"]


def test_collect_from_takes_any_student_name_and_skips_odd_files(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "mine"
    for name in ODD:
        (source / name).mkdir(parents=True)
        (source / name / f"{TINY}.ipynb").write_text("{}")
    (source / "Zoë" / "04-dir.ipynb").mkdir()
    os.mkfifo(source / "Zoë" / "05-pipe.ipynb")
    subs = tmp_path / "SUBMISSIONS"
    assert grading.main(["collect", str(subs), "--from", str(source)]) == 0
    said = capsys.readouterr().out
    assert "Zoë: skipped 04-dir.ipynb: a directory" in said and "Zoë: skipped 05-pipe.ipynb: a FIFO" in said
    assert "'new\\nline': 1 notebook(s)" in said and "' blank': 1 notebook(s)" in said
    assert sorted(p.name for p in subs.iterdir()) == sorted(ODD)
    assert all((subs / name / f"{TINY}.ipynb").read_text() == "{}" for name in ODD)


def test_collect_from_a_folder_of_notebooks_is_one_student_you(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "exercises"
    source.mkdir()
    (source / f"{TINY}.ipynb").write_text("{}")
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert grading.main(["collect", str(tmp_path / "subs"), "--from", str(source)]) == 0
    assert f"{me}: 1 notebook(s)" in capsys.readouterr().out
    assert (tmp_path / "subs" / me / f"{TINY}.ipynb").read_text() == "{}"
    assert grading.main(["collect", str(tmp_path / "subs"), "--from", str(source), "--users", "3"]) == 2
    assert "--from DIR or --users: one or the other" in capsys.readouterr().err
    assert grading.main(["collect", str(tmp_path / "subs"), "--from", str(tmp_path / "subs" / me / "x")]) == 2


def test_every_option_of_every_verb_shows_its_default() -> None:
    parser = grading.build_parser()
    verbs = next(a for a in parser._actions if a.dest == "command").choices
    for name, verb in verbs.items():
        for action in verb._actions:
            if action.option_strings and action.dest != "help":
                assert "default" in (action.help or ""), f"{name} {action.option_strings[0]}: no default in its help"


@needs_bwrap
@pytest.mark.slow
def test_odd_student_names_are_graded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """'--help', a newline, Unicode, a leading blank: each graded under its own name; '_x' and '.x'
    are said and left."""
    solutions = _solutions(tmp_path, TINY)
    subs = tmp_path / "subs"
    for name in [*ODD, "_notes", ".hidden"]:
        (subs / name).mkdir(parents=True)
        nbformat.write(tiny(), subs / name / f"{TINY}.ipynb")
    grades = autograde(subs, tmp_path / "grades", solutions=solutions, timeout=30)
    said = capsys.readouterr().out
    assert {(g.student, g.score, g.status) for g in grades} == {(name, 1, "graded") for name in ODD}, (
        [(g.student, g.message) for g in grades if g.status != "graded"])
    assert "ignoring _notes/ (a name starting with '.' or '_' is not a student's)" in said
    assert "'new\\nline' 01-tiny: 1/1" in said
    assert {r["student"] for r in _rows(tmp_path / "grades" / "grades.csv")} == set(ODD)
    assert all((tmp_path / "grades" / "feedback" / name / f"{TINY}.html").exists() for name in ODD)


# ------------------------------------------------------------------------ autograde: merged grades

@needs_bwrap
@pytest.mark.slow
def test_regrading_one_notebook_keeps_the_others_and_says_true_things(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Grade two notebooks, then regrade one (--notebook): grades.csv keeps the other's rows; a
    notebook not selected is not "no solution notebook"; cells.csv holds the assert's message; the
    feedback page's contents name the exercise ("1.1 test") and wrap long lines."""
    solutions = _solutions(tmp_path, TINY, "02-other")
    subs, out = tmp_path / "subs", tmp_path / "grades"
    (subs / "ada").mkdir(parents=True)
    nbformat.write(tiny(WRONG), subs / "ada" / f"{TINY}.ipynb")
    nbformat.write(tiny(), subs / "ada" / "02-other.ipynb")
    nbformat.write(tiny(), subs / "ada" / "99-mine.ipynb")
    assert grading.main(["autograde", str(subs), "--out", str(out), "--solutions", str(solutions),
                         "--timeout", "30"]) == 0
    first = {(r["notebook"], r["score"]) for r in _rows(out / "grades.csv")}
    assert first == {(TINY, "0"), ("02-other", "1")}
    cell = _rows(out / "cells.csv")[0]
    assert (cell["notebook"], cell["error"]) == (TINY, "AssertionError")
    assert cell["message"].startswith("1.1: the answer is 42, not 41: long long")
    assert len(cell["message"]) <= 300 and cell["message"].endswith("\u2026")
    page = (out / "feedback" / "ada" / f"{TINY}.html").read_text()
    assert ">1.1 test</a> (Score: 0.0 / 1.0)" in page and "Test cell" not in page
    assert "white-space: pre-wrap" in page
    capsys.readouterr()

    nbformat.write(tiny(), subs / "ada" / f"{TINY}.ipynb")  # corrected, regraded alone
    assert grading.main(["autograde", str(subs), "--out", str(out), "--solutions", str(solutions),
                         "--timeout", "30", "--notebook", TINY]) == 0
    said = capsys.readouterr().out
    assert "ignoring 99-mine.ipynb (no solution notebook of that name)" in said
    assert "02-other" not in said.replace(str(out), "")
    rows = _rows(out / "grades.csv")
    assert [(r["student"], r["notebook"], r["score"]) for r in rows] == [("ada", TINY, "1"), ("ada", "02-other", "1")]
    assert sorted((r["notebook"], r["error"]) for r in _rows(out / "cells.csv")) == [(TINY, ""), ("02-other", "")]


# ------------------------------------------------------------------------ INSTRUCTORS.md, followed

@needs_root
@needs_bwrap
@pytest.mark.slow
def test_the_grading_walk_through(student: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """INSTRUCTORS.md's Grading section, in order, on tiny solutions: release, work the kit's
    exercise, collect --from, autograde, return (to a portal user)."""
    solutions = _solutions(tmp_path, TINY)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["grading", "release", "kit", "--solutions", str(solutions)]) == 0
    worked = tmp_path / "dry" / student
    worked.mkdir(parents=True)
    shutil.copy(solutions / f"{TINY}.ipynb", worked)  # the exercise, answered
    assert cli.main(["grading", "collect", "SUBMISSIONS", "--from", "dry"]) == 0
    assert cli.main(["grading", "autograde", "SUBMISSIONS", "--solutions", str(solutions), "--timeout", "30"]) == 0
    assert _rows(tmp_path / "grades" / "grades.csv")[0]["score"] == "1"
    assert cli.main(["grading", "return", "grades/feedback", "--users", student]) == 0
    page = Path(pwd.getpwnam(student).pw_dir) / COURSE / "feedback" / f"{TINY}.html"
    assert page.stat().st_uid == pwd.getpwnam(student).pw_uid and "1.1 test" in page.read_text()
