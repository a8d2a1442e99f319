"""The local Slurm's state: one SQLite database (WAL), safe under many concurrent commands.

Every change is one ``BEGIN IMMEDIATE`` transaction, so job ids are unique and increasing and
no state is ever half-written. A damaged file raises :class:`StateError` naming the recovery command.
"""
from __future__ import annotations

import json
import sqlite3
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
    control TEXT, max_rss INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS steps (
    job_id INTEGER NOT NULL, step TEXT NOT NULL, name TEXT NOT NULL,
    state TEXT NOT NULL, start_time REAL NOT NULL, end_time REAL,
    exit_code INTEGER NOT NULL DEFAULT 0, exit_signal INTEGER NOT NULL DEFAULT 0,
    ntasks INTEGER NOT NULL, ncpus INTEGER NOT NULL, nodelist TEXT NOT NULL,
    max_rss INTEGER, pid INTEGER,
    PRIMARY KEY (job_id, step)
);
"""

PENDING_STATES = ("PENDING",)
ACTIVE_STATES = ("RUNNING", "COMPLETING", "SUSPENDED")
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")


class StateError(RuntimeError):
    """The state file is unreadable; the message says how to recover."""


def _damaged(path: Path, err: Exception) -> StateError:
    return StateError(
        f"the local Slurm's state file {path} is damaged ({err}). "
        "Run `hpcnb slurm recover` to keep a copy of it and salvage what can be read."
    )


def connect(path: Path | None = None) -> sqlite3.Connection:
    path = path or paths.db_path()
    try:
        conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout=60000")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(SCHEMA)
        path.chmod(0o600)
    except sqlite3.DatabaseError as err:
        if isinstance(err, sqlite3.OperationalError) and "locked" in str(err):
            raise
        raise _damaged(path, err) from err
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """An exclusive-write transaction: all of it lands, or none of it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def next_job_ids(conn: sqlite3.Connection, count: int = 1) -> int:
    """Reserve ``count`` consecutive ids (call inside a transaction); returns the first."""
    row = conn.execute("SELECT value FROM meta WHERE key='next_job_id'").fetchone()
    first = int(row[0]) if row else 1
    conn.execute(
        "INSERT INTO meta(key, value) VALUES('next_job_id', ?) "
        "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        (str(first + count),),
    )
    return first


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
    job["req"] = json.loads(job["req"])
    job["alloc"] = json.loads(job["alloc"]) if job["alloc"] else None
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
