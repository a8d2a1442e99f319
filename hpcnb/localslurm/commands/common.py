"""Pieces the commands share: the state and its cluster, getopt for the query commands, job selection.
(Option parsing for sbatch, srun and salloc is in :mod:`.options`: the query commands never load it.)"""
from __future__ import annotations

import re
import sys

from hpcnb.slurm.bounds import NO_VAL, job_id_fits

from .. import db
from ..cluster import Cluster, state_cluster


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


def job_ref(token: str) -> tuple[int, int | None] | None:
    """``7`` -> (7, None), ``7_3`` -> (7, 3); None for what no job can be (not a number, past uint32)."""
    match = re.fullmatch(r"([0-9]{1,20})(?:_([0-9]{1,20}))?", token)
    if not match or not job_id_fits(int(match[1])) or (match[2] and int(match[2]) >= NO_VAL):
        return None
    return int(match[1]), int(match[2]) if match[2] else None


def select_jobs(conn, ids_text: str | None, where: str = "1", params: tuple = ()) -> list[dict]:
    """Jobs named by ``-j`` (ids, ``A_B`` array tasks, ``A`` whole arrays), or those matching
    ``where`` (SQL on indexed columns: nothing a command does reads every job ever run)."""
    if not ids_text:  # "+id": sort afterwards, so SQLite searches the indexes instead of scanning by id
        return db.jobs_where(conn, where, params, order="+id")
    wanted: list[dict] = []
    for token in ids_text.replace(" ", ",").split(","):
        if not token:
            continue
        ids = job_ref(token)
        if ids is None:
            continue
        base, task = ids
        if task is not None:
            rows = db.jobs_where(conn, "array_job_id=? AND array_task_id=?", (base, task))
        else:
            rows = db.jobs_where(conn, "id=? OR array_job_id=?", (base, base))
        wanted.extend(r for r in rows if r["id"] not in {w["id"] for w in wanted})
    return wanted
