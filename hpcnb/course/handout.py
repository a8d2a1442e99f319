"""Submissions in, feedback out: the instructor's side of a class held on one machine (a portal).

    hpcnb grading collect SUBMISSIONS --users "ana bo"   # ~ana/hpcnb-course/exercises/*.ipynb -> SUBMISSIONS/ana/
    hpcnb grading return grades/feedback --users "ana bo" # grades/feedback/ana/*.html -> ~ana/hpcnb-course/feedback/

Users are named as ``PORTAL_USERS`` names them (ci/portal.sh): a count N for student1 .. studentN,
or names. Run as root. A home belongs to its student, so nothing in it is trusted: every folder is
opened without following symbolic links, only regular files of at most :data:`MAX_BYTES` are
collected, and feedback is written under a temporary name, then renamed, owned by the student
(files 0600, the folder 0700).
"""
from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

COURSE_DIR = "hpcnb-course"  # each portal user's copy of the course (ci/portal.sh)
MAX_BYTES = 20 << 20  # a notebook larger than this is left where it is
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW

__all__ = ["COURSE_DIR", "MAX_BYTES", "HandoutError", "Outcome", "collect", "portal_users", "return_feedback"]


class HandoutError(RuntimeError):
    """A user, a folder or a file is not as expected."""


def portal_users(spec: str) -> list[str]:
    """``PORTAL_USERS``'s users: ``"3"`` -> student1, student2, student3; ``"ana bo"`` -> ana, bo."""
    spec = spec.strip()
    if spec.isdigit():
        return [f"student{n}" for n in range(1, int(spec) + 1)]
    return spec.split()


def _user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise HandoutError(f"no such user: {name!r}") from None


def _open_dirs(top: str, parts: Iterable[str], *, create_as: pwd.struct_passwd | None = None) -> int:
    """A descriptor of ``top/parts...``, each part opened without following a link (made, owned by
    ``create_as`` with mode 0700, when missing and ``create_as`` is given); the caller closes it."""
    fd = os.open(top, _DIR_FLAGS)
    try:
        for part in parts:
            if create_as is not None:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    if os.geteuid() == 0:
                        os.chown(part, create_as.pw_uid, create_as.pw_gid, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError as err:
        os.close(fd)
        why = " (a link or a file: a folder expected)" if err.errno in (errno.ELOOP, errno.ENOTDIR) else ""
        raise HandoutError(f"{os.path.join(top, *parts)}: {err.strerror or err}{why}") from None
    return fd


def _collect_one(user: pwd.struct_passwd, course_dir: str, into: Path) -> tuple[list[str], list[str]]:
    """Copy the user's ``exercises/*.ipynb`` into ``into``; (copied names, skipped with why)."""
    copied, skipped = [], []
    folder = _open_dirs(user.pw_dir, [course_dir, "exercises"])
    try:
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".ipynb") or name.startswith("."):
                continue
            try:  # O_NONBLOCK: a FIFO named *.ipynb must not stop the run
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
            except OSError as err:
                skipped.append(f"{name}: {err.strerror} (a link?)")
                continue
            with os.fdopen(fd, "rb") as src:
                if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                    skipped.append(f"{name}: not a regular file")
                    continue
                data = src.read(MAX_BYTES + 1)  # no more, even from a file that grows meanwhile
            if len(data) > MAX_BYTES:
                skipped.append(f"{name}: over {MAX_BYTES} bytes")
                continue
            into.mkdir(parents=True, exist_ok=True)
            (into / name).write_bytes(data)
            copied.append(name)
    finally:
        os.close(folder)
    return copied, skipped


@dataclass
class Outcome:
    """What ``collect`` or ``return`` did: ``done`` {user: file names}, ``failed`` {user: why}."""

    done: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def _each_user(names: Iterable[str], work: Callable[[pwd.struct_passwd], list[str]],
               failure: str, say: Callable[[str], None]) -> Outcome:
    """``work(user)`` for every user (all looked up first: a wrong name changes nothing); one
    user's home that is not as expected is reported and the others go on."""
    users = [_user(name) for name in names]
    outcome = Outcome()
    for user in users:
        try:
            outcome.done[user.pw_name] = work(user)
        except (HandoutError, OSError) as err:
            outcome.failed[user.pw_name] = str(err)
            say(f"{user.pw_name}: {failure}: {err}")
    return outcome


def collect(users: Iterable[str], submissions: Path, *, course_dir: str = COURSE_DIR,
            say: Callable[[str], None] = print) -> Outcome:
    """Copy each user's ``~/<course_dir>/exercises/*.ipynb`` (regular files only) into
    ``submissions/<user>/``."""
    submissions = Path(submissions)

    def take(user: pwd.struct_passwd) -> list[str]:
        copied, skipped = _collect_one(user, course_dir, submissions / user.pw_name)
        for why in skipped:
            say(f"{user.pw_name}: skipped {why}")
        say(f"{user.pw_name}: {len(copied)} notebook(s) -> {submissions / user.pw_name}")
        return copied

    return _each_user(users, take, "nothing collected", say)


def _write_owned(folder: int, name: str, data: bytes, owner: pwd.struct_passwd) -> None:
    """``name`` in the open ``folder`` holds ``data``, mode 0600, owned by ``owner`` (written aside, renamed)."""
    temporary = f".{name}.hpcnb-tmp"
    try:
        os.unlink(temporary, dir_fd=folder)
    except FileNotFoundError:
        pass
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        if os.geteuid() == 0:
            os.fchown(out.fileno(), owner.pw_uid, owner.pw_gid)
    os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)


def return_feedback(feedback: Path, users: Iterable[str] | None = None, *, course_dir: str = COURSE_DIR,
                    say: Callable[[str], None] = print) -> Outcome:
    """Copy ``feedback/<user>/*.html`` (autograde's) into each user's ``~/<course_dir>/feedback/``,
    owned by the user (files 0600, the folder 0700). ``users``: all of ``feedback/``'s folders when None."""
    feedback = Path(feedback)
    if not feedback.is_dir():
        raise HandoutError(f"{feedback}: no such folder (expected FEEDBACK/<user>/<notebook>.html)")
    names = sorted(p.name for p in feedback.iterdir() if p.is_dir()) if users is None else list(users)

    def give(user: pwd.struct_passwd) -> list[str]:
        pages = sorted((feedback / user.pw_name).glob("*.html"))
        if not pages:
            say(f"{user.pw_name}: no feedback in {feedback / user.pw_name}")
            return []
        folder = _open_dirs(user.pw_dir, [course_dir, "feedback"], create_as=user)
        try:
            for page in pages:
                _write_owned(folder, page.name, page.read_bytes(), user)
        finally:
            os.close(folder)
        say(f"{user.pw_name}: {len(pages)} feedback page(s) -> {os.path.join(user.pw_dir, course_dir, 'feedback')}")
        return [page.name for page in pages]

    return _each_user(names, give, "feedback not returned", say)
