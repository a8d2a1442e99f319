"""``hpcnb slurm ...``: status, stop, reset, recover and preempt for the local Slurm."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import sys
import time

from . import controller, db, paths, procs


def stop() -> None:
    pid = controller.running_pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not procs.alive(pid, None):
                break
            time.sleep(0.02)


def reset(profile: str | None) -> None:
    """Cancel every job, stop the controller and forget all state."""
    conn = db.connect()
    for job in db.jobs_where(conn, "state IN ('RUNNING','PENDING')"):
        procs.send(procs.job_processes(job["id"], str(paths.state_dir())), signal.SIGKILL)
        if job["supervisor_pid"] and procs.alive(job["supervisor_pid"], job["supervisor_ctime"]):
            procs.send(procs.descendants(job["supervisor_pid"]), signal.SIGKILL)
            os.kill(job["supervisor_pid"], signal.SIGKILL)
    conn.close()
    stop()
    state = paths.state_dir()
    for name in ("slurm.db", "slurm.db-wal", "slurm.db-shm"):
        (state / name).unlink(missing_ok=True)
    shutil.rmtree(state / "jobs", ignore_errors=True)
    shutil.rmtree(paths.node_tmp_root(), ignore_errors=True)
    if profile:
        from .cluster import load_cluster

        load_cluster(profile)  # fails now, with the profile's own error, if it is invalid
        conn = db.connect()
        with db.transaction(conn):
            db.set_meta(conn, "profile", profile)


def recover() -> str:
    """Move a damaged state file aside and salvage every readable job into a fresh one."""
    stop()
    state = paths.state_dir()
    broken = state / f"slurm.db.damaged-{int(time.time())}"
    shutil.move(str(state / "slurm.db"), broken)
    for name in ("slurm.db-wal", "slurm.db-shm"):
        (state / name).unlink(missing_ok=True)
    fresh = db.connect()
    saved = 0
    try:
        old = sqlite3.connect(broken)
        rows = old.execute("SELECT * FROM jobs").fetchall()
        cols = [d[0] for d in old.execute("SELECT * FROM jobs LIMIT 0").description]
        with db.transaction(fresh):
            for row in rows:
                fresh.execute(f"INSERT OR IGNORE INTO jobs({','.join(cols)}) VALUES({','.join('?' * len(cols))})", row)
                saved += 1
            for key, value in old.execute("SELECT key, value FROM meta"):
                db.set_meta(fresh, key, value)
    except sqlite3.DatabaseError:
        pass
    with db.transaction(fresh):
        top = fresh.execute("SELECT MAX(id) FROM jobs").fetchone()[0] or 0
        current = int(db.get_meta(fresh, "next_job_id", "1") or 1)
        db.set_meta(fresh, "next_job_id", str(max(current, top + 1, int(time.time()) % 100000 + 1 if not saved else 0)))
        fresh.execute("UPDATE jobs SET state='NODE_FAIL', end_time=? WHERE state IN ('RUNNING','PENDING')", (time.time(),))
    return f"kept the damaged file as {broken}; salvaged {saved} job records"


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


def main(argv: list[str]) -> int:
    verb = argv[0] if argv else "status"
    if verb == "status":
        pid = controller.running_pid()
        conn = db.connect()
        counts = dict(conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
        print(f"state: {paths.state_dir()}")
        print(f"profile: {db.get_meta(conn, 'profile', 'local (not started yet)')}")
        print(f"controller: {'running, pid ' + str(pid) if pid else 'stopped (starts on first use)'}")
        print("jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"))
        return 0
    if verb == "stop":
        stop()
        return 0
    if verb == "reset":
        profile = argv[argv.index("--profile") + 1] if "--profile" in argv else None
        reset(profile)
        print("local Slurm reset" + (f" (profile {profile})" if profile else ""))
        return 0
    if verb == "recover":
        print(recover())
        return 0
    if verb == "preempt" and len(argv) == 2 and argv[1].isdigit():
        return preempt(int(argv[1]))
    print(f"hpcnb slurm: unknown command {' '.join(argv)!r}", file=sys.stderr)
    return 2
