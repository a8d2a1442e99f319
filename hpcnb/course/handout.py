"""Submissions in, feedback out: the instructor's side of a class held on one machine (a portal).

    hpcnb grading collect SUBMISSIONS --users "ana bo"   # ~ana/hpcnb-course/exercises/*.ipynb -> SUBMISSIONS/ana/
    hpcnb grading collect SUBMISSIONS --from DIR         # DIR/<student>/*.ipynb, or DIR/*.ipynb (yours): a dry run
    hpcnb grading return grades/feedback --users "ana bo" # grades/feedback/ana/*.html -> ~ana/hpcnb-course/feedback/

Users are named as ``PORTAL_USERS`` names them (ci/portal.sh): a count N for student1 .. studentN,
or names. Run as root. A home belongs to its student, so nothing in it is trusted: every folder is
opened without following symbolic links, only regular files of at most :data:`MAX_BYTES` are
taken (a link, a directory or a FIFO is skipped with a line), and every file is written under a
fresh temporary name (``O_EXCL | O_NOFOLLOW``), then renamed. What is written goes only into a
folder no one else could have prepared: SUBMISSIONS/ and FEEDBACK/ must be the caller's and not
writable by others, a home's feedback/ its student's (files 0600, the folder 0700).
"""
from __future__ import annotations

import errno
import grp
import os
import pwd
import secrets
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hpcnb.course.submissions import file_kind, shown_name as shown

COURSE_DIR = "hpcnb-course"  # each portal user's copy of the course (ci/portal.sh)
MAX_BYTES = 20 << 20  # a notebook larger than this is left where it is
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # O_NONBLOCK: a FIFO cannot stop the run
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW

__all__ = ["COURSE_DIR", "MAX_BYTES", "HandoutError", "Outcome", "collect", "collect_from", "own_folder",
           "portal_users", "return_feedback"]


class HandoutError(RuntimeError):
    """A user, a folder or a file is not as expected."""


class _Skipped(Exception):
    """A file left where it is: the reason is said, the run goes on."""


def portal_users(spec: str) -> list[str]:
    """``PORTAL_USERS``'s users: ``"3"`` -> student1, student2, student3; ``"ana bo"`` -> ana, bo."""
    spec = spec.strip()
    if not spec:
        raise HandoutError("no users given (--users: a count N or names; an unset variable, $USER?)")
    if spec.isdigit():
        return [f"student{n}" for n in range(1, int(spec) + 1)]
    return spec.split()


def _user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise HandoutError(f"no such user: {name!r}") from None


def _folder_error(path: str, err: OSError) -> HandoutError:
    """Why a folder could not be opened, in one line."""
    why = " (a link or a file: a folder expected)" if err.errno in (errno.ELOOP, errno.ENOTDIR) else ""
    return HandoutError(f"{path}: {err.strerror or err}{why}")


def _open_dirs(top: str, parts: Iterable[str], *, create_as: pwd.struct_passwd | None = None) -> int:
    """A descriptor of ``top/parts...``, each part opened without following a link (made, owned by
    ``create_as`` with mode 0700, when missing and ``create_as`` is given); the caller closes it."""
    parts = list(parts)
    try:
        fd = os.open(top, _DIR_FLAGS)
    except OSError as err:
        raise _folder_error(top, err) from None
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
        raise _folder_error(os.path.join(top, *parts), err) from None
    return fd


def _others_can_write(info: os.stat_result) -> bool:
    """Someone other than the folder's owner may create or replace names in it (group: unless it is
    the owner's own private group, as Debian gives each user)."""
    if info.st_mode & stat.S_IWOTH:
        return True
    if not info.st_mode & stat.S_IWGRP:
        return False
    try:
        group, owner = grp.getgrgid(info.st_gid), pwd.getpwuid(info.st_uid)
    except KeyError:
        return True
    private = group.gr_name == owner.pw_name and owner.pw_gid == info.st_gid and group.gr_mem in ([], [owner.pw_name])
    return not private


def _check_owned(fd: int, path: str, owner: pwd.struct_passwd) -> None:
    """HandoutError unless the open folder is ``owner``'s (or root's) and no one else can write in it."""
    info = os.fstat(fd)
    if info.st_uid not in (owner.pw_uid, 0):
        try:
            holder = pwd.getpwuid(info.st_uid).pw_name
        except KeyError:
            holder = f"uid {info.st_uid}"
        raise HandoutError(f"{path}: belongs to {holder}, not {owner.pw_name}: nothing is written into a folder "
                           "someone else could have prepared (remove it, or choose another)")
    if _others_can_write(info):
        raise HandoutError(f"{path}: others can write in it (mode {stat.S_IMODE(info.st_mode):o}): "
                           f"chmod go-w {path}, or choose another folder")


def own_folder(path: Path) -> int:
    """A descriptor of ``path``, made (0700) when missing, which must be the caller's and not writable
    by others (never a link); the caller closes it."""
    path = Path(os.path.abspath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    parent = _open_dirs(str(path.parent), [])
    try:
        return _subfolder(parent, path.name, str(path), pwd.getpwuid(os.geteuid()))
    finally:
        os.close(parent)


def _subfolder(parent: int, name: str, shown_path: str, owner: pwd.struct_passwd) -> int:
    """A descriptor of ``name`` in the open ``parent`` (made 0700, ``owner``'s, when missing), checked
    as :func:`_check_owned` does; the caller closes it."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
        if os.geteuid() == 0:
            os.chown(name, owner.pw_uid, owner.pw_gid, dir_fd=parent, follow_symlinks=False)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as err:
        raise _folder_error(shown_path, err) from None
    try:
        _check_owned(fd, shown_path, owner)
    except HandoutError:
        os.close(fd)
        raise
    return fd


def _read_plain(folder: int, name: str) -> bytes:
    """The bytes of ``name`` in the open ``folder``: a regular file of at most MAX_BYTES, never followed;
    _Skipped (with why) otherwise."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    except OSError as err:
        raise _Skipped("a symbolic link, not followed" if err.errno == errno.ELOOP else err.strerror) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _Skipped(f"{file_kind(mode)}, not a regular file")
        with os.fdopen(os.dup(fd), "rb") as src:
            data = src.read(MAX_BYTES + 1)  # no more, even from a file that grows meanwhile
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise _Skipped(f"over {MAX_BYTES} bytes")
    return data


def _take(folder: int, suffix: str) -> tuple[dict[str, bytes], list[str]]:
    """``{name: bytes}`` of the open folder's ``*suffix`` files (hidden ones aside), and the skipped
    ones with why."""
    taken, skipped = {}, []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(suffix) or name.startswith("."):
            continue
        try:
            taken[name] = _read_plain(folder, name)
        except _Skipped as why:
            skipped.append(f"{shown(name)}: {why}")
    return taken, skipped


def _write_new(folder: int, name: str, data: bytes, owner: pwd.struct_passwd | None = None) -> None:
    """``name`` in the open ``folder`` holds ``data``, mode 0600 (``owner``'s when given, as root):
    written under a fresh name that nothing can be waiting at (O_EXCL, O_NOFOLLOW), then renamed."""
    temporary = f".{name[:64]}.{secrets.token_hex(6)}.hpcnb-tmp"
    fd = os.open(temporary, _WRITE_FLAGS, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            if owner is not None and os.geteuid() == 0:
                os.fchown(out.fileno(), owner.pw_uid, owner.pw_gid)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=folder)
        except FileNotFoundError:
            pass
        raise


@dataclass
class Outcome:
    """What ``collect`` or ``return`` did: ``done`` {student: file names}, ``failed`` {student: why}."""

    done: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def _each(names: Iterable[str], work: Callable[[str], list[str]], failure: str,
          say: Callable[[str], None]) -> Outcome:
    """``work(name)`` for every student: one whose folder is not as expected is reported and the
    others go on."""
    outcome = Outcome()
    for name in names:
        try:
            outcome.done[name] = work(name)
        except (HandoutError, OSError) as err:
            outcome.failed[name] = str(err)
            say(f"{shown(name)}: {failure}: {err}")
    return outcome


def _deposit(submissions_fd: int, submissions: Path, student: str, source: int,
             say: Callable[[str], None]) -> list[str]:
    """The open ``source`` folder's notebooks into ``submissions/<student>/`` (the caller's folder)."""
    taken, skipped = _take(source, ".ipynb")
    for why in skipped:
        say(f"{shown(student)}: skipped {why}")
    me = pwd.getpwuid(os.geteuid())
    into = _subfolder(submissions_fd, student, str(submissions / student), me)
    try:
        for name, data in taken.items():
            _write_new(into, name, data)
    finally:
        os.close(into)
    say(f"{shown(student)}: {len(taken)} notebook(s) -> {submissions / student}")
    return list(taken)


def collect(users: Iterable[str], submissions: Path, *, course_dir: str = COURSE_DIR,
            say: Callable[[str], None] = print) -> Outcome:
    """Copy each user's ``~/<course_dir>/exercises/*.ipynb`` (regular files only) into
    ``submissions/<user>/`` (all users looked up first: a wrong name changes nothing)."""
    accounts = {name: _user(name) for name in users}
    submissions = Path(submissions)
    submissions_fd = own_folder(submissions)

    def take(name: str) -> list[str]:
        folder = _open_dirs(accounts[name].pw_dir, [course_dir, "exercises"])
        try:
            return _deposit(submissions_fd, submissions, name, folder, say)
        finally:
            os.close(folder)

    try:
        return _each(accounts, take, "nothing collected", say)
    finally:
        os.close(submissions_fd)


def _is_folder_or_link(mode: int) -> bool:
    """A student's folder in ``--from DIR``, or a link where one would be (refused, with why, when opened)."""
    return stat.S_ISDIR(mode) or stat.S_ISLNK(mode)


def _students_in(folder: int, source: Path) -> dict[str, str | None]:
    """``--from DIR``'s students: {name: their folder in DIR}, or {your name: None} where DIR holds
    notebooks itself."""
    names = sorted(os.listdir(folder))
    if any(name.endswith(".ipynb") and not name.startswith(".") for name in names):
        return {pwd.getpwuid(os.geteuid()).pw_name: None}
    students: dict[str, str | None] = {name: name for name in names if not name.startswith(".")
                                       and _is_folder_or_link(os.lstat(name, dir_fd=folder).st_mode)}
    if not students:
        raise HandoutError(f"{source}: no notebooks and no student folders in it "
                           "(expected DIR/<student>/<notebook>.ipynb or DIR/<notebook>.ipynb)")
    return students


def collect_from(source: Path, submissions: Path, *, say: Callable[[str], None] = print) -> Outcome:
    """A dry run without portal users: ``source/<student>/*.ipynb`` into ``submissions/<student>/``;
    a ``source`` that holds notebooks itself is one student, the caller (``submissions/<your name>/``)."""
    source, submissions = Path(source), Path(submissions)
    folder = _open_dirs(str(source), [])
    try:
        students = _students_in(folder, source)
        submissions_fd = own_folder(submissions)

        def take(student: str) -> list[str]:
            inside = students[student]
            inner = os.dup(folder) if inside is None else _open_dirs(str(source), [inside])
            try:
                return _deposit(submissions_fd, submissions, student, inner, say)
            finally:
                os.close(inner)

        try:
            return _each(students, take, "nothing collected", say)
        finally:
            os.close(submissions_fd)
    finally:
        os.close(folder)


def return_feedback(feedback: Path, users: Iterable[str] | None = None, *, course_dir: str = COURSE_DIR,
                    say: Callable[[str], None] = print) -> Outcome:
    """Copy ``feedback/<user>/*.html`` (autograde's; the caller's folder, never a link) into each user's
    ``~/<course_dir>/feedback/``, owned by the user (files 0600, the folder 0700). ``users``: all of
    ``feedback/``'s folders named after a user when None (the others are said and left)."""
    feedback = Path(feedback)
    if not feedback.is_dir():
        raise HandoutError(f"{feedback}: no such folder (expected FEEDBACK/<user>/<notebook>.html)")
    top = _open_dirs(str(feedback), [])
    try:
        _check_owned(top, str(feedback), pwd.getpwuid(os.geteuid()))
        if users is None:
            users = [name for name in sorted(os.listdir(top)) if stat.S_ISDIR(os.lstat(name, dir_fd=top).st_mode)]
            for name in users:
                if not _is_user(name):
                    say(f"{shown(name)}: feedback not returned: no such user")
            users = [name for name in users if _is_user(name)]
        accounts = {name: _user(name) for name in users}
        return _each(accounts, lambda name: _give(top, feedback, accounts[name], course_dir, say),
                     "feedback not returned", say)
    finally:
        os.close(top)


def _is_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _give(top: int, feedback: Path, user: pwd.struct_passwd, course_dir: str, say: Callable[[str], None]) -> list[str]:
    """One user's pages from the open ``feedback`` folder into their ``~/<course_dir>/feedback/``."""
    try:
        source = os.open(user.pw_name, _DIR_FLAGS, dir_fd=top)
    except FileNotFoundError:
        say(f"{user.pw_name}: no feedback in {feedback / user.pw_name}")
        return []
    except OSError as err:
        raise _folder_error(str(feedback / user.pw_name), err) from None
    try:
        _check_owned(source, str(feedback / user.pw_name), pwd.getpwuid(os.geteuid()))
        pages, skipped = _take(source, ".html")
    finally:
        os.close(source)
    for why in skipped:
        say(f"{user.pw_name}: skipped {why}")
    if not pages:
        say(f"{user.pw_name}: no feedback in {feedback / user.pw_name}")
        return []
    home = _open_dirs(user.pw_dir, [course_dir], create_as=user)
    try:
        folder = _subfolder(home, "feedback", os.path.join(user.pw_dir, course_dir, "feedback"), user)
    finally:
        os.close(home)
    try:
        for name, data in pages.items():
            _write_new(folder, name, data, user)
    finally:
        os.close(folder)
    say(f"{user.pw_name}: {len(pages)} feedback page(s) -> {os.path.join(user.pw_dir, course_dir, 'feedback')}")
    return list(pages)
