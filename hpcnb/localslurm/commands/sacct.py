"""sacct: accounting records of jobs and their steps (``.batch``, ``.0`` ...).

Rows, values and column widths follow Slurm 22.05's sacct (compared with a real one by
tests/parity): the job row carries the request (ReqTRES, ReqMem, Timelimit...), the ``.batch`` row
the first node's share, and each step what it was given (without ``-c``/--exact a step gets every
CPU and all the memory the job has on its nodes).
"""
from __future__ import annotations

import getpass
import grp
import re
import sys
import time

import hostlist

from hpcnb.slurm.bounds import field_width
from hpcnb.slurm.gpus import format_gpu_usage
from hpcnb.slurm.sizes import format_size
from hpcnb.slurm.states import CODES
from hpcnb.slurm.times import format_cpu_time, format_elapsed

from .. import db, formats
from .common import getopt_parse, open_cluster, select_jobs

JOB_ID_RE = re.compile(r"\d+(_\d+)?")  # what -j takes before a .step
DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
# every field sacct 22.05 knows (sacct --helpformat) with its default width; negative = left-justified
WIDTHS = {
    "account": 10, "admincomment": 15, "alloccpus": 10, "allocnodes": 10, "alloctres": 10, "associd": 7,
    "avecpu": 10, "avecpufreq": 10, "avediskread": 14, "avediskwrite": 14, "avepages": 10, "averss": 10,
    "avevmsize": 10, "blockid": 16, "cluster": 10, "comment": 14, "constraints": 19, "consumedenergy": 14,
    "consumedenergyraw": 17, "container": 19, "cputime": 10, "cputimeraw": 10, "dbindex": 10,
    "derivedexitcode": 15, "elapsed": 10, "elapsedraw": 10, "eligible": 19, "end": 19, "exitcode": 8,
    "flags": 19, "gid": 6, "group": 9, "jobid": -12, "jobidraw": -12, "jobname": 10, "layout": 9,
    "maxdiskread": 12, "maxdiskreadnode": 15, "maxdiskreadtask": 15, "maxdiskwrite": 12, "maxdiskwritenode": 16,
    "maxdiskwritetask": 16, "maxpages": 8, "maxpagesnode": 12, "maxpagestask": 14, "maxrss": 10,
    "maxrssnode": 10, "maxrsstask": 10, "maxvmsize": 10, "maxvmsizenode": 14, "maxvmsizetask": 14,
    "mcslabel": 12, "mincpu": 10, "mincpunode": 10, "mincputask": 10, "ncpus": 10, "nnodes": 8, "nodelist": 15,
    "ntasks": 8, "partition": 10, "priority": 10, "qos": 10, "qosraw": 6, "reason": 22, "reqcpufreq": 10,
    "reqcpufreqgov": 13, "reqcpufreqmax": 13, "reqcpufreqmin": 13, "reqcpus": 8, "reqmem": 10, "reqnodes": 8,
    "reqtres": 10, "reservation": 20, "reservationid": 8, "reserved": 10, "resvcpu": 10, "resvcpuraw": 10,
    "start": 19, "state": 10, "submit": 19, "submitline": 20, "suspended": 10, "systemcomment": 15,
    "systemcpu": 10, "timelimit": 10, "timelimitraw": 10, "totalcpu": 10, "tresusageinave": 14,
    "tresusageinmax": 14, "tresusageinmaxnode": 18, "tresusageinmaxtask": 18, "tresusageinmin": 14,
    "tresusageinminnode": 18, "tresusageinmintask": 18, "tresusageintot": 14, "tresusageoutave": 15,
    "tresusageoutmax": 15, "tresusageoutmaxnode": 19, "tresusageoutmaxtask": 19, "tresusageoutmin": 15,
    "tresusageoutminnode": 19, "tresusageoutmintask": 19, "tresusageouttot": 15, "uid": 6, "user": 9,
    "usercpu": 10, "wckey": 10, "wckeyid": 10, "workdir": 20,
}
# fields sacct 24.11 adds to those (only the ones the local Slurm fills)
WIDTHS_2411 = {"restarts": 8}
STATE_CODES = {v: k for k, v in CODES.items()}


def _tres(cpus: int, mem: int, nodes: int, gpus: int, billing: bool) -> str:
    parts = [f"billing={cpus}"] if billing else []
    parts.append(f"cpu={cpus}")
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    parts.append(f"mem={format_size(mem, 'M')}")
    parts.append(f"node={nodes}")
    return ",".join(parts)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _gid(job: dict) -> int:
    import pwd

    try:
        return pwd.getpwuid(job["uid"]).pw_gid
    except KeyError:
        return job["uid"]


def requested(job: dict, cluster) -> tuple[int, int, int, int]:
    """(CPUs, MB, nodes, GPUs) the job asked for, as slurmctld records them."""
    req = job["req"]
    nodes = req["nodes_min"] or 1
    if req["ntasks"]:
        tasks = req["ntasks"]
    else:
        tasks = nodes * (req["ntasks_per_node"] or 1)
    cpus = tasks * (req["cpus_per_task"] or 1)
    if req["mem_mb"] is not None:
        mem = req["mem_mb"] * nodes
    else:
        mem = (req["mem_per_cpu_mb"] or cluster.def_mem_per_cpu_mb) * cpus
    return cpus, mem, nodes, req["gpus_per_node"] * nodes


def _limit(seconds: int | None) -> tuple[str, str]:
    if seconds is None:
        return "UNLIMITED", "UNLIMITED"
    return format_elapsed(seconds), str(seconds // 60)


def derived_exit(steps: list[dict]) -> str:
    """The highest wait status of the job's steps (not the batch step), as ``code:signal``."""
    raw = max(((s["exit_code"] << 8) | s["exit_signal"] for s in steps if s["step"] != "batch"), default=0)
    return f"{raw >> 8}:{raw & 0xFF}"


def unstarted_tasks_together(jobs: list[dict]) -> list[dict]:
    """Array tasks that never started share one record in Slurm 22.05, the array's own (JobIDRaw:
    the array's id), listed after the tasks that started: ``7_[2-4%1] PENDING``, and after a
    scancel ``7_[2-4%1] CANCELLED by 0``; ``7_4`` when one is left. A task gets its own record
    when it starts."""
    out, groups = [], {}
    for job in jobs:
        if job["array_job_id"] is not None and job["start_time"] is None:
            key = (job["array_job_id"], job["state"])
            if key in groups:
                groups[key]["tasks"].append(job["array_task_id"])
                continue
            job = groups[key] = dict(job, tasks=[job["array_task_id"]])
        out.append(job)
    for job in groups.values():
        job["display_id"] = formats.array_tasks_text(job["array_job_id"], job["tasks"], job["array_throttle"])
    return out


def job_row(job: dict, cluster, now: float, steps: list[dict]) -> dict[str, str]:
    req = job["req"]
    alloc = job["alloc"] or []
    cpus = sum(p["cpus"] for p in alloc)
    mem = sum(p["mem"] for p in alloc)
    gpus = sum(len(p["gpus"]) for p in alloc)
    state = job["state"]
    if state == "CANCELLED":
        state = f"CANCELLED by {job['uid']}"
    req_cpus, req_mem, req_nodes, req_gpus = requested(job, cluster)
    started = job["start_time"] is not None
    run = formats.run_time(job, now)
    limit, limit_raw = _limit(job["time_limit"])
    gid = _gid(job)
    return {
        "jobid": job.get("display_id") or formats.job_id_text(job),
        "jobidraw": str(job["array_job_id"] if "display_id" in job else job["id"]), "jobname": job["name"],
        "partition": job["partition"], "account": job["account"] or job["user"], "alloccpus": str(cpus),
        "allocnodes": str(len(alloc)), "state": state, "exitcode": f"{job['exit_code']}:{job['exit_signal']}",
        "derivedexitcode": derived_exit(steps),
        "elapsed": format_elapsed(run), "elapsedraw": str(int(run)),
        "cputime": format_elapsed(run * cpus), "cputimeraw": str(int(run * cpus)),
        "start": formats.stamp(job["start_time"]) if started else "Unknown",
        "end": formats.stamp(job["end_time"]) if job["end_time"] else "Unknown",
        "submit": formats.stamp(job["submit_time"]), "eligible": formats.stamp(job["eligible_time"]),
        "nnodes": str(len(alloc) or req_nodes), "ncpus": str(cpus or req_cpus), "ntasks": "",
        "alloctres": _tres(cpus, mem, len(alloc), gpus, True) if alloc else "",
        "reqtres": _tres(req_cpus, req_mem, req_nodes, req_gpus, True),
        "reqmem": format_size(req_mem, "M"), "reqcpus": str(req_cpus), "reqnodes": str(req_nodes),
        "nodelist": job["nodelist"] or "None assigned", "layout": "",
        "user": job["user"], "uid": str(job["uid"]), "group": _group(gid), "gid": str(gid),
        "timelimit": limit, "timelimitraw": limit_raw,
        "workdir": req["workdir"], "priority": str(0 if job["held"] else 4294901760 - job["id"]),
        "reason": "None" if started else job["reason"],
        "cluster": cluster.name, "qos": "normal", "qosraw": "1", "comment": req["comment"] or "",
        "constraints": req.get("constraint") or "", "suspended": "00:00:00",
        "flags": "SchedMain,StartRecieved" if started else "",
        "maxrss": "", "restarts": str(job["restart_count"]), "totalcpu": "" if job.get("total_cpu") is None else format_cpu_time(job["total_cpu"]),
    }


def step_row(job: dict, step: dict, base: dict[str, str], now: float, cluster) -> dict[str, str]:
    run = (step["end_time"] or now) - step["start_time"]
    row = {key: "" for key in base}
    alloc = {p["node"]: p for p in job["alloc"] or []}
    nodes = hostlist.expand_hostlist(step["nodelist"]) if step["nodelist"] else []
    parts = [alloc[n] for n in nodes if n in alloc]
    cpus = step["ncpus"]
    job_cpus = sum(p["cpus"] for p in parts)
    req = job["req"]
    if cpus < job_cpus and req["mem_mb"] is None:  # an --exact step (-c): memory in proportion
        mem = cpus * (req["mem_per_cpu_mb"] or cluster.def_mem_per_cpu_mb)
    else:
        mem = sum(p["mem"] for p in parts)
    gpus = sum(len(p["gpus"]) for p in parts)
    batch = step["step"] == "batch"
    row.update(
        jobid=f"{base['jobid']}.{step['step']}", jobidraw=f"{job['id']}.{step['step']}", jobname=step["name"],
        account=base["account"], alloccpus=str(cpus), allocnodes=str(len(nodes)), state=step["state"],
        exitcode=f"{step['exit_code']}:{step['exit_signal']}", elapsed=format_elapsed(run),
        elapsedraw=str(int(run)), start=formats.stamp(step["start_time"]),
        end=formats.stamp(step["end_time"]) if step["end_time"] else "Unknown",
        submit=formats.stamp(step["start_time"]), eligible=formats.stamp(step["start_time"]),
        nnodes=str(len(nodes)), ncpus=str(cpus), ntasks=str(step["ntasks"]), nodelist=step["nodelist"],
        alloctres=_tres(cpus, mem, len(nodes), gpus, False), reqcpus=str(cpus), reqnodes=str(len(nodes)),
        layout="Unknown" if batch else ("Cyclic" if step["ntasks"] <= len(nodes) else "Block"),
        maxrss=format_size(step["max_rss"]) if step["max_rss"] else "", cluster=base["cluster"],
        cputime=format_elapsed(run * cpus), cputimeraw=str(int(run * cpus)), suspended="00:00:00",
        **_gpu_usage(step),
    )
    return row


def _gpu_usage(step: dict) -> dict[str, str]:
    """TRESUsageInAve/Max's GPU part, where the supervisor sampled the step's GPUs with NVML (as a
    Slurm with ``AccountingStorageTRES=gres/gpumem,gres/gpuutil``); otherwise nothing, as there."""
    if step.get("gpu_util_ave") is None:
        return {}
    return {"tresusageinave": format_gpu_usage(step["gpu_mem_ave"], step["gpu_util_ave"]),
            "tresusageinmax": format_gpu_usage(step["gpu_mem_max"], step["gpu_util_max"])}


def main(argv: list[str]) -> int:
    opts, _ = getopt_parse(
        "sacct", argv, "j:XPpno:as:S:E:u:lbD",
        ["jobs=", "allocations", "parsable2", "parsable", "noheader", "format=", "allusers", "state=",
         "starttime=", "endtime=", "user=", "long", "brief", "units=", "duplicates", "noconvert", "helpformat",
         "name=", "delimiter="],
    )
    if any(opt == "--helpformat" for opt, _ in opts):
        names = sorted(WIDTHS)
        print("\n".join(" ".join(f"{n:<19}" for n in names[i:i + 4]).rstrip() for i in range(0, len(names), 4)))
        return 0
    conn, cluster = open_cluster()
    chosen, ids, steps, sep, trail, show_header = [], None, True, None, False, True
    states = names = None
    for opt, val in opts:  # -j and -o add up, as in sacct 22.05 (submitit passes one -j per job)
        if opt in ("-j", "--jobs"):
            ids = f"{ids},{val}" if ids else val
        elif opt in ("-X", "--allocations"):
            steps = False
        elif opt in ("-P", "--parsable2"):
            sep = "|"
        elif opt in ("-p", "--parsable"):
            sep, trail = "|", True
        elif opt in ("-n", "--noheader"):
            show_header = False
        elif opt in ("-o", "--format"):
            chosen.append(val)
        elif opt in ("-s", "--state"):
            states = {STATE_CODES.get(s.upper(), s.upper()) for s in val.split(",")}
        elif opt == "--name":
            names = set(val.split(","))
    delimiter = next((val for opt, val in reversed(opts) if opt == "--delimiter"), "|")
    sep = sep and delimiter  # used with -p/-P alone, as in sacct
    if any(opt in ("-b", "--brief") for opt, _ in opts):
        chosen.append("JobID,State,ExitCode")  # after any -o fields
    fields = ",".join(chosen) or DEFAULT_FIELDS
    widths = {**WIDTHS, **WIDTHS_2411} if cluster.since("24.11") else WIDTHS
    columns = []
    for item in fields.split(","):
        if not item.strip():
            continue
        name, _, width = item.partition("%")
        key = name.strip().lower()
        if key not in widths:
            print(f'sacct: error: Invalid field requested: "{name}"', file=sys.stderr)
            return 1
        try:  # sacct's atoi(), into an int
            size = field_width(width, wraps=False, signed=True) if width.lstrip("-").isdigit() else widths[key]
        except ValueError as err:  # a width no real sacct prints
            print(f"sacct: error: {err}", file=sys.stderr)
            return 1
        columns.append((name.strip(), key, size))
    now = time.time()
    only_steps: dict[str, set[str]] = {}  # -j JOB.STEP: that job's row is replaced by those step rows
    if ids:
        tokens = [t.partition(".") for t in ids.replace(" ", ",").split(",") if t]
        bad = [job + dot + step for job, dot, step in tokens if not JOB_ID_RE.fullmatch(job)]
        if bad:
            print(f"sacct: fatal: Bad job/step specified: {bad[0]}", file=sys.stderr)
            return 1
        plain = {job for job, dot, _ in tokens if not dot}
        for job, dot, step in tokens:
            if dot and job not in plain:
                only_steps.setdefault(job, set()).add(step)
        ids = ",".join(job for job, _, _ in tokens)
    # without -j: the caller's jobs since midnight, and any still running (sacct's default window)
    midnight = time.mktime(time.localtime(now)[:3] + (0, 0, 0, 0, 0, -1))
    jobs = select_jobs(conn, ids, "(submit_time >= ? OR end_time IS NULL) AND user = ?",
                       (midnight, getpass.getuser()))
    jobs.sort(key=lambda j: (j["array_job_id"] if j["array_job_id"] is not None else j["id"], j["array_task_id"] or 0))
    rows = []
    for job in unstarted_tasks_together(jobs):
        if states and job["state"] not in states or names and job["name"] not in names:
            continue
        job_steps = db.steps_of(conn, job["id"])
        base = job_row(job, cluster, now, job_steps)
        wanted = only_steps.get(formats.job_id_text(job)) or only_steps.get(str(job["id"]))
        if wanted is None:
            rows.append(base)
        if steps or wanted:
            ordered = sorted(job_steps, key=lambda s: (s["step"] != "batch", int(s["step"]) if s["step"].isdigit() else 0))
            rows.extend(step_row(job, step, base, now, cluster) for step in ordered
                        if wanted is None or step["step"] in wanted)
    out = []
    if sep:
        if show_header:
            out.append(sep.join(c[0] for c in columns) + (sep if trail else ""))
        out += [sep.join(row.get(c[1], "") for c in columns) + (sep if trail else "") for row in rows]
    else:
        if show_header:
            out.append(" ".join(_cell(c[0], c[2], header=True) for c in columns) + " ")
            out.append(" ".join("-" * abs(c[2]) for c in columns) + " ")
        out += [" ".join(_cell(row.get(c[1], ""), c[2]) for c in columns) + " " for row in rows]
    if out:
        print("\n".join(out))
    return 0


def _cell(value: str, width: int, header: bool = False) -> str:
    """Cut to the width (a value's last char becomes ``+``), then pad: right-justified, or left for a
    negative width."""
    size = abs(width)
    if len(value) > size:
        value = value[:size] if header else value[: size - 1] + "+"
    return value.ljust(size) if width < 0 else value.rjust(size)
