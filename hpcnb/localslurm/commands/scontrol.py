"""scontrol: show job/node/partition/config/reservation/hostnames; requeue, hold, release."""
from __future__ import annotations

import sys

import hostlist

from hpcnb.slurm.sizes import format_size
from hpcnb.slurm.times import CalendarTimeError, TimeSpecError, format_elapsed, format_limit, parse_calendar, parse_time

from .. import db, formats, wake
from .common import open_cluster, select_jobs
from .scancel import wake_supervisor
from .sinfo import node_states


def _group(uid: int) -> str:
    import grp
    import pwd

    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        return f"{uid}({uid})"
    try:
        return f"{grp.getgrgid(gid).gr_name}({gid})"
    except KeyError:
        return f"{gid}({gid})"


def _waiting_for_dependency(job: dict) -> bool:
    return job["state"] == "PENDING" and job["reason"] in ("Dependency", "DependencyNeverSatisfied")


def job_lines(job: dict, cluster, conn, now: float, task_ids: str | None = None) -> list[str]:
    """``scontrol show job`` for one job, line by line, as Slurm 22.05 (or 24.11) prints it.

    ``task_ids`` shows a pending array's waiting tasks as one record (``ArrayTaskId=2-4%2``),
    as slurmctld keeps them until they start.
    """
    from ..alloc import task_count
    from ..request import JobRequest
    from ..patterns import default_output, shown_pattern
    from .sacct import requested

    req = job["req"]
    alloc = job["alloc"] or []
    req_cpus, req_mem, req_nodes, req_gpus = requested(job, cluster)
    if alloc:
        cpus, mem, nodes = sum(p["cpus"] for p in alloc), sum(p["mem"] for p in alloc), len(alloc)
        gpus, tasks = sum(len(p["gpus"]) for p in alloc), sum(p["tasks"] for p in alloc)
    else:
        cpus, mem, nodes, gpus = req_cpus, req_mem, req_nodes, req_gpus
        tasks = task_count(JobRequest.from_dict(req))
    pending = job["state"] == "PENDING"
    job_id = job["array_job_id"] if task_ids is not None else job["id"]
    head = f"JobId={job_id}"
    if job["array_job_id"] is not None:
        head += f" ArrayJobId={job['array_job_id']} ArrayTaskId={task_ids or job['array_task_id']}"
        if job["array_throttle"]:
            head += f" ArrayTaskThrottle={job['array_throttle']}"
    head += f" JobName={job['name']}"
    blocked = pending and (job["held"] or _waiting_for_dependency(job))
    eligible = "Unknown" if blocked else formats.stamp(job["eligible_time"])
    end = job["end_time"] or (job["start_time"] + job["time_limit"] if job["start_time"] and job["time_limit"] else None)
    exit_code = f"{job['exit_code']}:{job['exit_signal']}"
    if job["state"] in ("CANCELLED", "TIMEOUT") and job["start_time"] and (job["exit_code"], job["exit_signal"]) == (0, 0):
        batch = conn.execute("SELECT exit_code, exit_signal FROM steps WHERE job_id=? AND step='batch'",
                             (job["id"],)).fetchone()
        if batch:  # a cancelled or timed-out job ends with its batch step's status (SIGTERM)
            exit_code = f"{batch['exit_code']}:{batch['exit_signal']}"
    tres = f"cpu={cpus},mem={format_size(mem, 'M')},node={nodes},billing={cpus}" + (f",gres/gpu={gpus}" if gpus else "")
    modern = cluster.since("24.11")
    min_mem = (f"MinMemoryNode={format_size(req['mem_mb'], 'M')}" if req["mem_mb"] is not None
               else f"MinMemoryCPU={format_size(req['mem_per_cpu_mb'] or cluster.def_mem_per_cpu_mb, 'M')}")
    lines = [
        head,
        f"   UserId={job['user']}({job['uid']}) GroupId={_group(job['uid'])} MCS_label=N/A",
        f"   Priority={0 if job['held'] else 4294901760 - job['id']} Nice=0 Account={job['account'] or job['user']} "
        "QOS=normal",
        f"   JobState={job['state']} Reason={job['reason']} Dependency={formats.dependency_text(conn, job)}",
        f"   Requeue={0 if req['requeue'] is False else 1} Restarts={job['restart_count']} "
        f"BatchFlag={1 if job['kind'] == 'batch' else 0} Reboot=0 ExitCode={exit_code}",
        f"   RunTime={format_elapsed(formats.run_time(job, now))} "
        f"TimeLimit={format_limit(job['time_limit'])} TimeMin=N/A",
        f"   SubmitTime={formats.stamp(job['submit_time'])} EligibleTime={eligible}",
        f"   AccrueTime={eligible}",
        f"   StartTime={formats.stamp(job['start_time'])} EndTime={formats.stamp(end)} Deadline=N/A",
        "   SuspendTime=None SecsPreSuspend=0 "
        f"LastSchedEval={formats.stamp(job['start_time'] or job['submit_time'])} Scheduler=Main",
        f"   Partition={job['partition']} AllocNode:Sid={req['submit_host']}:0",
        f"   ReqNodeList={req['nodelist'] or '(null)'} ExcNodeList={req['exclude'] or '(null)'}",
        f"   NodeList={job['nodelist'] or ''}",
    ]
    if alloc:
        lines.append(f"   BatchHost={alloc[0]['node']}")
    num_nodes = f"{nodes}-{req.get('nodes_max') or nodes}" if modern and not alloc else str(nodes)
    lines += [
        f"   NumNodes={num_nodes} NumCPUs={cpus} NumTasks={tasks} CPUs/Task={req['cpus_per_task'] or 1} "
        "ReqB:S:C:T=0:0:*:*",
        *([f"   ReqTRES={tres}", f"   AllocTRES={tres if alloc else '(null)'}"] if modern else [f"   TRES={tres}"]),
        f"   Socks/Node=* NtasksPerN:B:S:C={req['ntasks_per_node'] or 0}:0:*:* CoreSpec=*",
        f"   MinCPUsNode={(req['cpus_per_task'] or 1) * (req['ntasks_per_node'] or 1)} {min_mem} MinTmpDiskNode=0",
        f"   Features={req.get('constraint') or '(null)'} DelayBoot=00:00:00",
        "   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)",
        f"   Command={req.get('script_path') or '(null)'}",
        f"   WorkDir={req['workdir']}",
    ]
    if job["kind"] == "batch":
        out = req["output"] or default_output(job)

        def full(pattern: str) -> str:
            path = shown_pattern(pattern, job, cluster.since("24.11"))
            return path if path.startswith("/") else f"{req['workdir']}/{path}"

        stdout = full(out)
        lines += [f"   StdErr={full(req['error']) if req['error'] else stdout}",
                  f"   StdIn={full(req['input']) if req.get('input') else '/dev/null'}",
                  f"   StdOut={stdout}"]
    if not modern:
        lines.append("   Power=")
    per_node = formats.tres_per_node(req, modern)
    if per_node:
        lines.append(f"   TresPerNode={per_node}")
    if modern and req["cpus_per_task"]:
        lines.append(f"   TresPerTask=cpu={req['cpus_per_task']}")
    return lines


def show_jobs(jobs: list[dict], cluster, conn, now: float, one_liner: bool, single_task: bool = False) -> str:
    """Records of the given jobs; an array's tasks that never started share one record."""
    records: list[list[str]] = []
    waiting: dict[int, list[dict]] = {}
    for job in jobs:
        if (job["array_job_id"] is not None and job["state"] == "PENDING" and job["start_time"] is None
                and not job["restart_count"]):
            waiting.setdefault(job["array_job_id"], []).append(job)
            continue
        records.append(job_lines(job, cluster, conn, now))
    from .common import int_ranges

    for tasks in waiting.values():
        first = tasks[-1]
        ids = int_ranges([t["array_task_id"] for t in tasks])
        if len(tasks) > 1 or not single_task:
            ids += f"%{first['array_throttle']}" if first["array_throttle"] and len(tasks) > 1 else ""
        records.insert(0, job_lines(first, cluster, conn, now, ids))
    if one_liner:
        return "\n".join(" ".join(part.strip() for part in lines) + " " for lines in records)
    return "\n".join("\n".join(lines) + "\n   \n" for lines in records)


def show_node(name: str, cluster, conn) -> str:
    node = cluster.nodes[name]
    state, used_cpus, used_mem = node_states(cluster, conn)[name]
    used_gpus = _used_gpus(conn, name)
    parts = ",".join(p.name for p in cluster.partitions.values() if name in p.nodes)
    alloc_tres = ""
    if used_cpus or used_mem:
        alloc_tres = f"cpu={used_cpus},mem={format_size(used_mem, 'M')}" + (f",gres/gpu={used_gpus}" if used_gpus else "")
    cfg_tres = f"cpu={node.cpus},mem={format_size(node.memory_mb, 'M')},billing={node.cpus}" + (f",gres/gpu={node.gpus}" if node.gpus else "")
    import os
    import platform

    from .. import apart

    uname = os.uname()
    now = formats.stamp(db.now())
    modern = cluster.since("24.11")
    return "\n".join([
        f"NodeName={name} Arch={platform.machine()} CoresPerSocket={node.cpus} ",
        f"   CPUAlloc={used_cpus} CPUEfctv={node.cpus} CPUTot={node.cpus} CPULoad={os.getloadavg()[0]:.2f}",
        f"   AvailableFeatures={','.join(node.features) or '(null)'}",
        f"   ActiveFeatures={','.join(node.features) or '(null)'}",
        f"   Gres={node.gres}",
        f"   NodeAddr={apart.node_addresses(list(cluster.nodes))[name]} NodeHostName=localhost Port={SLURMD_PORT} Version={cluster.release}",
        f"   OS={uname.sysname} {uname.release} {uname.version} ",
        f"   RealMemory={node.memory_mb} AllocMem={used_mem} FreeMem={_free_mb()} Sockets=1 Boards=1",
        f"   State={_NODE_STATE[state]} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        f"   Partitions={parts} ",
        f"   BootTime={formats.stamp(_boot_time())} SlurmdStartTime={now}",
        f"   LastBusyTime={now}" + (" ResumeAfterTime=None" if modern else ""),
        f"   CfgTRES={cfg_tres}",
        f"   AllocTRES={alloc_tres}",
        *([] if modern else ["   CapWatts=n/a"]),
        "   CurrentWatts=0 AveWatts=0",
        "   " if modern else "   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]) + "\n"


_NODE_STATE = {"idle": "IDLE", "mix": "MIXED", "alloc": "ALLOCATED"}
SLURMD_PORT = 6818  # Slurm's default SlurmdPort, every node's


def _used_gpus(conn, name: str) -> int:
    running = db.jobs_where(conn, "state IN ('RUNNING','COMPLETING')")
    return sum(len(p["gpus"]) for j in running for p in j["alloc"] or [] if p["node"] == name)


def _free_mb() -> int:
    try:
        import psutil

        return psutil.virtual_memory().available // (1024 * 1024)
    except Exception:  # noqa: BLE001
        return 0


def _boot_time() -> float:
    try:
        import psutil

        return psutil.boot_time()
    except Exception:  # noqa: BLE001
        return db.now()


def show_partition(part, cluster) -> str:
    cpus = sum(cluster.nodes[n].cpus for n in part.nodes)
    mem = sum(cluster.nodes[n].memory_mb for n in part.nodes)
    gpus = sum(cluster.nodes[n].gpus for n in part.nodes)
    max_time = format_limit(part.max_time)
    modern = cluster.since("24.11")  # 24.11 adds ExclusiveTopo, MaxCPUsPerSocket and NodeSets
    return "\n".join([
        f"PartitionName={part.name}",
        "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        f"   AllocNodes=ALL Default={'YES' if part.default else 'NO'} QoS=N/A",
        f"   DefaultTime={'NONE' if part.default_time is None else format_limit(part.default_time)} "
        "DisableRootJobs=NO ExclusiveUser=NO " + ("ExclusiveTopo=NO " if modern else "") + "GraceTime=0 Hidden=NO",
        f"   MaxNodes={part.max_nodes or 'UNLIMITED'} MaxTime={max_time} MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED"
        + (" MaxCPUsPerSocket=UNLIMITED" if modern else ""),
        *(["   NodeSets=ALL"] if modern else []),
        f"   Nodes={hostlist.collect_hostlist(list(part.nodes))}",
        "   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO",
        f"   OverTimeLimit=NONE PreemptMode={'REQUEUE' if part.preemptible else 'OFF'}",
        f"   State=UP TotalCPUs={cpus} TotalNodes={len(part.nodes)} SelectTypeParameters=NONE",
        "   JobDefaults=(null)",
        "   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"   TRES=cpu={cpus},mem={format_size(mem, 'M')},node={len(part.nodes)},billing={cpus}" + (f",gres/gpu={gpus}" if gpus else ""),
    ]) + "\n"


def show_config(cluster) -> str:
    """``scontrol show config``: the settings the local Slurm has (``Key = Value``, as Slurm prints them)."""
    from ..apart import mode
    from hpcnb.slurm.arrays import MAX_ARRAY_SIZE

    settings = {
        "AccountingStorageEnforce": "associations" if cluster.account_required or cluster.accounts else "none",
        "AccountingStorageType": "accounting_storage/none",
        "ClusterName": cluster.name,
        "DefMemPerCPU": str(cluster.def_mem_per_cpu_mb),
        "JobContainerType": "job_container/tmpfs" if mode() == "apart" else "(null)",
        "KillWait": f"{cluster.kill_wait_s} sec",
        "MaxArraySize": str(MAX_ARRAY_SIZE),
        "SLURM_VERSION": cluster.release,
        "SelectType": "select/cons_tres",
    }
    lines = [f"Configuration data as of {formats.stamp(db.now())}"]
    lines += [f"{key:<23} = {value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    one_liner = any(a in ("-o", "--oneliner") for a in argv)
    args = [a for a in argv if a not in ("-d", "--details", "-o", "--oneliner")]
    if not args:
        print("scontrol: error: no command given", file=sys.stderr)
        return 1
    verb, rest = args[0].lower(), args[1:]
    conn, cluster = open_cluster()
    if verb == "show" and rest:
        what, names = rest[0].lower(), rest[1:]
        if what in ("hostnames", "hostname"):
            text = names[0] if names else _env_nodelist()
            if text is None:
                print("scontrol: error: host list is empty", file=sys.stderr)
                return 0
            try:
                print("\n".join(hostlist.expand_hostlist(text)))
            except hostlist.BadHostlist:
                print(f"scontrol: error: Invalid hostlist: {text}", file=sys.stderr)
                return 1
            return 0
        if what in ("hostlist", "hostlistsorted"):
            if not names:
                print("scontrol: error: host list is empty", file=sys.stderr)
                return 0
            hosts = names[0].split(",")
            try:
                hosts = [h for part in hosts for h in hostlist.expand_hostlist(part)]
                text = hostlist.collect_hostlist(hosts) if what == "hostlistsorted" else _compress_in_order(hosts)
            except hostlist.BadHostlist:
                print(f"scontrol: error: Invalid hostlist: {names[0]}", file=sys.stderr)
                return 1
            print(text)
            return 0
        if what in ("job", "jobs", "jobid"):
            jobs = select_jobs(conn, names[0] if names else None)
            if not names:
                jobs = [j for j in jobs if j["end_time"] is None or db.now() - j["end_time"] < 300]
            if not jobs:
                if names:
                    print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
                    return 1
                print("No jobs in the system")
                return 0
            single = bool(names) and "_" in names[0]
            print(show_jobs(jobs, cluster, conn, db.now(), one_liner, single))
            return 0
        if what in ("node", "nodes"):
            try:
                wanted = hostlist.expand_hostlist(names[0]) if names else list(cluster.nodes)
            except hostlist.BadHostlist:
                wanted = [names[0]]
            unknown = [n for n in wanted if n not in cluster.nodes]
            if unknown:
                print(f"Node {unknown[0]} not found")
                return 1
            records = [show_node(n, cluster, conn) for n in wanted]
            if one_liner:
                records = [" ".join(records_line.strip() for records_line in r.splitlines()) + " \n" for r in records]
            print("\n".join(records))
            return 0
        if what in ("config", "conf", "configuration"):
            print(show_config(cluster))
            return 0
        if what in ("reservation", "reservations", "res"):
            print("No reservations in the system")  # the local Slurm keeps none
            return 0
        if what in ("partition", "partitions"):
            parts = [p for p in cluster.partitions.values() if not names or p.name == names[0]]
            if not parts:
                print(f"Partition {names[0]} not found")
                return 1
            print("\n".join(show_partition(p, cluster) for p in parts))
            return 0
    if verb in ("requeue", "hold", "release", "uhold") and rest:
        return control(conn, verb, rest[0])
    if verb == "update" and rest:
        return update(conn, rest)
    # Slurm 22.05's words for what it does not understand
    if verb in ("show", "requeue", "hold", "release", "uhold", "update") and not rest:
        print(f"too few arguments for keyword:{verb}", file=sys.stderr)
    elif verb == "show":
        print(f"invalid entity:{rest[0]} for keyword:show ", file=sys.stderr)
    else:
        print(f"invalid keyword: {args[0]}", file=sys.stderr)
    return 1


def _compress_in_order(hosts: list[str]) -> str:
    """``scontrol show hostlist``: ranges of consecutive names, in the order given."""
    groups: list[list[str]] = []
    for host in hosts:
        if groups and hostlist.collect_hostlist(groups[-1] + [host]).count(",") == 0:
            groups[-1].append(host)
        else:
            groups.append([host])
    return ",".join(hostlist.collect_hostlist(g) for g in groups)


def _env_nodelist() -> str | None:
    import os

    return os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")


def control(conn, verb: str, ids: str) -> int:
    jobs = select_jobs(conn, ids)
    if not jobs:
        print(f"Invalid job id specified for job {ids}", file=sys.stderr)
        if verb != "requeue":  # 22.05's hold and release go through slurm_suspend and say so too
            print("slurm_suspend error: Invalid job id specified", file=sys.stderr)
        return 1
    rc = 0
    for job in jobs:
        with db.transaction(conn):
            current = db.get_job(conn, job["id"])
            if verb in ("hold", "uhold"):
                ok = current["state"] == "PENDING"
                if ok:
                    conn.execute("UPDATE jobs SET held=?, reason=? WHERE id=?",
                                 (1 if verb == "uhold" else 2, "JobHeldUser" if verb == "uhold" else "JobHeldAdmin", job["id"]))
            elif verb == "release":
                ok = current["state"] == "PENDING"
                if ok:
                    conn.execute("UPDATE jobs SET held=0, reason='None' WHERE id=?", (job["id"],))
            else:  # requeue
                ok = current["state"] == "RUNNING" and current["kind"] == "batch"
                if ok:
                    conn.execute("UPDATE jobs SET control='requeue' WHERE id=?", (job["id"],))
        if not ok:
            print(f"Job is no longer pending execution for job {formats.job_id_text(job)}" if verb != "requeue"
                  else f"Requested operation is presently disabled for job {formats.job_id_text(job)}", file=sys.stderr)
            rc = 1
        elif verb == "requeue":
            wake_supervisor(current)
    wake.poke()
    return rc


_UPDATABLE = {"starttime": "StartTime", "timelimit": "TimeLimit", "jobname": "JobName", "name": "JobName",
              "comment": "Comment"}


def update(conn, items: list[str]) -> int:
    """``scontrol update JobId=N StartTime=... TimeLimit=... JobName=...`` (the job fields users change)."""
    pairs = [item.partition("=")[::2] for item in items]
    ids = [v for k, v in pairs if k.lower() in ("jobid", "job")]
    if not ids:
        print("No valid entity in update command", file=sys.stderr)
        print("Input line must include \"NodeName\", \"PartitionName\", \"Reservation/ReservationName\", "
              "\"JobId\", \"StepId\", \"FrontendName\" or \"SuspendExcNodes\"", file=sys.stderr)
        return 1
    changes = {}
    for key, value in pairs:
        if key.lower() in ("jobid", "job"):
            continue
        if key.lower() not in _UPDATABLE:
            print(f"Update of this parameter is not supported: {key}={value}", file=sys.stderr)
            print("Request aborted", file=sys.stderr)
            return 1
        changes[_UPDATABLE[key.lower()]] = value
    jobs = select_jobs(conn, ids[0])
    if not jobs:
        print(f"Invalid job id specified for job {ids[0]}", file=sys.stderr)
        return 1
    now = db.now()
    for job in jobs:
        with db.transaction(conn):
            current = db.get_job(conn, job["id"])
            if current["state"] not in ("PENDING", "RUNNING", "SUSPENDED"):
                print(f"Job has already finished for job {formats.job_id_text(job)}", file=sys.stderr)
                return 1
            for key, value in changes.items():
                if key == "StartTime":
                    try:
                        when = parse_calendar(value, now)
                    except CalendarTimeError:
                        print(f"Invalid StartTime specification {value}", file=sys.stderr)
                        return 1
                    if current["state"] != "PENDING":
                        print(f"Job is no longer pending execution for job {formats.job_id_text(job)}",
                              file=sys.stderr)
                        return 1
                    conn.execute("UPDATE jobs SET eligible_time=? WHERE id=?", (when, job["id"]))
                    if current["reason"] == "BeginTime" and when <= now:
                        conn.execute("UPDATE jobs SET reason='None' WHERE id=?", (job["id"],))
                elif key == "TimeLimit":
                    try:
                        seconds = parse_time(value)
                    except TimeSpecError:
                        print(f"Invalid TimeLimit value: {value}", file=sys.stderr)
                        return 1
                    conn.execute("UPDATE jobs SET time_limit=? WHERE id=?", (seconds, job["id"]))
                elif key == "JobName":
                    from ..submit import db_text

                    conn.execute("UPDATE jobs SET name=? WHERE id=?", (db_text(value), job["id"]))
                elif key == "Comment":
                    req = dict(current["req"], comment=value)
                    import json

                    conn.execute("UPDATE jobs SET req=? WHERE id=?", (json.dumps(req), job["id"]))
    wake.poke()
    return 0
