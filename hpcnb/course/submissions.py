"""Reading a student's submitted notebook safely: the grader runs as root, the submission is not trusted.

Only a regular file, not a link, at most MAX_SUBMISSION_BYTES, is read: the student's folder and the
notebook are opened with ``O_NOFOLLOW`` (a symlink to ``/etc/shadow``, to ``solutions/`` or to a
classmate's notebook is refused, not followed), a hard link is refused too, and a directory, FIFO or
device is refused without being opened for reading (``O_NONBLOCK``: a FIFO cannot hang the grader).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_SUBMISSION_BYTES = 32 << 20

__all__ = ["MAX_SUBMISSION_BYTES", "SubmissionError", "file_kind", "read_submission", "shown_name"]


class SubmissionError(ValueError):
    """This submission cannot be graded: the reason is for the grades and the student."""


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words: "a symbolic link", "a directory", "a FIFO" ..."""
    kinds = {stat.S_ISLNK: "a symbolic link", stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO",
             stat.S_ISCHR: "a device", stat.S_ISBLK: "a device", stat.S_ISSOCK: "a socket"}
    return next((name for test, name in kinds.items() if test(mode)), "not a regular file")


def shown_name(name: str) -> str:
    """A file or student name as a message shows it: quoted (``'a\\nb'``) where it holds a newline,
    another unprintable character or surrounding blanks, or is empty."""
    return name if name and name.isprintable() and name.strip() == name else repr(name)


def _open_folder(folder: Path) -> int:
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:
        raise SubmissionError(f"the folder {folder.name}/ is {file_kind(os.lstat(folder).st_mode)}, not a folder"
                              if os.path.lexists(folder) else f"{folder.name}/: {err.strerror}") from None


def read_submission(folder: Path, name: str, max_bytes: int = MAX_SUBMISSION_BYTES) -> bytes | None:
    """The bytes of ``folder/name``, or None when it does not exist; SubmissionError when it is
    not a plain regular file of at most ``max_bytes`` in a real folder (never followed)."""
    dir_fd = _open_folder(folder)
    try:
        try:
            info = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError(f"{name} is {file_kind(info.st_mode)}, not a regular file")
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)  # what was opened, should the name have changed since the lstat
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError(f"{name} is {file_kind(info.st_mode)}, not a regular file")
        if info.st_nlink != 1:
            raise SubmissionError(f"{name} is a hard link to another file ({info.st_nlink} names)")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes or info.st_size > max_bytes:
        raise SubmissionError(f"{name} is larger than {max_bytes >> 20} MiB")
    return data
