"""scontrol: show job/node/partition/hostnames; requeue, hold, release."""
from __future__ import annotations

import sys

import hostlist

from .. import controller, db, formats
from .common import open_cluster, select_jobs
from .scancel import wake_supervisor
from .sinfo import node_states


def show_job(job: dict, cluster, now: float) -> str:
    req = job["req"]
    alloc = job["alloc"] or []
    cpus = sum(p["cpus"] for p in alloc) or (req["ntasks"] or 1) * (req["cpus_per_task"] or 1)
    mem = sum(p["mem"] for p in alloc)
    out = req["output"] or ("slurm-%A_%a.out" if job["array_job_id"] is not None else "slurm-%j.out")
    from ..supervisor import expand_pattern

    node = alloc[0]["node"] if alloc else "(null)"
    stdout = f"{req['workdir']}/{expand_pattern(out, job, node)}"
    stderr = f"{req['workdir']}/{expand_pattern(req['error'], job, node)}" if req["error"] else stdout
    end = job["end_time"] or (job["start_time"] + job["time_limit"] if job["start_time"] and job["time_limit"] else None)
    array = ""
    if job["array_job_id"] is not None:
        array = f" ArrayJobId={job['array_job_id']} ArrayTaskId={job['array_task_id']}"
    lines = [
        f"JobId={job['id']}{array} JobName={job['name']}",
        f"   UserId={job['user']}({job['uid']}) GroupId={job['user']}({job['uid']}) MCS_label=N/A",
        f"   Priority={4294901760 - job['id']} Nice=0 Account={job['account'] or job['user']} QOS=normal",
        f"   JobState={job['state']} Reason={job['reason']} Dependency={req['dependency'] or '(null)'}",
        f"   Requeue={0 if req['requeue'] is False else 1} Restarts={job['restart_count']} "
        f"BatchFlag={1 if job['kind'] == 'batch' else 0} Reboot=0 ExitCode={job['exit_code']}:{job['exit_signal']}",
        f"   RunTime={formats.elapsed(formats.run_time(job, now))} TimeLimit={'UNLIMITED' if job['time_limit'] is None else formats.elapsed(job['time_limit'])} TimeMin=N/A",
        f"   SubmitTime={formats.stamp(job['submit_time'])} EligibleTime={formats.stamp(job['eligible_time'])}",
        f"   StartTime={formats.stamp(job['start_time'])} EndTime={formats.stamp(end)} Deadline=N/A",
        f"   Partition={job['partition']} AllocNode:Sid={req['submit_host']}:0",
        f"   ReqNodeList={req['nodelist'] or '(null)'} ExcNodeList={req['exclude'] or '(null)'}",
        f"   NodeList={job['nodelist'] or ''}",
        f"   NumNodes={len(alloc) or req['nodes_min'] or 1} NumCPUs={cpus} NumTasks={sum(p['tasks'] for p in alloc) or req['ntasks'] or 1} "
        f"CPUs/Task={req['cpus_per_task'] or 1} ReqB:S:C:T=0:0:*:*",
        f"   TRES=cpu={cpus},mem={mem}M,node={len(alloc) or 1},billing={cpus}"
        + (f",gres/gpu={sum(len(p['gpus']) for p in alloc)}" if req["gpus_per_node"] else ""),
        f"   Command={req.get('script_path') or '(null)'}",
        f"   WorkDir={req['workdir']}",
    ]
    if job["kind"] == "batch":
        lines += [f"   StdErr={stderr}", "   StdIn=/dev/null", f"   StdOut={stdout}"]
    return "\n".join(lines) + "\n"


def show_node(name: str, cluster, conn) -> str:
    node = cluster.nodes[name]
    state, used_cpus, used_mem = node_states(cluster, conn)[name]
    parts = ",".join(p.name for p in cluster.partitions.values() if name in p.nodes)
    gres = f"gpu:{node.gpus}" if node.gpus else "(null)"
    return "\n".join([
        f"NodeName={name} Arch=x86_64 CoresPerSocket={node.cpus} ",
        f"   CPUAlloc={used_cpus} CPUEfctv={node.cpus} CPUTot={node.cpus} CPULoad=0.00",
        f"   AvailableFeatures={','.join(node.features) or '(null)'}",
        f"   ActiveFeatures={','.join(node.features) or '(null)'}",
        f"   Gres={gres}",
        "   NodeAddr=127.0.0.1 NodeHostName=localhost Version=22.05.8",
        f"   RealMemory={node.memory_mb} AllocMem={used_mem} FreeMem={node.memory_mb - used_mem} Sockets=1 Boards=1",
        f"   State={state.upper() if state != 'alloc' else 'ALLOCATED'} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        f"   Partitions={parts} ",
    ]) + "\n"


def show_partition(part, cluster) -> str:
    cpus = sum(cluster.nodes[n].cpus for n in part.nodes)
    mem = sum(cluster.nodes[n].memory_mb for n in part.nodes)
    max_time = "UNLIMITED" if part.max_time is None else formats.elapsed(part.max_time)
    return "\n".join([
        f"PartitionName={part.name}",
        "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        f"   AllocNodes=ALL Default={'YES' if part.default else 'NO'} QoS=N/A",
        "   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO",
        f"   MaxNodes=UNLIMITED MaxTime={max_time} MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"   Nodes={hostlist.collect_hostlist(list(part.nodes))}",
        "   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO",
        f"   OverTimeLimit=NONE PreemptMode={'REQUEUE' if part.preemptible else 'OFF'}",
        f"   State=UP TotalCPUs={cpus} TotalNodes={len(part.nodes)} SelectTypeParameters=NONE",
        "   JobDefaults=(null)",
        "   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"   TRES=cpu={cpus},mem={mem}M,node={len(part.nodes)},billing={cpus}",
    ]) + "\n"


def main(argv: list[str]) -> int:
    args = [a for a in argv if a not in ("-d", "--details", "-o", "--oneliner")]
    if not args:
        print("scontrol: error: no command given", file=sys.stderr)
        return 1
    verb, rest = args[0].lower(), args[1:]
    conn, cluster = open_cluster()
    if verb == "show" and rest:
        what, names = rest[0].lower(), rest[1:]
        if what == "hostnames":
            text = names[0] if names else _env_nodelist()
            if text is None:
                print("scontrol: error: host list is empty", file=sys.stderr)
                return 1
            try:
                print("\n".join(hostlist.expand_hostlist(text)))
            except hostlist.BadHostlist:
                print(f"scontrol: error: Invalid hostlist: {text}", file=sys.stderr)
                return 1
            return 0
        if what == "job":
            jobs = select_jobs(conn, names[0] if names else None)
            if not jobs:
                print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
                return 1
            print("\n".join(show_job(j, cluster, db.now()) for j in jobs))
            return 0
        if what == "node":
            wanted = hostlist.expand_hostlist(names[0]) if names else list(cluster.nodes)
            unknown = [n for n in wanted if n not in cluster.nodes]
            if unknown:
                print(f"Node {unknown[0]} not found", file=sys.stderr)
                return 1
            print("\n".join(show_node(n, cluster, conn) for n in wanted))
            return 0
        if what == "partition":
            parts = [p for p in cluster.partitions.values() if not names or p.name == names[0]]
            if not parts:
                print(f"Partition {names[0]} not found", file=sys.stderr)
                return 1
            print("\n".join(show_partition(p, cluster) for p in parts))
            return 0
    if verb in ("requeue", "hold", "release", "uhold") and rest:
        return control(conn, verb, rest[0])
    print(f"scontrol: error: Invalid command: {' '.join(args)}", file=sys.stderr)
    return 1


def _env_nodelist() -> str | None:
    import os

    return os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")


def control(conn, verb: str, ids: str) -> int:
    jobs = select_jobs(conn, ids)
    if not jobs:
        print(f"Invalid job id specified for job {ids}", file=sys.stderr)
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
    controller.poke()
    return rc
