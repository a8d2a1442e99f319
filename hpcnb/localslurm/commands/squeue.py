"""squeue: the queue of pending and running jobs."""
from __future__ import annotations

import re
import sys
import time

from hpcnb.slurm.bounds import c_int, saturated
from hpcnb.slurm.sizes import format_size
from hpcnb.slurm.states import BASE, CODES
from hpcnb.slurm.times import format_squeue_time

from .. import db, formats
from .common import getopt_parse, open_cluster, select_jobs

DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
MIN_JOB_AGE_S = 300  # finished jobs stay visible this long, as with Slurm's MinJobAge
HEADERS = {
    "i": "JOBID", "A": "JOBID", "P": "PARTITION", "j": "NAME", "u": "USER", "t": "ST", "T": "STATE",
    "M": "TIME", "l": "TIME_LIMIT", "L": "TIME_LEFT", "D": "NODES", "R": "NODELIST(REASON)", "N": "NODELIST",
    "r": "REASON", "C": "CPUS", "b": "TRES_PER_NODE", "S": "START_TIME", "e": "END_TIME", "V": "SUBMIT_TIME",
    "Q": "PRIORITY", "E": "DEPENDENCY", "a": "ACCOUNT", "k": "COMMENT", "m": "MIN_MEMORY", "q": "QOS",
    "Z": "WORK_DIR", "F": "ARRAY_JOB_ID", "K": "ARRAY_TASK_ID", "o": "COMMAND", "c": "MIN_CPUS",
    "B": "EXEC_HOST", "f": "FEATURES",
}
ACTIVE = ("PENDING", "RUNNING", "COMPLETING", "SUSPENDED")
VALID_STATES = ",".join(CODES)  # as squeue 22.05 lists them when -t names something else
SHORT_STATES = set(CODES.values())
STATE_ORDER = {**{name: i for i, name in enumerate(BASE)}, "COMPLETING": 1}  # Slurm's job_states enum


def fields(job: dict, cluster, now: float, conn=None) -> dict:
    req = job["req"]
    running = job["state"] in ("RUNNING", "COMPLETING")
    cpus = sum(p["cpus"] for p in job["alloc"]) if job["alloc"] else (req["ntasks"] or 1) * (req["cpus_per_task"] or 1)
    nodes = len(job["alloc"]) if job["alloc"] else (req["nodes_min"] or 1)
    reason = job["reason"]
    left = None if job["time_limit"] is None else job["time_limit"] - formats.run_time(job, now)
    return {
        "i": lambda: job.get("display_id") or formats.job_id_text(job),
        "A": lambda: str(job["id"]),
        "P": lambda: job["partition"],
        "j": lambda: job["name"],
        "u": lambda: job["user"],
        "t": lambda: CODES.get(job["state"], job["state"]),
        "T": lambda: job["state"],
        "M": lambda: format_squeue_time(formats.run_time(job, now)),
        "l": lambda: "UNLIMITED" if job["time_limit"] is None else format_squeue_time(job["time_limit"]),
        "L": lambda: "UNLIMITED" if left is None else format_squeue_time(max(0, left)),
        "D": lambda: str(nodes),
        "R": lambda: (job["nodelist"] or "") if running else f"({reason})",
        "N": lambda: job["nodelist"] or "",
        "r": lambda: reason,
        "C": lambda: str(cpus),
        "b": lambda: formats.tres_per_node(req, cluster.since("24.11")) or "N/A",
        "S": lambda: formats.stamp(job["start_time"], "N/A"),
        "e": lambda: formats.stamp(job["end_time"] or (job["start_time"] + job["time_limit"] if running and job["time_limit"] else None), "N/A"),
        "V": lambda: formats.stamp(job["submit_time"]),
        "Q": lambda: str(0 if job["held"] else 4294901760 - job["id"]),
        "E": lambda: formats.dependency_text(conn, job),
        "a": lambda: job["account"] or job["user"],
        "k": lambda: req["comment"] or "(null)",
        "m": lambda: format_size(req["mem_mb"] if req["mem_mb"] is not None
                                else req["mem_per_cpu_mb"] or cluster.def_mem_per_cpu_mb, "M"),
        "q": lambda: "normal",
        "Z": lambda: req["workdir"],
        "F": lambda: str(job["array_job_id"] if job["array_job_id"] is not None else job["id"]),
        "K": lambda: str(job["array_task_id"]) if job["array_task_id"] is not None else "N/A",
        "o": lambda: "(null)" if req.get("wrap") is not None else req.get("script_path") or "(null)",
        "c": lambda: str(req["cpus_per_task"] or 1),
        "B": lambda: exec_host(job),
        "f": lambda: req.get("constraint") or "(null)",
    }


def exec_host(job: dict) -> str:
    """squeue %B (22.05 print.c): a batch job's batch host (the first node; ``n/a`` before it has
    one), any other job's alloc_node (the host it was submitted from)."""
    if job["kind"] != "batch":
        return job["req"]["submit_host"] or "n/a"
    return job["alloc"][0]["node"] if job["alloc"] else "n/a"


def collapse_arrays(jobs: list[dict]) -> list[dict]:
    """Pending tasks of one array share a line, ``8_[2-4%1]``, as squeue shows them."""
    out, groups = [], {}
    for job in jobs:
        if job["array_job_id"] is not None and job["state"] == "PENDING" and job["reason"] == jobs_reason(job):
            key = (job["array_job_id"], job["reason"])
            if key in groups:
                groups[key]["tasks"].append(job["array_task_id"])
                continue
            job = dict(job, tasks=[job["array_task_id"]])
            groups[key] = job
        out.append(job)
    for job in groups.values():
        job["display_id"] = formats.array_tasks_text(job["array_job_id"], job["tasks"], job["array_throttle"])
    return out


def jobs_reason(job: dict) -> str:
    return job["reason"]


def _bad_id(token: str) -> bool:
    """squeue reads a ``-j`` id with ``strtol`` into a C ``int`` and refuses one that is not positive
    (measured on 22.05: 0, 2147483648, 4294967296 and 20 digits are refused)."""
    digits = re.match(r"[0-9]*", token)[0]  # type: ignore[index]
    return bool(digits) and c_int(saturated(digits)) <= 0


def main(argv: list[str]) -> int:
    opts, _ = getopt_parse(
        "squeue", argv, "u:j:t:o:hp:n:rlaw:",
        ["user=", "jobs=", "states=", "format=", "noheader", "partition=", "name=", "array", "long", "me",
         "all", "nodelist=", "sort=", "iterate="],
    )
    conn, cluster = open_cluster()
    fmt, show_header, array_lines, long_listing = DEFAULT_FORMAT, True, False, False
    users = partitions = names = states = job_ids = None
    import getpass

    for opt, val in opts:
        if opt in ("-u", "--user"):
            users = set(val.split(","))
        elif opt == "--me":
            users = {getpass.getuser()}
        elif opt in ("-j", "--jobs"):
            job_ids = val
            bad = next((t for t in re.split("[ ,]", val) if _bad_id(t)), None)
            if bad:
                print(f"squeue: error: Invalid job id: {bad}", file=sys.stderr)
                return 1
        elif opt in ("-t", "--states"):
            states = {s.upper() for s in val.split(",") if s}
            # "all" stands only alone, as in squeue 22.05
            bad = sorted(states - set(VALID_STATES.split(",")) - SHORT_STATES - ({"ALL"} if len(states) == 1 else set()))
            if bad:
                valid = VALID_STATES.lower() if cluster.since("24.11") else VALID_STATES  # 24.11 lists them so
                print(f"squeue: error: Invalid job state specified: {bad[0].lower()}\n"
                      f"squeue: error: Valid job states include: {valid}\n", file=sys.stderr)
                return 1
        elif opt in ("-o", "--format"):
            fmt = val
        elif opt in ("-h", "--noheader"):
            show_header = False
        elif opt in ("-p", "--partition"):
            partitions = set(val.split(","))
        elif opt in ("-n", "--name"):
            names = set(val.split(","))
        elif opt in ("-r", "--array"):
            array_lines = True
        elif opt in ("-l", "--long"):
            fmt, long_listing = LONG_FORMAT, True
    now = time.time()
    codes = {v: k for k, v in CODES.items()}
    if states and "ALL" not in states:
        states = {codes.get(s, s) for s in states}
    # what slurmctld still holds: jobs not ended, or ended less than MinJobAge ago; of those, only the
    # states shown are read (thousands of array tasks that just ended are not loaded to print nothing)
    shown = ACTIVE if states is None else () if "ALL" in states else tuple(states)
    where = "(end_time IS NULL OR end_time > ?)" + (f" AND state IN ({','.join('?' * len(shown))})" if shown else "")
    jobs = select_jobs(conn, job_ids, where, (now - MIN_JOB_AGE_S, *shown))
    jobs = [j for j in jobs if not j["end_time"] or now - j["end_time"] <= MIN_JOB_AGE_S]  # not purged yet
    # one id is looked up (slurm_load_job(), which fails for an unknown job); several filter the queue
    if job_ids and not jobs and len([t for t in job_ids.replace(" ", ",").split(",") if t]) == 1:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    visible = []
    for job in jobs:
        if states is None and job["state"] not in ACTIVE:  # -j too: an ended job shows only with -t
            continue
        if states and "ALL" not in states and job["state"] not in states:
            continue
        if (users and job["user"] not in users) or (partitions and job["partition"] not in partitions):
            continue
        if names and job["name"] not in names:
            continue
        visible.append(job)
    # squeue's default order (-S P,t,-p): partition name, job state (pending first), then priority
    # (highest first; basic priority falls with each submission, held jobs have 0)
    visible.sort(key=lambda j: (j["partition"], STATE_ORDER.get(j["state"], 99),
                                0 if j["held"] else -(4294901760 - j["id"]), j["array_task_id"] or 0))
    if not array_lines:
        visible = collapse_arrays(visible)
    lines = [formats.header(fmt, HEADERS)] if show_header else []
    if long_listing and show_header:
        lines.insert(0, time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(now)))
    lines += [formats.render(fmt, fields(job, cluster, now, conn)) for job in visible]
    if lines:
        print("\n".join(lines))
    return 0
