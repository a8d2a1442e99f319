"""sbatch: submit a batch script (or --wrap) to the local Slurm."""
from __future__ import annotations

import os
import sys
import time

from hpcnb.slurm.options import OptionError
from hpcnb.slurm.states import FINAL

from .. import db, submit, wake
from ..request import SubmitError, UsageError, default_name
from .common import open_cluster
from .options import build_request, report

def read_script(rest: list[str], wrap: str | None) -> tuple[bytes, str | None]:
    """The script's bytes and path (None for --wrap or standard input)."""
    if wrap is not None:
        if rest:
            raise UsageError("Script arguments not permitted with --wrap option")
        return f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{wrap}\n".encode(), None
    path = rest[0] if rest else None
    try:
        data = sys.stdin.buffer.read() if path is None else _read_file(path)
    except OSError:
        raise UsageError(f"Unable to open file {path}") from None
    # Slurm 22.05's checks, in its order: the first that fails is the only one reported
    if not data:
        raise UsageError("Batch script is empty!")
    if not data.split(b"\0", 1)[0].strip(b" \t\n\v\f\r"):
        raise UsageError("Batch script contains only whitespace!")
    if not data.startswith(b"#!"):
        raise UsageError(*SHEBANG_HELP)
    if b"\0" in data:
        raise UsageError("The Slurm controller does not allow scripts that", "contain a NULL character '\\0'.")
    if b"\r\n" in data:
        raise UsageError("Batch script contains DOS line breaks (\\r\\n)", "instead of expected UNIX line breaks (\\n).")
    if len(data) > MAX_SCRIPT_SIZE:
        raise SubmitError("Pathname of a file, directory or other parameter too long")
    return data, path


SHEBANG_HELP = (
    "This does not look like a batch script.  The first",
    "line must start with #! followed by the path to an interpreter.",
    "For instance: #!/bin/sh",
)
MAX_SCRIPT_SIZE = 4 * 1024 * 1024  # slurmctld's default max_script_size: a byte more is refused


def _read_file(path: str) -> bytes:
    """The script's bytes; a directory reads as empty, as read(2) fails on it for sbatch too."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except IsADirectoryError:
                return b""
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def script_directives(script: bytes, path: str | None) -> list[str]:
    """The script's #SBATCH words; sbatch's own complaints about the script stop the submission."""
    from hpcnb.jobscript import directive_args, parse_script

    parsed = parse_script(script.decode("utf-8", errors="surrogateescape"), filename=path)
    for _, message in parsed.errors:
        print(f"sbatch: {message}", file=sys.stderr)
    if any(not m.startswith("error: Change from #SLURM") for _, m in parsed.errors):
        raise SystemExit(1)
    return directive_args(parsed)


def main(argv: list[str]) -> int:
    try:
        req, rest = build_request("sbatch", argv)
        script, path = read_script(rest, req.wrap)
        if req.wrap is None:  # --wrap scripts carry no directives
            req, rest = build_request("sbatch", argv, script_directives(script, path))
        req.script_args = rest[1:]
        req.script_path = os.path.abspath(path) if path else None
        conn, cluster = open_cluster()
        submit.base_request_fields(req, dict(os.environ), cluster)
        name = default_name(req, path)
        if req.test_only:
            return _test_only(req, cluster, conn)
        ids = submit.queue_jobs(conn, req, cluster, "batch", script, name)
    except (OptionError, UsageError, SubmitError) as err:
        return report("sbatch", err)
    wake.poke()
    first = ids[0] if not req.array else min(ids)
    print(first if req.parsable else f"Submitted batch job {first}", flush=True)
    if req.wait:
        return wait_for(conn, ids)
    return 0


def _test_only(req, cluster, conn) -> int:
    with db.transaction(conn):
        partition = submit.finalize(req, cluster, conn)
        job_id = db.next_job_id(conn)
    from ..alloc import task_count

    cpus = task_count(req) * (req.cpus_per_task or 1)
    node = cluster.partitions[partition].nodes[0]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(
        f"sbatch: Job {job_id} to start at {stamp} using {cpus} processors on nodes {node} in partition {partition}",
        file=sys.stderr,
    )
    return 0


def wait_for(conn, ids: list[int]) -> int:
    """``--wait``: block until every job ends; exit with the highest exit code."""
    marks = ",".join("?" * len(ids))
    final = ",".join(f"'{state}'" for state in FINAL)
    started = time.monotonic()
    while True:
        if conn.execute(f"SELECT 1 FROM jobs WHERE id IN ({marks}) AND state NOT IN ({final}) LIMIT 1", ids).fetchone():
            time.sleep(poll_interval(time.monotonic() - started))
            continue
        rows = conn.execute(f"SELECT state, exit_code, exit_signal FROM jobs WHERE id IN ({marks})", ids).fetchall()
        codes = [r["exit_code"] or (r["exit_signal"] and 1) or (0 if r["state"] == "COMPLETED" else 1) for r in rows]
        return max(codes, default=0)


def poll_interval(waited: float) -> float:
    """How long ``--wait`` sleeps between readings (each a fraction of a millisecond): a short job is
    seen ending within 5 ms, a long one costs next to nothing."""
    return 0.005 if waited < 2 else 0.02 if waited < 60 else 0.2
