"""The local Slurm's state: one SQLite database (WAL), safe under many concurrent commands.

Every change is one ``BEGIN IMMEDIATE`` transaction, so job ids are unique and increasing and
no state is ever half-written. A damaged file raises :class:`StateError` naming the recovery command.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import paths

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    array_job_id INTEGER, array_task_id INTEGER, array_throttle INTEGER,
    name TEXT NOT NULL, user TEXT NOT NULL, uid INTEGER NOT NULL,
    account TEXT, partition TEXT NOT NULL, kind TEXT NOT NULL,
    state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT 'None',
    submit_time REAL NOT NULL, eligible_time REAL, start_time REAL, end_time REAL,
    time_limit INTEGER, held INTEGER NOT NULL DEFAULT 0,
    req TEXT NOT NULL, alloc TEXT, nodelist TEXT,
    exit_code INTEGER NOT NULL DEFAULT 0, exit_signal INTEGER NOT NULL DEFAULT 0,
    restart_count INTEGER NOT NULL DEFAULT 0,
    supervisor_pid INTEGER, supervisor_ctime REAL, batch_pid INTEGER,
    control TEXT, max_rss INTEGER, total_cpu REAL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_end ON jobs(end_time);
CREATE INDEX IF NOT EXISTS jobs_submit ON jobs(submit_time);
CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_job_id, array_task_id);
CREATE TABLE IF NOT EXISTS steps (
    job_id INTEGER NOT NULL, step TEXT NOT NULL, name TEXT NOT NULL,
    state TEXT NOT NULL, start_time REAL NOT NULL, end_time REAL,
    exit_code INTEGER NOT NULL DEFAULT 0, exit_signal INTEGER NOT NULL DEFAULT 0,
    ntasks INTEGER NOT NULL, ncpus INTEGER NOT NULL, nodelist TEXT NOT NULL,
    max_rss INTEGER, pid INTEGER,
    gpu_util_ave REAL, gpu_util_max REAL, gpu_mem_ave INTEGER, gpu_mem_max INTEGER,
    PRIMARY KEY (job_id, step)
);
"""

_SCHEMA_NAMES = re.findall(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)", SCHEMA)
#: columns added since a table was first made: a state file from an older version gets them on opening
_ADDED_COLUMNS = {"jobs": {"total_cpu": "REAL"},
                  "steps": {"gpu_util_ave": "REAL", "gpu_util_max": "REAL", "gpu_mem_ave": "INTEGER",
                            "gpu_mem_max": "INTEGER"}}

PENDING_STATES = ("PENDING",)
ACTIVE_STATES = ("RUNNING", "COMPLETING", "SUSPENDED")


class StateError(RuntimeError):
    """The state file is unreadable; the message says how to recover."""


#: SQLite result codes that mean the file itself is damaged (not merely busy).
_DAMAGE_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB


def _damaged(path: Path, err: object) -> StateError:
    return StateError(
        f"the local Slurm's state file {path} is damaged ({err}). "
        "Run `hpcnb slurm recover` to keep a copy of it and salvage what can be read."
    )


def marker_path(path: Path) -> Path:
    """A small file beside the database holding its identity: proof that state existed."""
    return path.with_name(path.name + ".id")


def issued_path(path: Path) -> Path:
    """A small file beside the database holding the highest job id ever issued: kept outside it, so
    that a database that lost its last transactions (a damaged journal) is caught, and no id reused."""
    return path.with_name(path.name + ".last-job-id")


def read_issued(path: Path) -> int:
    """The highest job id issued with the database at ``path`` (0: none recorded)."""
    file = issued_path(path)
    try:
        text = file.read_text().strip()
    except FileNotFoundError:
        return 0
    except OSError as err:
        raise StateError(f"cannot read {file} ({err})") from err
    if not text.isdigit():
        raise _damaged(path, f"{file.name} holds {text[:40]!r}, not a job id")
    return int(text)


def record_issued(path: Path, last: int) -> None:
    """Keep ``last`` as the highest issued job id (atomically; never lowered)."""
    if last > read_issued(path):
        _write_small(issued_path(path), str(last))


#: per connection (by id): its database and the highest job id it reserved, recorded once committed
_reserved: dict[int, tuple[Path, int]] = {}


def is_damage(err: BaseException) -> bool:
    """Does this SQLite error mean a damaged file (rather than a busy or full disk)?"""
    if not isinstance(err, sqlite3.DatabaseError):
        return False
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _DAMAGE_CODES
    return type(err) is sqlite3.DatabaseError


def state_error(err: BaseException, path: Path | None = None) -> StateError:
    """A clear StateError for any SQLite failure (damage, full disk, a lock held too long)."""
    path = path or paths.db_path()
    if is_damage(err) or isinstance(err, (ValueError, KeyError)):
        return _damaged(path, err)
    text = str(err)
    if "locked" in text or "busy" in text:
        return StateError(
            f"the local Slurm's state file {path} stayed locked for over a minute ({text}); "
            "another command may be stuck. If it persists, `hpcnb slurm stop` and try again."
        )
    if "full" in text or "disk I/O" in text or "readonly" in text or "unable to open" in text:
        return StateError(f"the local Slurm cannot write its state file {path} ({text}); check the disk holding it.")
    return _damaged(path, err)


def _add_columns(conn: sqlite3.Connection) -> None:
    """Give a state file from an older version the columns added since (:data:`_ADDED_COLUMNS`)."""
    for table, columns in _ADDED_COLUMNS.items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        for name, kind in columns.items():
            if name not in have:
                try:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
                except sqlite3.OperationalError as err:
                    if "duplicate column" not in str(err):  # another command added it just now
                        raise


def connect(path: Path | None = None, check_ids: bool = True) -> sqlite3.Connection:
    """Open the state database, creating it (private, 0600) on first use (``check_ids=False``: for
    ``recover``, which rebuilds it, without the check that it issues no id issued before).

    Raises :class:`StateError` when the file is damaged: unreadable, not a database, missing its
    tables, or empty/missing although state was recorded before (its marker file exists).
    """
    path = path or paths.db_path()
    marker = marker_path(path)
    recorded = _read_marker(marker)  # before looking at the file: the marker is written after it
    issued = read_issued(path)  # also written after the database (after each commit)
    try:
        info = path.stat()
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):  # SQLite would say "unable to open" (a FIFO: hang)
        raise _damaged(path, f"it is {'a directory' if stat.S_ISDIR(info.st_mode) else 'not a regular file'}, "
                             "not a database file")
    size = info.st_size if info is not None else -1
    if size <= 0 and recorded:
        what = "is missing" if size < 0 else "is empty (truncated)"
        raise _damaged(path, f"the file {what} although it held the state {recorded}")
    if size < 0:
        _create(path)
    try:
        conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout=60000")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        if not {"meta", "jobs", "steps"} <= names:
            raise _damaged(path, f"its tables are missing (found: {', '.join(sorted(names)) or 'none'})")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        if not set(_SCHEMA_NAMES) <= names:
            conn.executescript(SCHEMA)  # a state file from an older version: add what is new
        _add_columns(conn)
        row = conn.execute("SELECT value FROM meta WHERE key='state_id'").fetchone()
        if row is None and recorded:
            raise _damaged(path, f"its identity is missing (expected {recorded})")
        if row is None:  # a state file from before state ids (and markers)
            with transaction(conn):
                if get_meta(conn, "state_id") is None:
                    set_meta(conn, "state_id", os.urandom(16).hex())
            row = conn.execute("SELECT value FROM meta WHERE key='state_id'").fetchone()
        ident = row[0]
        if recorded and recorded != ident:
            raise _damaged(path, f"it is not the state file recorded in {marker.name} ({ident} != {recorded})")
        if not recorded:
            _write_small(marker, ident)
        if check_ids:
            _check_issued(conn, path, issued)
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
    except sqlite3.DatabaseError as err:
        raise state_error(err, path) from err
    return conn


def _create(path: Path) -> None:
    """Build a complete, empty state file aside and link it into place (atomic; the first one wins)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        leftover.unlink(missing_ok=True)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(SCHEMA)
        conn.execute("INSERT INTO meta(key, value) VALUES('state_id', ?)", (os.urandom(16).hex(),))
        conn.close()  # checkpoints: everything is in the main file now
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another command created it first; use theirs
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)


def _read_marker(marker: Path) -> str | None:
    try:
        return marker.read_text().strip() or None
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StateError(f"cannot read {marker} ({err})") from err


def _write_small(file: Path, text: str) -> None:
    """Write a one-line file beside the database atomically (private, 0600)."""
    tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
    os.replace(tmp, file)


def _check_issued(conn: sqlite3.Connection, path: Path, issued: int) -> None:
    """A database that would issue an id already issued has lost committed transactions: SQLite drops
    a journal's frames from the first damaged one on, silently. Refuse it, naming the journal. Without
    the record of the last id issued (lost with the journal, say), the jobs' folders bound the ids."""
    upcoming = next_job_id(conn)
    folder = 0 if issued else highest_job_folder(path.parent)
    if folder >= upcoming:  # a submission's folder, not committed yet? Look again once no one writes
        with transaction(conn):
            upcoming, folder = next_job_id(conn), highest_job_folder(path.parent)
    if max(issued, folder) >= upcoming:
        trace = f" (its folder jobs/{folder} remains)" if folder > issued else ""
        raise _damaged(path, f"job id {max(issued, folder)} was issued{trace}, yet it would issue {upcoming} next: "
                             f"it lost its last transactions; its journal {path.name}-wal is damaged or was "
                             "removed")


def highest_job_folder(state: Path) -> int:
    """The highest job id with a folder (``jobs/<id>``: its script) in the state dir; 0 if none."""
    try:
        with os.scandir(state / "jobs") as entries:
            return max((int(e.name) for e in entries if e.name.isdigit() and len(e.name) < 11), default=0)
    except OSError:
        return 0


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """An exclusive-write transaction: all of it lands, or none of it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        _reserved.pop(id(conn), None)
        conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")
        reserved = _reserved.pop(id(conn), None)
        if reserved:
            try:
                record_issued(*reserved)
            except (OSError, StateError):
                pass  # committed all the same (a full disk, say); the next submission records it


def next_job_ids(conn: sqlite3.Connection, count: int = 1) -> int:
    """Reserve ``count`` consecutive ids (call inside a transaction); returns the first. The highest
    is recorded outside the database (:func:`issued_path`) once the transaction commits."""
    first = next_job_id(conn)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES('next_job_id', ?) "
        "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        (str(first + count),),
    )
    main = conn.execute("PRAGMA database_list").fetchone()[2]
    _reserved[id(conn)] = (Path(main), first + count - 1)
    return first


def next_job_id(conn: sqlite3.Connection) -> int:
    """The id the next submission will get (nothing reserved)."""
    row = conn.execute("SELECT value FROM meta WHERE key='next_job_id'").fetchone()
    return int(row[0]) if row else first_job_id()


def first_job_id() -> int:
    """The first job id of a new state: 1, like Slurm's FirstJobId (override: ``HPCNB_FIRST_JOB_ID``).

    Test sessions that run side by side start far apart, so ports derived from job ids differ.
    """
    from .settings import first_job_id as setting

    return setting()


def get_meta(conn: sqlite3.Connection, key: str, default: str | None = None) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else default


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        (key, value),
    )


def load_job(row: sqlite3.Row) -> dict[str, Any]:
    job = dict(row)
    try:
        job["req"] = json.loads(job["req"])
        job["alloc"] = json.loads(job["alloc"]) if job["alloc"] else None
    except (TypeError, ValueError) as err:
        raise _damaged(paths.db_path(), f"job {job.get('id')} has an unreadable record: {err}") from err
    return job


def get_job(conn: sqlite3.Connection, job_id: int) -> dict[str, Any] | None:
    row = conn.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
    return load_job(row) if row else None


def jobs_where(
    conn: sqlite3.Connection, where: str = "1", params: tuple = (), order: str = "id"
) -> list[dict[str, Any]]:
    rows = conn.execute(f"SELECT * FROM jobs WHERE {where} ORDER BY {order}", params).fetchall()
    return [load_job(r) for r in rows]


def steps_of(conn: sqlite3.Connection, job_id: int) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM steps WHERE job_id=? ORDER BY rowid", (job_id,)).fetchall()
    return [dict(r) for r in rows]


def now() -> float:
    return time.time()
