"""``hpcnb grading collect`` / ``return`` (hpcnb/course/handout.py), and the round trip of a class
held on one machine: release -> the students' homes -> collect -> autograde -> return, with two
real Unix users made for the test (as root; skipped otherwise)."""
from __future__ import annotations

import csv
import os
import pwd
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import nbformat
import pytest

from hpcnb import cli
from hpcnb.course import handout

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "grading" / "solutions"
FIXTURE_NB = "00-grading-fixture"
COURSE = "hpcnb-course"

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="needs root and useradd")


def test_portal_users() -> None:
    assert handout.portal_users("3") == ["student1", "student2", "student3"]
    assert handout.portal_users(" ana  bo ") == ["ana", "bo"]


def test_unknown_user_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["grading", "collect", str(tmp_path / "subs"), "--users", "root no-such-user-hpcnb"])
    assert rc == 2
    assert "no such user: 'no-such-user-hpcnb'" in capsys.readouterr().err
    assert not (tmp_path / "subs").exists()  # every name is checked before anything is done
    assert cli.main(["grading", "return", str(tmp_path / "nope"), "--users", "root"]) == 2
    assert "no such folder" in capsys.readouterr().err


@pytest.fixture
def two_students():
    """Two Unix users with 0700 homes (as ci/portal.sh makes them), removed afterwards."""
    prefix = f"hpt{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}a", f"{prefix}b"]
    try:
        for name in names:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
            os.chmod(pwd.getpwnam(name).pw_dir, 0o700)
        yield names
    finally:
        for name in names:
            subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


def _as(user: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", *command], capture_output=True, text=True, check=False)


def _hand_in(user: str, notebook: Path, name: str) -> Path:
    """The user's ~/hpcnb-course/exercises/NAME: a copy of ``notebook``, the user's own."""
    owner = pwd.getpwnam(user)
    course = Path(owner.pw_dir) / COURSE
    (course / "exercises").mkdir(parents=True)
    shutil.copy(notebook, course / "exercises" / name)
    for path in (course, course / "exercises", course / "exercises" / name):
        os.chown(path, owner.pw_uid, owner.pw_gid)
    return course / "exercises"


@needs_root
@pytest.mark.slow
def test_round_trip_with_two_portal_users(two_students: list[str], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    ana, bo = two_students
    kit = tmp_path / "kit"
    assert cli.main(["grading", "release", str(kit), "--solutions", str(FIXTURE)]) == 0
    exercise = kit / "exercises" / f"{FIXTURE_NB}.ipynb"
    # ana hands in the worked notebook; bo the blank one, plus a link to ana's and a FIFO
    answered = _hand_in(ana, FIXTURE / exercise.name, exercise.name)
    blank = _hand_in(bo, exercise, exercise.name)
    assert _as(bo, "cat", str(answered / exercise.name)).returncode != 0  # homes are 0700
    os.symlink(answered / exercise.name, blank / "copied.ipynb")
    os.mkfifo(blank / "pipe.ipynb")
    with open(blank / "huge.ipynb", "wb") as huge:
        huge.truncate(handout.MAX_BYTES + 1)

    subs = tmp_path / "SUBMISSIONS"
    assert cli.main(["grading", "collect", str(subs), "--users", f"{ana} {bo}"]) == 0
    said = capsys.readouterr().out
    assert f"{bo}: skipped copied.ipynb" in said and f"{bo}: skipped pipe.ipynb: a FIFO, not a regular file" in said
    assert f"{bo}: skipped huge.ipynb: over {handout.MAX_BYTES} bytes" in said
    assert sorted(p.name for p in (subs / ana).iterdir()) == [exercise.name]
    assert sorted(p.name for p in (subs / bo).iterdir()) == [exercise.name]

    grades = tmp_path / "grades"
    assert cli.main(["grading", "autograde", str(subs), "--out", str(grades), "--solutions", str(FIXTURE),
                     "--notebook", FIXTURE_NB]) == 0
    with open(grades / "grades.csv", newline="") as fh:
        scores = {row["student"]: row["score"] for row in csv.DictReader(fh)}
    assert scores == {ana: "5", bo: "0"}

    assert cli.main(["grading", "return", str(grades / "feedback"), "--users", f"{ana} {bo}"]) == 0
    for user in (ana, bo):
        owner = pwd.getpwnam(user)
        folder = Path(owner.pw_dir) / COURSE / "feedback"
        page = folder / f"{FIXTURE_NB}.html"
        for path, mode in ((folder, 0o700), (page, 0o600)):
            info = path.lstat()
            assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (owner.pw_uid, mode), path
        assert _as(user, "cat", str(page)).returncode == 0
    assert _as(bo, "cat", str(Path(pwd.getpwnam(ana).pw_dir) / COURSE / "feedback" / page.name)).returncode != 0


@needs_root
def test_return_follows_no_link(two_students: list[str], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """A student's feedback/ made a link to somewhere else: nothing is written there."""
    ana, _ = two_students
    home = Path(pwd.getpwnam(ana).pw_dir)
    target = tmp_path / "elsewhere"
    target.mkdir()
    _as(ana, "mkdir", "-p", str(home / COURSE))
    os.symlink(target, home / COURSE / "feedback")
    pages = tmp_path / "feedback" / ana
    pages.mkdir(parents=True)
    (pages / "x.html").write_text("<p>ok</p>")
    assert cli.main(["grading", "return", str(tmp_path / "feedback"), "--users", ana]) == 1
    assert f"{ana}: feedback not returned: " in capsys.readouterr().out
    outcome = handout.return_feedback(tmp_path / "feedback", [ana])
    assert outcome.done == {} and "(a link or a file: a folder expected)" in outcome.failed[ana]
    assert not list(target.iterdir())
