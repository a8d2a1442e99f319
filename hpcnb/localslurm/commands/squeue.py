"""squeue: the queue of pending and running jobs."""
from __future__ import annotations

import re
import sys
import time

from hpcnb.slurm.bounds import c_int, saturated, strtol
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


# squeue -s/--steps (squeue.c's default step format; print.c's headers)
STEP_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"
STEP_HEADERS = {"i": "STEPID", "j": "NAME", "P": "PARTITION", "u": "USER", "U": "UID", "M": "TIME",
                "N": "NODELIST", "A": "TASKS", "l": "TIME_LIMIT", "S": "START_TIME"}
# the special steps' ids (slurm.h: SLURM_INTERACTIVE_STEP, _BATCH_SCRIPT, _EXTERN_CONT): squeue sorts by id
SPECIAL_STEP_IDS = {"interactive": 0xFFFFFFFA, "batch": 0xFFFFFFFB, "extern": 0xFFFFFFFC}


def _steps_option(argv: list[str]) -> tuple[list[str], bool, str | None]:
    """Take ``-s``/``--steps[=LIST]`` (an optional argument, which Python's getopt has not) out of
    argv: the rest, whether it was given, and its list of steps (``-sLIST``, ``--steps=LIST``)."""
    rest, given, wanted = [], False, None
    for i, token in enumerate(argv):
        if token == "--":
            return rest + argv[i:], given, wanted
        name, eq, value = token.partition("=")
        if name in ("--ste", "--step", "--steps"):  # getopt_long takes any unambiguous prefix
            given, wanted = True, value if eq else wanted
        elif token.startswith("-s") and not token.startswith("--"):
            given, wanted = True, token[2:] or wanted
        else:
            rest.append(token)
    return rest, given, wanted


def _step_id(job: dict, step: str) -> str:
    """A step as squeue -s names it: ``7.0``, ``7.batch``, ``3_1.0`` for an array task's."""
    if job["array_job_id"] is not None:
        return f"{job['array_job_id']}_{job['array_task_id']}.{step}"
    return f"{job['id']}.{step}"


def _leading_int(text: str) -> tuple[int, str]:
    """C's ``strtol`` into an ``int``: the leading number (0 if none) and what follows it."""
    match = re.match(r"\s*[+-]?[0-9]*", text)
    digits = match[0].strip()  # type: ignore[index]
    number = c_int(strtol(digits)) if digits.lstrip("+-") else 0
    return number, text[match.end():]  # type: ignore[union-attr]


def step_list(text: str) -> list[tuple[int, int | None, int]]:
    """``-s LIST`` as opts.c's ``_build_step_list`` reads it: ``JOB[_TASK].STEP`` items, each a
    ``strtol`` (so ``7.batch`` is step 0); raises ValueError with squeue's message for a bad one."""
    out = []
    for item in filter(None, text.split(",")):
        parts = [p for p in item.split(".") if p]  # strtok: empty fields are skipped
        if not parts:
            break
        job_id, rest = _leading_int(parts[0])
        task = _leading_int(rest[1:])[0] if rest.startswith("_") else None
        if len(parts) < 2:
            raise ValueError(f"Invalid job_step id: {parts[0]}.??")
        step = _leading_int(parts[1])[0]
        if job_id <= 0 or step < 0:
            raise ValueError(f"Invalid job_step id: {parts[0]}.{parts[1]}")
        out.append((job_id, task, step))
    return out


def _step_number(step: str) -> int:
    """A step's id as Slurm numbers it (``batch`` is SLURM_BATCH_SCRIPT, 0xfffffffb...)."""
    return SPECIAL_STEP_IDS.get(step, int(step) if step.isdigit() else 0)


def _named(job: dict, step: int, wanted: list[tuple[int, int | None, int]]) -> bool:
    """Is this step of this job in the list (print.c's ``_filter_step``)?"""
    return any(number == step and (job["id"] == job_id or job["array_job_id"] == job_id if task is None
                                   else job["array_job_id"] == job_id and job["array_task_id"] == task)
               for job_id, task, number in wanted)


def _step_lines(conn, jobs: list[dict], fmt: str, show_header: bool, wanted: str | None, now: float) -> list[str]:
    """squeue -s: the running steps of running jobs (``wanted``: only those listed, ``7.0,8.1``), by
    partition and step id, as print.c's step fields print them."""
    listed = step_list(wanted) if wanted is not None else None
    rows = []
    for job in jobs:
        if job["state"] not in db.ACTIVE_STATES:
            continue
        for step in db.steps_of(conn, job["id"]):
            number = _step_number(step["step"])
            if step["state"] != "RUNNING" or listed is not None and not _named(job, number, listed):
                continue
            rows.append(((job["partition"], job["id"], number), job, step, _step_id(job, step["step"])))
    rows.sort(key=lambda row: row[0])
    lines = [formats.header(fmt, STEP_HEADERS)] if show_header else []
    for _, job, step, text in rows:
        lines.append(formats.render(fmt, {
            "i": lambda t=text: t, "j": lambda s=step: s["name"], "P": lambda j=job: j["partition"],
            "u": lambda j=job: j["user"], "U": lambda j=job: str(j["uid"]),
            "M": lambda s=step: format_squeue_time(max(0.0, now - s["start_time"])),
            "N": lambda s=step: s["nodelist"], "A": lambda s=step: str(s["ntasks"]), "l": lambda: "UNLIMITED",
            "S": lambda s=step: formats.stamp(s["start_time"])}))
    return lines


def main(argv: list[str]) -> int:
    argv, steps, wanted_steps = _steps_option(argv)
    opts, positional = getopt_parse(
        "squeue", argv, "u:j:t:o:hp:n:rlaw:s",  # -s here: within a group of flags (-hs)
        ["user=", "jobs=", "states=", "format=", "noheader", "partition=", "name=", "array", "long", "me",
         "all", "nodelist=", "sort=", "iterate="],
    )
    steps = steps or any(opt == "-s" for opt, _ in opts)
    if steps and wanted_steps is None and positional:  # opts.c: "squeue -s 7.0" names its steps so
        wanted_steps = positional[0]
    try:
        step_list(wanted_steps or "")
    except ValueError as err:
        print(f"squeue: error: {err}", file=sys.stderr)
        return 1
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
    try:
        formats.check_widths(fmt)
    except ValueError as err:  # a width no real squeue prints
        print(f"squeue: error: {err}", file=sys.stderr)
        return 1
    now = time.time()
    if steps:
        given = next((v for o, v in reversed(opts) if o in ("-o", "--format")), None)
        jobs = [j for j in select_jobs(conn, job_ids, "state IN ('RUNNING','COMPLETING','SUSPENDED')")
                if (not users or j["user"] in users) and (not partitions or j["partition"] in partitions)]
        lines = _step_lines(conn, jobs, given or STEP_FORMAT, show_header, wanted_steps, now)
        if lines:
            print("\n".join(lines))
        return 0
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
