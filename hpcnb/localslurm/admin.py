"""``hpcnb slurm ...``: status, stop, reset, recover, preempt and slow-node for the local Slurm."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import psutil

from . import db, network, paths, procs, transitions, wake


def stop(wait_s: float = 3.0) -> None:
    """Stop the controller (SIGTERM, then SIGKILL if it does not go), then the nodes' own network."""
    try:
        _stop_controller(wait_s)
    finally:
        network.stop()


def _stop_controller(wait_s: float) -> None:
    pid = wake.running_pid()
    if not pid:
        return
    for sig, patience in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        end = time.time() + patience
        while time.time() < end:
            if not procs.alive(pid, None):
                return
            time.sleep(0.02)


def _state_files() -> list[Path]:
    base = paths.db_path()
    return [base, Path(f"{base}-wal"), Path(f"{base}-shm")]


def _holders() -> list[psutil.Process]:
    """Other processes of this user that have the state file open (controller, supervisors, commands)."""
    wanted = {str(p) for p in _state_files()}
    found = []
    spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}  # never the caller's own chain
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.pid in spared or proc.info["uids"].real != os.getuid():
                continue
            if any(f.path in wanted for f in proc.open_files()):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _kill(procs_: list[psutil.Process]) -> None:
    procs.send(procs_, signal.SIGKILL)
    psutil.wait_procs(procs_, timeout=3)


def reset(profile: str | None, slurm_version: str | None = None) -> None:
    """Cancel every job, stop the controller and forget all state (works on a damaged state file too);
    then emulate ``profile`` and ``slurm_version`` where given."""
    active: list[int] = []
    try:
        conn = db.connect()
        active = [r[0] for r in conn.execute("SELECT id FROM jobs WHERE state IN ('RUNNING','PENDING')")]
        conn.close()
    except (db.StateError, sqlite3.Error):
        pass  # damaged: forget it anyway
    stop()
    _kill(_holders())  # supervisors and interactive owners: their jobs are being forgotten
    for job_id in active:
        procs.send(procs.job_processes(job_id, str(paths.state_dir())), signal.SIGKILL)
    state = paths.state_dir()
    for path in _state_files():
        path.unlink(missing_ok=True)
    db.marker_path(paths.db_path()).unlink(missing_ok=True)
    db.issued_path(paths.db_path()).unlink(missing_ok=True)
    shutil.rmtree(state / "jobs", ignore_errors=True)
    shutil.rmtree(paths.node_tmp_root(), ignore_errors=True)
    if profile:
        from .cluster import load_cluster

        load_cluster(profile)  # fails now, with the profile's own error, if it is invalid
    if profile or slurm_version:
        conn = db.connect()
        with db.transaction(conn):
            if profile:
                db.set_meta(conn, "profile", profile)
            if slurm_version:
                db.set_meta(conn, "slurm_version", slurm_version)


# --------------------------------------------------------------------------------- recover

def health() -> str | None:
    """None if the state file reads back completely; else what is wrong with it."""
    try:
        conn = db.connect()
        try:
            problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                lines = [p for text in problems for p in text.splitlines() if not p.startswith("***")]
                more = f" (and {len(lines) - 2} more problems)" if len(lines) > 2 else ""
                return "; ".join(lines[:2]) + more
            for row in conn.execute("SELECT * FROM jobs"):
                db.load_job(row)
            conn.execute("SELECT * FROM steps").fetchall()
            conn.execute("SELECT * FROM meta").fetchall()
        finally:
            conn.close()
    except db.StateError as err:
        return str(err)
    except sqlite3.Error as err:
        return str(db.state_error(err))
    return None


def _script_ids() -> set[int]:
    """Ids of every job whose script is stored: jobs that existed, whatever the state file says."""
    folder = paths.state_dir() / "jobs"
    try:
        return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}
    except OSError:
        return set()


def _salvage_table(conn: sqlite3.Connection, table: str, key: str, top: int) -> tuple[list[str], list[tuple]]:
    """Every row of ``table`` that can still be read: a whole scan where it works, then each id the scan
    missed looked up on its own (a damaged page can end a scan early without an error)."""
    try:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    except sqlite3.Error:
        return [], []
    if not cols:
        return [], []
    try:
        rows = conn.execute(f"SELECT * FROM {table}").fetchall()
    except sqlite3.Error:
        rows = []
    at = cols.index(key)
    seen = {row[at] for row in rows}
    for ident in range(0, top + 1):
        if ident in seen:
            continue
        try:
            rows += conn.execute(f"SELECT * FROM {table} WHERE {key}=?", (ident,)).fetchall()
        except sqlite3.Error:
            pass
    return cols, rows


def _mend_header(copy: Path, scratch: Path) -> None:
    """Make a damaged copy openable: a garbled 100-byte header is rebuilt from a fresh state file's,
    and a truncated file is padded to the size its header records (lost pages read as empty)."""
    data = bytearray(copy.read_bytes()[:100])
    size = copy.stat().st_size
    wal = Path(f"{copy}-wal")
    if size == 0 and not (wal.exists() and wal.stat().st_size > 32):
        return
    if len(data) < 100 or not data.startswith(b"SQLite format 3\0"):
        template = scratch / "template.db"
        conn = sqlite3.connect(template)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(db.SCHEMA)
        conn.close()
        if size == 0:  # emptied, but its journal (WAL) may hold everything: give it a WAL-mode page 1
            page_one = template.read_bytes()[:int.from_bytes(template.read_bytes()[16:18], "big")]
            copy.write_bytes(page_one[:28] + (1).to_bytes(4, "big") + page_one[32:])
            return
        header = bytearray(template.read_bytes()[:100])
        page = int.from_bytes(header[16:18], "big") or 65536
        header[28:32] = (max(size // page, 1)).to_bytes(4, "big")  # database size in pages
        header[32:40] = bytes(8)  # no freelist
        header[92:96] = header[24:28]  # "version-valid-for" = change counter: trust the size above
        with open(copy, "r+b") as fh:
            fh.write(bytes(header))
        data = header
    page = int.from_bytes(data[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(data[28:32], "big")
    if page and pages and pages * page > size:
        with open(copy, "r+b") as fh:
            fh.truncate(pages * page)


def _salvage(kept: Path, script_ids: set[int]) -> dict:
    """Read what can be read from a scratch copy of the damaged file (the kept file is never opened)."""
    found: dict = {"meta": {}, "job_cols": [], "jobs": [], "step_cols": [], "steps": []}
    with tempfile.TemporaryDirectory(prefix="hpcnb-recover-") as scratch:
        copy = Path(scratch) / "copy.db"
        shutil.copyfile(kept, copy)
        if Path(f"{kept}-wal").exists():
            shutil.copyfile(f"{kept}-wal", f"{copy}-wal")
        _mend_header(copy, Path(scratch))
        try:
            old = sqlite3.connect(copy)
            old.execute("PRAGMA writable_schema=ON")  # read past a page count that no longer fits the file
        except sqlite3.Error:
            return found
        try:
            try:
                found["meta"] = dict(old.execute("SELECT key, value FROM meta").fetchall())
            except sqlite3.Error:
                for key in ("profile", "next_job_id"):
                    try:
                        row = old.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
                        if row:
                            found["meta"][key] = row[0]
                    except sqlite3.Error:
                        pass
            try:
                top = int(found["meta"].get("next_job_id", 0))
            except ValueError:
                top = 0
            top = max([top, 1000, *script_ids])
            found["job_cols"], found["jobs"] = _salvage_table(old, "jobs", "id", top)
            found["step_cols"], found["steps"] = _salvage_table(old, "steps", "job_id", top)
        finally:
            old.close()
    return found


def _ranges(ids: list[int]) -> str:
    from .commands.common import int_ranges

    return int_ranges(ids) if ids else "none"


def recover() -> str:
    """Keep a damaged state file aside, untouched, and rebuild a fresh one from everything readable.

    Never silent: the report says what was kept, salvaged and lost. Jobs that were running are
    stopped (their processes cannot report to a damaged file) and end NODE_FAIL; pending jobs whose
    script is stored stay pending and run; ids are never reused.
    """
    problem = health()
    if problem is None:
        return "the local Slurm's state file is healthy: nothing to recover"
    stop()
    stopped = _holders()
    _kill(stopped)  # nothing may keep the damaged file open while it is moved aside
    state = paths.state_dir()
    base = paths.db_path()
    kept = state / f"slurm.db.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
    while kept.exists():
        kept = kept.with_name(kept.name + "+")
    lines = [f"the state file was damaged: {problem.split(' Run `hpcnb slurm recover`')[0]}"]
    readable = base.is_file()
    if base.exists() and not readable:  # a directory (or a FIFO...) where the file belongs: not read, kept
        os.replace(base, kept)
        lines.append(f"{base.name} was {'a directory' if kept.is_dir() else 'not a regular file'}: "
                     f"moved aside, unchanged and unread, as {kept}")
    elif base.exists():
        os.replace(base, kept)
        if Path(f"{base}-wal").exists():
            os.replace(f"{base}-wal", f"{kept}-wal")
        lines.append(f"kept the damaged file, unchanged, as {kept}"
                     + (f" (with its journal {kept}-wal)" if Path(f"{kept}-wal").exists() else ""))
    else:
        lines.append("the state file itself was missing")
    Path(f"{base}-shm").unlink(missing_ok=True)
    db.marker_path(base).unlink(missing_ok=True)
    try:
        issued = db.read_issued(base)
    except db.StateError:
        issued = 0  # unreadable: the stored scripts and salvaged records still bound the ids
    db.issued_path(base).unlink(missing_ok=True)  # until the fresh file holds ids past it

    scripts = _script_ids()
    found = _salvage(kept, scripts | {issued}) if readable else {"meta": {}, "job_cols": [], "jobs": [], "step_cols": [], "steps": []}
    fresh = db.connect(check_ids=False)  # its next id is set below, past every id known
    new_cols = {r[1] for r in fresh.execute("PRAGMA table_info(jobs)")}
    new_step_cols = {r[1] for r in fresh.execute("PRAGMA table_info(steps)")}
    saved: dict[int, dict] = {}
    for row in found["jobs"]:
        record = dict(zip(found["job_cols"], row))
        try:
            json.loads(record["req"])
            json.loads(record["alloc"]) if record.get("alloc") else None
            int(record["id"])
        except (TypeError, ValueError, KeyError):
            continue  # an unreadable record is a lost one
        saved[int(record["id"])] = {k: v for k, v in record.items() if k in new_cols}
    steps = [dict(zip(found["step_cols"], row)) for row in found["steps"]]
    steps = [{k: v for k, v in s.items() if k in new_step_cols} for s in steps if s.get("job_id") in saved]

    now = time.time()
    ended, failed_pending = [], []
    for job in saved.values():
        if job["state"] in ("RUNNING", "COMPLETING", "SUSPENDED"):
            procs.send(procs.job_processes(job["id"], str(state)), signal.SIGKILL)
        # a pending salloc/srun's own process was stopped above
        got = transitions.recover_job(job, now, script_kept=job["id"] in scripts)
        if got is not None:
            (failed_pending if got == "FAILED" else ended).append(job["id"])
    for step in steps:
        transitions.recover_step(step, now)

    meta = {k: v for k, v in found["meta"].items() if k not in ("state_id",)}
    try:
        old_next = int(meta.get("next_job_id", 1))
    except ValueError:
        old_next = 1
    next_id = max([old_next, issued + 1, *(i + 1 for i in saved), *(i + 1 for i in scripts), 1])
    meta["next_job_id"] = str(next_id)
    with db.transaction(fresh):
        for key, value in meta.items():
            if isinstance(value, str):
                db.set_meta(fresh, key, value)
        for job in saved.values():
            transitions.restore(fresh, "jobs", job)
        for step in steps:
            transitions.restore(fresh, "steps", step)
    fresh.close()
    db.record_issued(base, next_id - 1)

    unstored = range(max(set(saved) | scripts, default=0) + 1, issued + 1)  # issued past every trace: interactive
    known = set(saved) | scripts | set(unstored)
    lost = sorted((scripts | set(unstored)) - set(saved))
    lines.append(f"salvaged {len(saved)} job record(s) and {len(steps)} step record(s)"
                 + (f" of the {len(known)} job(s) known" if known else ""))
    if lost:
        lines.append(f"LOST the records of job(s) {_ranges(lost)}: their scripts (batch jobs') are still in "
                     f"{state / 'jobs'}")
    if ended:
        lines.append(f"job(s) {_ranges(sorted(ended))} were running and could not report to the damaged file: "
                     "stopped, now NODE_FAIL (batch) or CANCELLED (interactive)")
    if failed_pending:
        lines.append(f"pending job(s) {_ranges(failed_pending)} have no stored script: marked FAILED")
    if stopped:
        lines.append(f"stopped {len(stopped)} process(es) that had the damaged file open")
    lines.append(f"the next job id is {next_id}; pending jobs will run as before")
    message = "\n".join(lines)
    wake.log("recover: " + message.replace("\n", "; "))
    if any(j["state"] == "PENDING" for j in saved.values()):
        wake.ensure_running()
    return message


def preempt(job_id: int) -> int:
    conn = db.connect()
    with db.transaction(conn):
        job = db.get_job(conn, job_id)
        if job is None or job["state"] != "RUNNING":
            print(f"hpcnb: job {job_id} is not running", file=sys.stderr)
            return 1
        conn.execute("UPDATE jobs SET control='preempt' WHERE id=?", (job_id,))
    if procs.alive(job["supervisor_pid"], job["supervisor_ctime"]):
        os.kill(job["supervisor_pid"], signal.SIGUSR2)
    return 0


def slow_node(node: str, factor: float) -> int:
    """Make srun tasks on one virtual node run ``factor`` (1-20, checked by the parser) times slower
    (1 = normal), for straggler lessons; 1 if there is no such node."""
    from .commands.common import open_cluster

    conn, cluster = open_cluster()
    if node not in cluster.nodes:
        print(f"hpcnb slurm slow-node: error: no node {node!r}: the nodes are {', '.join(cluster.nodes)}",
              file=sys.stderr)
        return 1
    with db.transaction(conn):
        db.set_meta(conn, f"slow:{node}", str(factor))
    print(f"srun tasks on {node} now run {factor:g}x slower" if factor > 1 else f"{node} runs at full speed")
    return 0


def _version_line(conn) -> str:
    """The Slurm version the state behaves as, or the one it will take at first use."""
    from .cluster import wanted_version

    version = db.get_meta(conn, "slurm_version")
    if version:
        return f"slurm version: {version}"
    profile = db.get_meta(conn, "profile") or os.environ.get("HPCNB_PROFILE") or "local"
    try:
        return f"slurm version: {wanted_version(profile)} (not started yet)"
    except ValueError as err:  # hpcnb.sites.ProfileError
        return f"slurm version: unusable: {err}"


def _nodes_line() -> str:
    from .apart import in_use as apart_in_use, mode

    found = mode()
    if found != "apart":
        return f"{found}; every node shares this machine's hostname, /tmp, /dev/shm and network"
    if apart_in_use():
        problem = network.login_problem()
        login = (f"the login node does not reach servers on the nodes by their names: {problem}" if problem
                 else "the login node reaches servers on the nodes by their names")
        return (f"apart (each node its own hostname, /tmp, /dev/shm and network; no ssh between nodes; "
                f"{login}, the nodes do not reach the login node)")
    why = f"{network.SETTING}=shared" if not network.wanted() else f"its own did not start: {network.failure()}"
    return f"apart (each node its own hostname, /tmp and /dev/shm; the network is shared: {why})"


def show_status() -> int:
    """``hpcnb slurm status``: the state folder, profile, Slurm version, controller and job counts."""
    pid = wake.running_pid()
    conn = db.connect()
    counts = dict(conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
    print(f"state: {paths.state_dir()}")
    print(f"profile: {db.get_meta(conn, 'profile', 'local (not started yet)')}")
    print(_version_line(conn))
    print(f"controller: {'running, pid ' + str(pid) if pid else 'stopped (starts on first use)'}")
    print(f"nodes: {_nodes_line()}")
    print("jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"))
    return 0


def reset_command(profile: str | None, slurm_version: str | None) -> int:
    """``hpcnb slurm reset``: :func:`reset`, after checking both choices (a refused one changes nothing);
    0 done, 2 an unknown profile or Slurm version."""
    from hpcnb.sites import SLURM_VERSIONS, emulated_version

    try:
        emulated = slurm_version and emulated_version(slurm_version)
    except ValueError as err:
        print(f"hpcnb slurm reset: error: --slurm-version {slurm_version}: {err} (the local Slurm emulates "
              f"Slurm {', '.join(SLURM_VERSIONS)})", file=sys.stderr)
        return 2
    if profile:
        from .cluster import load_cluster

        try:
            load_cluster(profile)  # before forgetting anything: an unknown profile changes nothing
        except ValueError as err:  # hpcnb.sites.ProfileError
            print(f"hpcnb slurm reset: error: {err}", file=sys.stderr)
            return 2
    reset(profile, emulated)
    as_emulated = f", emulated as {emulated}" if emulated != slurm_version else ""
    chosen = ", ".join(x for x in (profile and f"profile {profile}",
                                    slurm_version and f"Slurm {slurm_version}{as_emulated}") if x)
    print("local Slurm reset" + (f" ({chosen})" if chosen else ""))
    return 0
