"""sacct: accounting records of jobs and their steps (``.batch``, ``.0`` ...)."""
from __future__ import annotations

import getpass
import sys
import time

from .. import db, formats
from .common import getopt_parse, open_cluster, select_jobs

DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
WIDTHS = {
    "jobid": 12, "jobidraw": 12, "jobname": 10, "partition": 10, "account": 10, "alloccpus": 10, "state": 10,
    "exitcode": 8, "elapsed": 10, "elapsedraw": 10, "start": 19, "end": 19, "submit": 19, "nnodes": 8,
    "ncpus": 10, "alloctres": 10, "reqtres": 10, "maxrss": 10, "reqmem": 10, "nodelist": 15, "user": 9,
    "timelimit": 10, "reqcpus": 8, "reqnodes": 8, "derivedexitcode": 15, "workdir": 20, "restarts": 8,
    "priority": 10, "reason": 20, "cputime": 10, "uid": 6, "cluster": 10, "qos": 10, "comment": 15,
}
NAMES = {k: k for k in WIDTHS}


def _tres(cpus: int, mem: int, nodes: int, gpus: int, job_row: bool) -> str:
    parts = [f"billing={cpus}"] if job_row else []
    parts.append(f"cpu={cpus}")
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    parts.append(f"mem={mem}M")
    parts.append(f"node={nodes}")
    return ",".join(parts)


def job_row(job: dict, cluster, now: float) -> dict[str, str]:
    req = job["req"]
    alloc = job["alloc"] or []
    cpus = sum(p["cpus"] for p in alloc)
    mem = sum(p["mem"] for p in alloc)
    gpus = sum(len(p["gpus"]) for p in alloc)
    state = job["state"]
    if state == "CANCELLED":
        state = f"CANCELLED by {job['uid']}"
    req_cpus = (req["ntasks"] or 1) * (req["cpus_per_task"] or 1)
    req_mem = req["mem_mb"] if req["mem_mb"] is not None else (req["mem_per_cpu_mb"] or cluster.def_mem_per_cpu_mb) * req_cpus
    started = job["start_time"] is not None
    return {
        "jobid": formats.job_id_text(job), "jobidraw": str(job["id"]), "jobname": job["name"],
        "partition": job["partition"], "account": job["account"] or job["user"], "alloccpus": str(cpus),
        "state": state, "exitcode": f"{job['exit_code']}:{job['exit_signal']}",
        "elapsed": formats.elapsed(formats.run_time(job, now)),
        "elapsedraw": str(int(formats.run_time(job, now))),
        "start": formats.stamp(job["start_time"]) if started else "Unknown",
        "end": formats.stamp(job["end_time"]) if job["end_time"] else "Unknown",
        "submit": formats.stamp(job["submit_time"]),
        "nnodes": str(len(alloc) or req["nodes_min"] or 1), "ncpus": str(cpus or req_cpus),
        "alloctres": _tres(cpus, mem, len(alloc), gpus, True) if alloc else "",
        "reqtres": _tres(req_cpus, req_mem, req["nodes_min"] or 1, req["gpus_per_node"], True),
        "maxrss": "", "reqmem": f"{req_mem}M", "nodelist": job["nodelist"] or "None assigned",
        "user": job["user"], "uid": str(job["uid"]), "timelimit": formats.limit(job["time_limit"]),
        "reqcpus": str(req_cpus), "reqnodes": str(req["nodes_min"] or 1), "derivedexitcode": "0:0",
        "workdir": req["workdir"], "restarts": str(job["restart_count"]), "priority": str(4294901760 - job["id"]),
        "reason": job["reason"], "cputime": formats.elapsed(formats.run_time(job, now) * cpus),
        "cluster": cluster.name, "qos": "normal", "comment": req["comment"] or "",
    }


def step_row(job: dict, step: dict, base: dict[str, str], now: float) -> dict[str, str]:
    run = (step["end_time"] or now) - step["start_time"]
    row = {key: "" for key in base}
    gpus = sum(len(p["gpus"]) for p in job["alloc"] or [])
    row.update(
        jobid=f"{base['jobid']}.{step['step']}", jobidraw=f"{job['id']}.{step['step']}", jobname=step["name"],
        account=base["account"], alloccpus=str(step["ncpus"]), state=step["state"],
        exitcode=f"{step['exit_code']}:{step['exit_signal']}", elapsed=formats.elapsed(run),
        elapsedraw=str(int(run)), start=formats.stamp(step["start_time"]),
        end=formats.stamp(step["end_time"]) if step["end_time"] else "Unknown", submit=formats.stamp(step["start_time"]),
        nnodes=str(len(step["nodelist"].split(",")) if "[" not in step["nodelist"] else base["nnodes"]),
        ncpus=str(step["ncpus"]), nodelist=step["nodelist"], user="", uid="",
        alloctres=_tres(step["ncpus"], 0, 1, gpus, False).replace(",mem=0M", ""),
        maxrss=f"{step['max_rss'] // 1024}K" if step["max_rss"] else "", cluster=base["cluster"],
        cputime=formats.elapsed(run * step["ncpus"]),
    )
    return row


def main(argv: list[str]) -> int:
    opts, _ = getopt_parse(
        "sacct", argv, "j:XPpno:as:S:E:u:lb",
        ["jobs=", "allocations", "parsable2", "parsable", "noheader", "format=", "allusers", "state=",
         "starttime=", "endtime=", "user=", "long", "brief", "units=", "duplicates", "noconvert"],
    )
    conn, cluster = open_cluster()
    fields, ids, steps, sep, trail, show_header = DEFAULT_FIELDS, None, True, None, False, True
    states = None
    for opt, val in opts:
        if opt in ("-j", "--jobs"):
            ids = val
        elif opt in ("-X", "--allocations"):
            steps = False
        elif opt in ("-P", "--parsable2"):
            sep = "|"
        elif opt in ("-p", "--parsable"):
            sep, trail = "|", True
        elif opt in ("-n", "--noheader"):
            show_header = False
        elif opt in ("-o", "--format"):
            fields = val
        elif opt in ("-s", "--state"):
            states = {s.upper() for s in val.split(",")}
        elif opt in ("-b", "--brief"):
            fields = "JobID,State,ExitCode"
    columns = []
    for item in fields.split(","):
        name, _, width = item.partition("%")
        key = name.strip().lower()
        if key not in WIDTHS:
            print(f'sacct: error: Invalid field requested: "{name}"', file=sys.stderr)
            return 1
        columns.append((name.strip(), key, int(width) if width else WIDTHS[key]))
    now = time.time()
    jobs = select_jobs(conn, ids)
    if ids is None:
        midnight = time.mktime(time.localtime(now)[:3] + (0, 0, 0, 0, 0, -1))
        me = getpass.getuser()
        jobs = [j for j in jobs if j["submit_time"] >= midnight and j["user"] == me]
    jobs.sort(key=lambda j: (j["array_job_id"] if j["array_job_id"] is not None else j["id"], j["array_task_id"] or 0))
    rows = []
    for job in jobs:
        if states and job["state"] not in states:
            continue
        base = job_row(job, cluster, now)
        rows.append(base)
        if steps:
            rows.extend(step_row(job, step, base, now) for step in db.steps_of(conn, job["id"]))
    out = []
    if sep:
        if show_header:
            out.append(sep.join(c[0] for c in columns) + (sep if trail else ""))
        out += [sep.join(row[c[1]] for c in columns) + (sep if trail else "") for row in rows]
    else:
        if show_header:
            out.append(" ".join(_cell(c[0], c[2], c[1]) for c in columns) + " ")
            out.append(" ".join("-" * c[2] for c in columns) + " ")
        out += [" ".join(_cell(row[c[1]], c[2], c[1]) for c in columns) + " " for row in rows]
    if out:
        print("\n".join(out))
    return 0


def _cell(value: str, width: int, key: str) -> str:
    if len(value) > width:
        value = value[: width - 1] + "+"
    return value.ljust(width) if key in ("jobid", "jobidraw") else value.rjust(width)
