"""srun: run parallel tasks — as a step inside an allocation, or with a fresh allocation of its own."""
from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time

import hostlist
import psutil

from hpcnb.slurm_options import OptionError

from .. import db, envvars, procs
from ..cluster import Cluster
from ..request import JobRequest, SubmitError, UsageError
from .common import build_request, open_cluster, report
from .interactive import allocate, supervise


class StepError(Exception):
    pass


def layout(job: dict, req: JobRequest, inherited_ntasks: int | None) -> list[dict]:
    """Place the step's tasks on the job's nodes (block): one entry per node used."""
    nodes = job["alloc"]
    per_task = req.cpus_per_task or 1
    ntasks = req.ntasks or (req.nodes_min or len(nodes)) * req.ntasks_per_node if req.ntasks_per_node else req.ntasks
    if not ntasks and req.cpus_per_task and not inherited_ntasks:
        # srun -c without -n (and no SLURM_NTASKS): as many tasks as the CPUs allow, as Slurm does
        ntasks = sum(p["cpus"] // per_task for p in nodes[: req.nodes_min or len(nodes)]) or 1
    if not ntasks:
        ntasks = inherited_ntasks or (req.nodes_min or len(nodes))
    count = req.nodes_min or min(len(nodes), ntasks)
    if count > len(nodes):
        raise StepError(f"Unable to create step for job {job['id']}: Requested node configuration is not available")
    used = nodes[:count]
    caps = [p["cpus"] // per_task for p in used]
    if req.ntasks_per_node:
        caps = [min(c, req.ntasks_per_node) for c in caps]
    if ntasks > sum(caps) or min(caps, default=0) < 1:
        raise StepError(f"Unable to create step for job {job['id']}: More processors requested than permitted")
    tasks = [1] * count
    left = ntasks - count
    for i, cap in enumerate(caps):
        extra = min(cap - 1, left)
        tasks[i] += extra
        left -= extra
    # without -c (which implies --exact) a step may use every CPU the job has on its nodes
    return [{"node": p["node"], "tasks": t, "cpus": t * per_task if req.cpus_per_task else p["cpus"], "alloc": p}
            for p, t in zip(used, tasks)]


def start_step(conn, job: dict, cluster: Cluster, req: JobRequest, argv: list[str], base_env: dict[str, str],
               inherited_ntasks: int | None
               ) -> tuple[dict, list[tuple[int, str, int]], dict[int, list[threading.Thread]]]:
    """Record the step and spawn its tasks. Returns (step, task pids, output relays by task)."""
    placed = layout(job, req, inherited_ntasks)
    ntasks = sum(p["tasks"] for p in placed)
    with db.transaction(conn):
        step_id = conn.execute(
            "SELECT COUNT(*) FROM steps WHERE job_id=? AND step!='batch'", (job["id"],)
        ).fetchone()[0]
        nodelist = hostlist.collect_hostlist([p["node"] for p in placed])
        conn.execute(
            "INSERT INTO steps(job_id, step, name, state, start_time, ntasks, ncpus, nodelist, pid) "
            "VALUES(?,?,?,?,?,?,?,?,?)",
            (job["id"], str(step_id), os.path.basename(argv[0]), "RUNNING", time.time(), ntasks,
             sum(p["cpus"] for p in placed), nodelist, os.getpid()),
        )
    step = {"id": step_id, "layout": placed, "ntasks": ntasks, "nodelist": nodelist, "cpus_per_task": req.cpus_per_task}
    port = random.randint(30000, 60000)
    slow = {p["node"]: float(db.get_meta(conn, f"slow:{p['node']}", "1") or 1) for p in placed}
    pids: list[tuple[int, str, int]] = []
    threads: dict[int, list[threading.Thread]] = {}  # each task's output relays
    proc_id = 0
    for index, part in enumerate(placed):
        for local in range(part["tasks"]):
            env = envvars.task_env(base_env, job, cluster, step, index, local, proc_id, port)
            fds, relays = (0, 1, 2), []
            if req.label or (ntasks > 1 and not req.unbuffered):
                fds, relays = _relay_pipes(proc_id, req.label)
            pid = procs.spawn(argv, env, os.getcwd(), fds, False, "SLURM_TASK_PID", f"slurmstepd-{part['node']}")
            for fd in set(fds[1:]):
                if fd > 2:
                    os.close(fd)
            threads[proc_id] = [threading.Thread(target=_relay, args=relay, daemon=True) for relay in relays]
            for thread in threads[proc_id]:
                thread.start()
            pids.append((pid, part["node"], proc_id))
            if slow[part["node"]] > 1:
                threading.Thread(target=_throttle, args=(pid, slow[part["node"]]), daemon=True).start()
            proc_id += 1
    return step, pids, threads


_print_lock = threading.Lock()
THROTTLE_PERIOD_S = 0.02


def _throttle(pid: int, factor: float) -> None:
    """A slow node, for real: the task's processes run 1/factor of the time (SIGSTOP/SIGCONT duty cycle)."""
    running = THROTTLE_PERIOD_S / factor
    while procs.alive(pid, None):
        time.sleep(running)
        tree = [*procs.descendants(pid)]
        try:
            tree.append(psutil.Process(pid))
        except psutil.Error:
            return
        procs.send(tree, signal.SIGSTOP)
        time.sleep(THROTTLE_PERIOD_S - running)
        procs.send(tree, signal.SIGCONT)


def _relay_pipes(task: int, label: bool) -> tuple[tuple[int, int, int], list[tuple]]:
    """A task's stdout and stderr through pipes that srun relays a whole line at a time, as slurmstepd
    does: the tasks of a step share srun's output, and their lines must not mix. With --label the
    lines are numbered and stderr goes with stdout."""
    out_r, out_w = os.pipe()
    prefix = f"{task}: ".encode() if label else b""
    if label:
        return (0, out_w, out_w), [(out_r, sys.stdout, prefix)]
    err_r, err_w = os.pipe()
    return (0, out_w, err_w), [(out_r, sys.stdout, prefix), (err_r, sys.stderr, prefix)]


def _drain(threads: dict[int, list[threading.Thread]], task: int) -> None:
    """Let a finished task's last lines through (a child it left behind may keep its pipe open)."""
    for thread in threads.get(task, []):
        thread.join(timeout=5)


def _relay(fd: int, target, prefix: bytes) -> None:
    with os.fdopen(fd, "rb") as stream:
        for line in stream:
            with _print_lock:
                target.buffer.write(prefix + line)
                target.flush()


def end_step(conn, job_id: int, step: dict, statuses: list[int]) -> int:
    """Report failed tasks like srun, record the step, and return srun's exit code."""
    codes = [os.WEXITSTATUS(s) if os.WIFEXITED(s) else 0 for s in statuses]
    sigs = [os.WTERMSIG(s) if os.WIFSIGNALED(s) else 0 for s in statuses]
    state = "COMPLETED" if not any(codes) and not any(sigs) else "FAILED"
    if any(sigs) and not any(codes):
        state = "CANCELLED" if signal.SIGTERM in sigs or signal.SIGKILL in sigs else "FAILED"
    with db.transaction(conn):
        conn.execute(
            "UPDATE steps SET state=?, end_time=?, exit_code=?, exit_signal=? WHERE job_id=? AND step=?",
            (state, time.time(), max(codes), max(sigs), job_id, str(step["id"])),
        )
    if any(codes):
        return max(codes)
    if any(sigs):
        return 128 + max(sigs)
    return 0


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name.replace("SIGKILL", "Killed").replace("SIGTERM", "Terminated")
    return f"Exited with exit code {os.WEXITSTATUS(status)}"


def main(argv: list[str]) -> int:
    try:
        req, rest = build_request("srun", argv)
        if not rest:
            print("srun: fatal: No command given to execute.", file=sys.stderr)
            return 1
        conn, cluster = open_cluster()
        if req.jobid is not None:  # a step in a job of one's own, e.g. to look at it while it runs
            job = db.get_job(conn, req.jobid)
            if job is None or job["state"] != "RUNNING":
                print(f"srun: error: Unable to confirm allocation for job {req.jobid}: Invalid job id specified\n"
                      f"srun: Check SLURM_JOB_ID environment variable. Expired or invalid job {req.jobid}",
                      file=sys.stderr)
                return 1
        else:
            job_id = os.environ.get("SLURM_JOB_ID")
            job = db.get_job(conn, int(job_id)) if job_id and job_id.isdigit() else None
        if job is not None and job["state"] == "RUNNING":
            return run_in_allocation(conn, cluster, job, req, rest)
        return run_with_allocation(req, rest)
    except (OptionError, UsageError, SubmitError) as err:
        return report("srun", err)
    except StepError as err:
        print(f"srun: error: {err}", file=sys.stderr)
        return 1


def run_in_allocation(conn, cluster, job, req, argv) -> int:
    """A job step: spawn the tasks, forward signals, wait, record."""
    inherited = os.environ.get("SLURM_NTASKS")
    step, pids, threads = start_step(conn, job, cluster, req, argv, dict(os.environ),
                                     int(inherited) if inherited and inherited.isdigit() else None)
    terminated = []

    def forward(sig, _frame) -> None:
        if sig == signal.SIGCONT:  # what Slurm 22.05's srun says when its job is cancelled or times out
            print("srun: got SIGCONT", file=sys.stderr, flush=True)
        elif sig == signal.SIGTERM and not terminated:
            terminated.append(sig)
            print("srun: forcing job termination", file=sys.stderr, flush=True)
        procs.send([p for p in procs.descendants() if p.pid in {t[0] for t in pids}], sig)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
        signal.signal(sig, forward)
    statuses = []
    for pid, node, task in pids:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        statuses.append(status)
        _drain(threads, task)
        if status:
            print(f"srun: error: {node}: task {task}: {_describe(status)}", file=sys.stderr)
    if any(os.WIFSIGNALED(s) for s in statuses) and not terminated:  # a task killed by a signal (as 22.05)
        print(f"srun: Force Terminated StepId={job['id']}.{step['id']}", file=sys.stderr)
    return end_step(conn, job["id"], step, statuses)


def run_with_allocation(req: JobRequest, argv: list[str]) -> int:
    """srun outside an allocation: allocate, run the step, release (job name = the program)."""
    step_req = JobRequest.from_json(req.to_json())
    conn, job = allocate("srun", req, req.name or os.path.basename(argv[0]))
    _, cluster = open_cluster()
    holder: dict = {}

    def start(sup) -> None:
        step, pids, threads = start_step(conn, job, cluster, step_req, argv, job["req"]["env"], None)
        holder.update(step=step, pids=pids, threads=threads)
        for pid, _, _ in pids:
            sup.mains[pid] = None

    outcome, sup = supervise(job, start)
    statuses = [sup.mains[pid] or 0 for pid, _, _ in holder.get("pids", [])]
    for (pid, node, task), status in zip(holder.get("pids", []), statuses):
        _drain(holder.get("threads", {}), task)
        if status:
            print(f"srun: error: {node}: task {task}: {_describe(status)}", file=sys.stderr)
    if "step" in holder and any(s and os.WIFSIGNALED(s) for s in statuses) and outcome.state != "TIMEOUT":
        print(f"srun: Force Terminated StepId={job['id']}.{holder['step']['id']}", file=sys.stderr)
    if outcome.state == "TIMEOUT":
        print(f"srun: error: *** STEP {job['id']}.0 ON {job['alloc'][0]['node']} CANCELLED AT "
              f"{time.strftime('%Y-%m-%dT%H:%M:%S')} DUE TO TIME LIMIT ***", file=sys.stderr)
    if "step" in holder:
        return end_step(conn, job["id"], holder["step"], statuses)
    return 1
