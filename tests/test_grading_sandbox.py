"""Hostile submissions, graded for real (nbgrader, bubblewrap): each is graded, bounded and told.

One small assignment (``answer``: 2 points with a hidden test, ``second``: 1 point) and one
autograde run over several students, each trying one thing in an extra cell of the solution.
Also: the student bundle (``release``) carries no solutions.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from hpcnb.course import grading, sandbox
from hpcnb.course.grading import ROOT, SOLUTIONS_DIR, autograde, bundle_problems, release

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

NAME = "00-hostile"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "grading" / "solutions"
FIXTURE_NB = "00-grading-fixture"
LIMITS = sandbox.Limits(cpu_seconds=120, memory_bytes=3 << 30, processes=96, file_bytes=16 << 20,
                        disk_bytes=64 << 20, open_files=256)
TIMEOUT = 10  # seconds per cell


def _cell(kind: str, source: str, grade_id: str, points: float = 0, solution: bool = False) -> nbformat.NotebookNode:
    grade = points > 0
    meta = {"nbgrader": {"grade": grade, "grade_id": grade_id, "locked": not solution, "schema_version": 3,
                         "solution": solution, "task": False, **({"points": points} if grade else {})}}
    make = new_code_cell if kind == "code" else new_markdown_cell
    return make(source, metadata=meta)


def assignment() -> nbformat.NotebookNode:
    return new_notebook(cells=[
        _cell("markdown", "Set `answer` to 42 and `second` to 'ok'.", "intro"),
        _cell("code", "### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION", "answer", solution=True),
        _cell("code", "assert answer == 42\n### BEGIN HIDDEN TESTS\nassert isinstance(answer, int)\n"
                      "### END HIDDEN TESTS", "test_answer", points=2),
        _cell("code", "### BEGIN SOLUTION\nsecond = 'ok'\n### END SOLUTION", "second", solution=True),
        _cell("code", "assert second == 'ok'", "test_second", points=1),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def with_attack(code: str) -> nbformat.NotebookNode:
    """The solution, plus a cell of the student's own after the first answer."""
    nb = assignment()
    nb.cells.insert(2, new_code_cell(code))
    return nb


def attacks(ours: Path, solutions: Path, port: int, token: str) -> dict[str, nbformat.NotebookNode]:
    targets = [str(SOLUTIONS_DIR), str(solutions / f"{NAME}.ipynb"), str(ROOT / "tests"), "/root/.ssh"]
    snoop = f"""
import glob, os, resource, socket, subprocess
found = [p for p in {targets!r} + glob.glob({str(ours)!r} + "/hpcnb-autograde-*/source/*/*.ipynb") if os.path.exists(p)]
print("READABLE:", found)
wrote = []
for db in glob.glob({str(ours)!r} + "/hpcnb-autograde-*/gradebook.db") + glob.glob("/tmp/hpcnb-autograde-*/gradebook.db"):
    open(db, "wb").write(b"forged")
    wrote.append(db)
print("GRADEBOOK:", wrote)
for address in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
    try:
        socket.create_connection(address, timeout=5)
        print("CONNECT:", address, "connected")
    except OSError as err:
        print("CONNECT:", address, type(err).__name__, err.strerror)
print("ENV:", sorted(os.environ))
print("LIMITS:", [resource.getrlimit(getattr(resource, n))[0] for n in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE")])
try:
    hog = bytearray(4 << 30)
except MemoryError:
    print("MEMORY: MemoryError")
job = subprocess.run(["sbatch", "--parsable", "--wait", "-J", "hostile-job", "--wrap", "echo private"],
                     capture_output=True, text=True)
seen = subprocess.run(["sacct", "-n", "-X", "-o", "JobName%30"], capture_output=True, text=True).stdout.split()
print("SLURM:", job.returncode, seen)
for sbatch in ["/usr/bin/sbatch", "/opt/slurm/bin/sbatch"]:  # a real Slurm's, if the machine has one
    if os.path.exists(sbatch):
        real = subprocess.run([sbatch, "--test-only", "--wrap", "true"], capture_output=True, text=True, timeout=60)
        print("REAL SLURM:", sbatch, real.returncode != 0)
"""
    return {
        "snoop": with_attack(snoop),
        "forkbomb": with_attack(  # copies of the kernel fill the sandbox's process slots, and stay
            "import os, time\nwhile True:\n    try:\n        if os.fork() == 0:\n            time.sleep(3600)\n"
            "    except BlockingIOError:\n        time.sleep(0.01)"),
        "setsid": with_attack(
            "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execvp('sleep', ['sleep', '{token}'])\n    os._exit(0)\nos.wait()\n"
            "import glob, time\ndef sleeping():  # the grandchild is sleep (exec'd), not a fork\n"
            "    for path in glob.glob('/proc/[0-9]*/cmdline'):\n        try:\n"
            f"            if open(path, 'rb').read() == b'sleep\\0{token}\\0':\n                return True\n"
            "        except OSError:\n            pass\n"
            "for _ in range(200):\n    if sleeping():\n        break\n    time.sleep(0.05)\nprint('detached')"),
        "disk": with_attack(
            "for path in ('/usr/x', '/x', 'big'):\n    try:\n        open(path, 'wb').write(b'x' * (32 << 20))\n"
            "    except OSError as err:\n        print(path, err.strerror)\n"
            "try:\n    for i in range(1000):\n        open(f'/tmp/f{i}', 'wb').write(b'x' * (8 << 20))\n"
            "except OSError as err:\n    print('fill', err.strerror)"),
        "flood": with_attack("for _ in range(1024):\n    print('x' * (1 << 20))"),
        "tamper": tampered(),
    }


def tampered() -> nbformat.NotebookNode:
    """A wrong answer, its test "fixed", its points raised, the other test deleted."""
    nb = assignment()
    nb.cells[1].source = "answer = 41"
    nb.cells[2].source = "assert True"
    nb.cells[2].metadata["nbgrader"]["points"] = 100
    del nb.cells[4]
    return nb


@pytest.mark.slow
def test_hostile_submissions_are_contained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = tmp_path / "tmp"  # the course folder lands here: the snoop knows where to look
    ours.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(ours))
    monkeypatch.setenv("HPCNB_TEST_SECRET", "tok-5up3r-s3cr3t")
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    nbformat.write(assignment(), solutions / f"{NAME}.ipynb")
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    token = str(900000 + os.getpid() % 90000)
    subs = tmp_path / "subs"
    for student, nb in attacks(ours, solutions, server.getsockname()[1], token).items():
        (subs / student).mkdir(parents=True)
        nbformat.write(nb, subs / student / f"{NAME}.ipynb")

    out = tmp_path / "grades"
    started = time.monotonic()
    grades = autograde(subs, out, solutions=solutions, timeout=TIMEOUT, limits=LIMITS, quiet=True)
    took = time.monotonic() - started
    print(f"\n6 hostile submissions graded in {took:.0f} s")
    by = {g.student: g for g in grades}
    assert {s: (g.status, g.score) for s, g in by.items()} == {
        "snoop": ("graded", 3), "forkbomb": ("graded", 3), "setsid": ("graded", 3), "disk": ("graded", 3),
        "flood": ("graded", 3), "tamper": ("graded", 1)}, {s: g.message for s, g in by.items()}
    assert {c.name: c.score for c in by["tamper"].cells.values()} == {"test_answer": 0, "test_second": 1}
    assert took < 6 * 60, f"grading took {took:.0f} s"

    feedback = {s: html.unescape((out / "feedback" / s / f"{NAME}.html").read_text()) for s in by}
    autograded = {s: (out / "autograded" / s / f"{NAME}.ipynb").read_text() for s in by}
    snoop = feedback["snoop"]
    assert "READABLE: []" in snoop and "GRADEBOOK: []" in snoop
    assert f"CONNECT: ('127.0.0.1', {server.getsockname()[1]}) ConnectionRefusedError" in snoop
    assert "CONNECT: ('1.1.1.1', 53) OSError Network is unreachable" in snoop
    with pytest.raises(BlockingIOError):
        server.accept()  # nobody came from the sandbox
    assert "HPCNB_TEST_SECRET" not in autograded["snoop"] and "tok-5up3r" not in autograded["snoop"]
    limits = [LIMITS.cpu_seconds, LIMITS.memory_bytes, LIMITS.processes, LIMITS.file_bytes]
    assert f"LIMITS: {limits}" in snoop and "MEMORY: MemoryError" in snoop
    assert "SLURM: 0 ['hostile-job']" in snoop  # its own private Slurm, with only its own job
    assert set(re.findall(r"REAL SLURM: \S+ (\w+)", snoop)) <= {"True"}  # a real Slurm's sbatch failed
    ours_sacct = subprocess.run(["sacct", "-n", "-X", "-o", "JobName%30"], capture_output=True, text=True)
    assert "hostile-job" not in ours_sacct.stdout  # never the grader's Slurm

    stopped = re.search(r"(\d+) forked copies of the kernel were stopped and the kernel interrupted",
                        feedback["forkbomb"])
    assert stopped and LIMITS.processes // 2 < int(stopped.group(1)) < LIMITS.processes, feedback["forkbomb"][-3000:]
    assert "were still running when the last cell finished" in feedback["setsid"]
    assert f"sleep {token}" in feedback["setsid"]
    assert "/usr/x Read-only file system" in feedback["disk"] and "/x Read-only file system" in feedback["disk"]
    assert "big File too large" in feedback["disk"] and "fill No space left on device" in feedback["disk"]
    assert "this cell printed more than 131072 bytes" in feedback["flood"]
    assert len(autograded["flood"]) < 4 << 20

    import psutil

    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline == ["sleep", token] or any(str(ours) in a for a in cmdline):
            left.append((proc.pid, cmdline))
    assert not left, f"processes left behind: {left}"
    assert (out / "gradebook.db").read_bytes()[:6] != b"forged"


def test_release_carries_no_solutions(tmp_path: Path) -> None:
    files = release(tmp_path / "bundle", quiet=True)  # it checks bundle_problems() itself
    assert not [f for f in files if f.startswith(("solutions/", "tests/")) or "/solutions/" in f]
    assert {f"exercises/{p.name}" for p in SOLUTIONS_DIR.glob("*.ipynb")} <= set(files)
    assert "hpcnb/course/sandbox.py" in files and "pyproject.toml" in files and "Makefile" in files
    assert any(f.startswith("notebooks/") for f in files)


def test_release_refuses_a_leak(tmp_path: Path) -> None:
    """A solution notebook left among the lessons stops the release, and says where."""
    root = tmp_path / "course"
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(FIXTURE / f"{FIXTURE_NB}.ipynb", root / "notebooks" / "answers.ipynb")
    with pytest.raises(grading.GradingError, match="would carry solutions") as refused:
        release(tmp_path / "bundle", root=root, solutions=FIXTURE, quiet=True)
    assert not (tmp_path / "bundle").exists()  # nothing written
    said = str(refused.value)
    assert "notebooks/answers.ipynb: nbgrader marker in a cell" in said
    assert "notebooks/answers.ipynb: solution cell 'add' is filled in" in said
    assert "notebooks/answers.ipynb: hidden test 'assert add(-40, 40) == 0" in said
    (tmp_path / "bundle" / "solutions").mkdir(parents=True)
    assert "solutions: a solutions/ folder" in bundle_problems(tmp_path / "bundle", FIXTURE)
    with pytest.raises(grading.GradingError, match="exists: give a new folder"):
        release(tmp_path / "bundle", root=root, solutions=FIXTURE, quiet=True)


def test_release_tarball(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tarfile

    assert grading.main(["release", str(tmp_path / "course.tar.gz"), "--solutions", str(FIXTURE)]) == 0
    assert "no solutions" in capsys.readouterr().out
    with tarfile.open(tmp_path / "course.tar.gz") as tar:
        names = tar.getnames()
    assert f"course/exercises/{FIXTURE_NB}.ipynb" in names and "course/hpcnb/course/grading.py" in names
    assert not [n for n in names if "/solutions" in n or "/tests" in n]


def test_autograde_without_a_sandbox_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "subs").mkdir()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(grading.GradingError, match="cannot grade: bubblewrap is not installed"):
        autograde(tmp_path / "subs", tmp_path / "out", solutions=SOLUTIONS_DIR)


def test_limit_option() -> None:
    assert grading._limit("memory_bytes=4G") == ("memory_bytes", 4 << 30)
    assert grading._limit("processes=256") == ("processes", 256)
    for bad in ("procs=3", "memory_bytes=lots", "processes="):
        with pytest.raises(Exception, match="NAME=VALUE|whole number"):
            grading._limit(bad)


def test_autograde_refuses_a_course_the_sandbox_would_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "subs").mkdir()
    monkeypatch.setattr(sandbox, "bind_sources", lambda: [Path("/usr"), tmp_path])
    with pytest.raises(grading.GradingError, match=f"the sandbox shows {tmp_path} .* holds {tmp_path / 'subs'}"):
        autograde(tmp_path / "subs", tmp_path / "out", solutions=FIXTURE)
