"""Pieces shared by sbatch, srun and salloc: option parsing into a JobRequest, and submission."""
from __future__ import annotations

import sys

from hpcnb.slurm.options import OptionError, parse_args

from .. import db
from ..cluster import Cluster, state_cluster
from ..request import JobRequest, SubmitError, UsageError, apply_option
from . import error

SUBMIT_FAILED = {
    "sbatch": "Batch job submission failed: {}",
    "salloc": "Job submit/allocate failed: {}",
    "srun": "Unable to allocate resources: {}",
}


def build_request(command: str, argv: list[str], directives: list[str] | None = None) -> tuple[JobRequest, list[str]]:
    """Options from ``#SBATCH`` lines first, then the command line (which wins). Raises UsageError/OptionError."""
    req = JobRequest(command=command)
    opts, rest = parse_args(argv, command)
    if directives:
        script_opts, leftover = parse_args(directives, command)
        if leftover:
            raise UsageError(f"Invalid directive found in batch script: {leftover[0]}", exit_code=255)
        for spec, value in script_opts:
            apply_option(req, spec, value)
    for spec, value in opts:
        apply_option(req, spec, value)
    return req, rest


def report(command: str, err: Exception) -> int:
    """Print a usage/submit error the way the real command does; return its exit code."""
    if isinstance(err, OptionError):
        sys.stderr.write(err.stderr_text())
        return err.exit_code
    if isinstance(err, UsageError):
        for line in getattr(err, "raw", ()):
            print(line, file=sys.stderr)
        error(command, *err.lines)
        return err.exit_code
    if isinstance(err, SubmitError):
        error(command, *err.before, SUBMIT_FAILED[command].format(err.reason))
        return 1
    raise err


def open_cluster() -> tuple:
    conn = db.connect()
    cluster: Cluster = state_cluster(conn)
    return conn, cluster


def getopt_parse(command: str, argv: list[str], shorts: str, longs: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """GNU getopt for the query commands; bad options print Slurm's two lines and exit 1."""
    import getopt

    try:
        return getopt.gnu_getopt(argv, shorts, longs)
    except getopt.GetoptError as err:
        shown = f"'--{err.opt}'" if len(err.opt) > 1 else f"-- '{err.opt}'"
        kind = "unrecognized option" if "not recognized" in err.msg else "option requires an argument"
        if len(err.opt) == 1 and "not recognized" in err.msg:
            kind = "invalid option"
        print(f"{command}: {kind} {shown}", file=sys.stderr)
        print(f'Try "{command} --help" for more information', file=sys.stderr)
        raise SystemExit(1) from None


def int_ranges(values: list[int]) -> str:
    """[2, 3, 4, 7] -> ``2-4,7``."""
    out, values = [], sorted(values)
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


def select_jobs(conn, ids_text: str | None, where: str = "1", params: tuple = ()) -> list[dict]:
    """Jobs named by ``-j`` (ids, ``A_B`` array tasks, ``A`` whole arrays), or those matching
    ``where`` (SQL on indexed columns: nothing a command does reads every job ever run)."""
    if not ids_text:  # "+id": sort afterwards, so SQLite searches the indexes instead of scanning by id
        return db.jobs_where(conn, where, params, order="+id")
    wanted: list[dict] = []
    for token in ids_text.replace(" ", ",").split(","):
        if not token:
            continue
        base, _, task = token.partition("_")
        if not base.isdigit() or (task and not task.isdigit()):
            continue
        if task:
            rows = db.jobs_where(conn, "array_job_id=? AND array_task_id=?", (int(base), int(task)))
        else:
            rows = db.jobs_where(conn, "id=? OR array_job_id=?", (int(base), int(base)))
        wanted.extend(r for r in rows if r["id"] not in {w["id"] for w in wanted})
    return wanted
