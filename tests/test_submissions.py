"""Submissions are read as a careful root would: regular files only, never followed, bounded."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpcnb.course.submissions import SubmissionError, read_submission

NB = "00-x.ipynb"


def _student(tmp_path: Path) -> Path:
    folder = tmp_path / "subs" / "eve"
    folder.mkdir(parents=True)
    return folder


def test_a_regular_file_is_read_and_a_missing_one_is_none(tmp_path: Path) -> None:
    folder = _student(tmp_path)
    assert read_submission(folder, NB) is None
    (folder / NB).write_bytes(b"{}")
    assert read_submission(folder, NB) == b"{}"


@pytest.mark.parametrize("make, said", [
    (lambda f, s: (f / NB).symlink_to(s), "is a symbolic link"),
    (lambda f, s: (f / NB).symlink_to("/dev/zero"), "is a symbolic link"),
    (lambda f, s: (f / NB).mkdir(), "is a directory"),
    (lambda f, s: os.mkfifo(f / NB), "is a FIFO"),
    (lambda f, s: os.link(s, f / NB), "is a hard link"),
])
def test_anything_but_a_plain_file_is_refused_unread(tmp_path: Path, make, said: str) -> None:
    secret = tmp_path / "secret.ipynb"
    secret.write_text("SECRET-SOLUTION")
    folder = _student(tmp_path)
    make(folder, secret)
    with pytest.raises(SubmissionError, match=said) as refused:
        read_submission(folder, NB)
    assert "SECRET" not in str(refused.value)


def test_a_large_or_sparse_file_is_refused(tmp_path: Path) -> None:
    folder = _student(tmp_path)
    with open(folder / NB, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: 1 GiB, no disk
    with pytest.raises(SubmissionError, match="larger than 1 MiB"):
        read_submission(folder, NB, max_bytes=1 << 20)


def test_a_linked_student_folder_is_not_followed(tmp_path: Path) -> None:
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    (solutions / NB).write_text("SECRET-SOLUTION")
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "eve").symlink_to(solutions)
    with pytest.raises(SubmissionError, match="eve/ is a symbolic link"):
        read_submission(tmp_path / "subs" / "eve", NB)
