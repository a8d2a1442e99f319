"""srun: run parallel tasks — as a step inside an allocation, or with a fresh allocation of its own."""
from __future__ import annotations

import os
import random
import re
import signal
import sys
import threading
import time

import hostlist

from hpcnb.slurm.bounds import job_id_fits, saturated
from hpcnb.slurm.options import OptionError

from .. import apart, db, envvars, procs, transitions
from ..cluster import Cluster
from ..request import JobRequest, SubmitError, UsageError, parse_count
from ..submit import export_env, exports_all
from .common import open_cluster
from .options import build_request, report
from .squeue import MIN_JOB_AGE_S


class StepError(Exception):
    """srun cannot make the step: ``srun: error: ...`` (or ``srun: fatal: ...``), exit 1."""

    def __init__(self, message: str, level: str = "error") -> None:
        super().__init__(message)
        self.level = level


class NoAllocation(Exception):
    """The job that --jobid or SLURM_JOB_ID names has no allocation to run a step in."""

    def __init__(self, job_id: int, reason: str) -> None:
        super().__init__(reason)
        self.job_id = job_id


def existing_allocation(conn, job_id: int) -> dict:
    """The running job a step is for; else NoAllocation with srun 22.05's reason
    (existing_allocation() in src/srun/libsrun/allocate.c, job_alloc_info() in slurmctld)."""
    job = db.get_job(conn, job_id)
    if job is not None and job["state"] == "RUNNING":
        return job
    if job is None or (job["end_time"] and time.time() - job["end_time"] > MIN_JOB_AGE_S):  # purged
        raise NoAllocation(job_id, f"Unable to confirm allocation for job {job_id}: Invalid job id specified")
    if job["state"] == "PENDING":
        raise NoAllocation(job_id, f"Unable to confirm allocation for job {job_id}: Job is pending execution")
    raise NoAllocation(job_id, f"Slurm job {job_id} has expired")


def env_options(env: dict[str, str], cluster: Cluster) -> tuple[int | None, int | None]:
    """(--jobid, --kill-on-bad-exit) from SLURM_JOB_ID and SLURM_KILL_BAD_EXIT, checked as srun
    checks them: before the command line, which overrides them."""
    job_id, kill = env.get("SLURM_JOB_ID"), env.get("SLURM_KILL_BAD_EXIT")
    return (None if job_id is None else job_id_value(job_id, cluster),
            None if kill is None else parse_count(kill, "--kill-on-bad-exit", positive=False))


def job_id_value(text: str, cluster: Cluster) -> int:
    """A job id for --jobid/SLURM_JOB_ID: 22.05 refuses anything but a positive number; 24.11
    takes what is not one as job 0, which then has no allocation (both measured), and so an id
    past uint32 here."""
    if cluster.since("24.11"):
        number = saturated(text) if re.fullmatch("[0-9]+", text) else 0
        return number if job_id_fits(number) else 0
    return parse_count(text, "--jobid")


def inherit_cpus_per_task(req: JobRequest, env: dict[str, str], cluster: Cluster) -> None:
    """-c from srun's environment where the command line gives none. Every version reads
    SRUN_CPUS_PER_TASK; 24.11 (23.11+) reads the job's SLURM_CPUS_PER_TASK and SLURM_TRES_PER_TASK
    too (22.05-23.02 do not: there a step gets 1 CPU per task). Raises StepError as srun's fatal."""
    if req.cpus_per_task is not None:
        return
    found = {"SRUN_CPUS_PER_TASK": env.get("SRUN_CPUS_PER_TASK")}
    if cluster.since("24.11"):
        tres = env.get("SLURM_TRES_PER_TASK", "")
        found["SLURM_CPUS_PER_TASK"] = env.get("SLURM_CPUS_PER_TASK")
        found["SLURM_TRES_PER_TASK"] = tres.removeprefix("cpu=") if tres.startswith("cpu=") else None
        cpt, per_tres = found["SLURM_CPUS_PER_TASK"], found["SLURM_TRES_PER_TASK"]
        if cpt and per_tres and cpt != per_tres:
            raise StepError(f"cpus-per-task set by two different environment variables SLURM_CPUS_PER_TASK={cpt} "
                            f"!= SLURM_TRES_PER_TASK={tres}", "fatal")
    for name in ("SLURM_TRES_PER_TASK", "SLURM_CPUS_PER_TASK", "SRUN_CPUS_PER_TASK"):
        if found.get(name):
            req.cpus_per_task = parse_count(found[name], "--cpus-per-task")
            return


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
    nodes, wanted = _step_nodes(job, req)
    count = max(req.nodes_min or min(len(nodes), ntasks), wanted)
    if count > len(nodes):
        raise StepError(f"Unable to create step for job {job['id']}: Requested node configuration is not available")
    order = {p["node"]: i for i, p in enumerate(job["alloc"])}
    used = sorted(nodes[:count], key=lambda p: order[p["node"]])  # tasks in the job's node order
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


def _step_nodes(job: dict, req: JobRequest) -> tuple[list[dict], int]:
    """The job's nodes a step may use, those ``--nodelist`` names first (``--exclude``'s left out),
    and how many it names; srun's checks in its order (srun_job.c, measured on 22.05 and 24.11):
    a node both named and excluded, fewer nodes left than ``-N`` asks, then the controller's for a
    named node outside the job."""
    try:
        named = hostlist.expand_hostlist(req.nodelist) if req.nodelist else []
        left_out = hostlist.expand_hostlist(req.exclude) if req.exclude else []
    except hostlist.BadHostlist:
        named, left_out = ["?"], []  # as an unknown node
    for node in left_out:
        if node in named:
            raise StepError(f"Requested node {node} is also in the excluded list.\nJob not submitted.")
    usable = [p for p in job["alloc"] if p["node"] not in left_out]
    if req.nodes_min and req.nodes_min > len(usable):
        raise StepError(f"Only allocated {len(usable)} nodes asked for {req.nodes_min}"
                        + ("\nAre required nodes explicitly excluded?" if left_out else ""))
    if not set(named) <= {p["node"] for p in job["alloc"]}:
        raise StepError(f"Unable to create step for job {job['id']}: Requested node configuration is not available")
    return sorted(usable, key=lambda p: p["node"] not in named), len(set(named))


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
        transitions.start_step(conn, job["id"], str(step_id), os.path.basename(argv[0]), time.time(), ntasks=ntasks,
                               ncpus=sum(p["cpus"] for p in placed), nodelist=nodelist, pid=os.getpid())
    # 24.11: when -c alone set the task count, srun reports a block distribution
    by_cpus = bool(req.cpus_per_task and not (req.ntasks or req.ntasks_per_node or inherited_ntasks))
    step = {"id": step_id, "layout": placed, "ntasks": ntasks, "nodelist": nodelist, "cpus_per_task": req.cpus_per_task,
            "block": by_cpus and cluster.since("24.11"), "exports_all": exports_all(req.export)}
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
            command = [task_program(argv[0], env, os.getcwd()), *argv[1:]]
            pid = procs.spawn(command, env, os.getcwd(), fds, False, "SLURM_TASK_PID", f"slurmstepd-{part['node']}",
                              search=False, view=apart.view_for(job, part["node"], cluster))
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


def task_program(name: str, env: dict[str, str], cwd: str) -> str:
    """The program a task runs, found as slurmstepd 22.05 finds it (_build_path): an absolute path
    as it is, ``./x`` from the working directory, anything else on the task's own PATH (which
    --export may have left out); not found, the name as it is (execve then says why)."""
    if name.startswith("/"):
        return name
    if name.startswith("."):
        return os.path.join(cwd, name)
    for folder in filter(None, env.get("PATH", "").split(":")):
        path = os.path.join(folder, name)
        if os.path.exists(path) and not os.path.isdir(path):
            return path
    return name


_print_lock = threading.Lock()
THROTTLE_PERIOD_S = 0.02


def _throttle(pid: int, factor: float) -> None:
    """A slow node, for real: the task's processes run 1/factor of the time (SIGSTOP/SIGCONT duty cycle)."""
    running = THROTTLE_PERIOD_S / factor
    while procs.alive(pid, None):
        time.sleep(running)
        tree = [*procs.descendants(pid)]
        try:
            tree.append(procs.psutil.Process(pid))
        except procs.psutil.Error:
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


def _say(*lines: str) -> None:
    """Diagnostic lines to stderr, each with one write(2) as srun's log does: a line is never split,
    whatever else prints meanwhile (a relayed task line, another thread's line, -u's unbuffered stderr)."""
    with _print_lock:
        sys.stderr.flush()
        for line in lines:
            data = (line + "\n").encode(errors="replace")
            while data:
                data = data[os.write(2, data):]


def _relay(fd: int, target, prefix: bytes) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, SignalThread.FORWARDED)  # srun's signal thread takes them
    with os.fdopen(fd, "rb") as stream:
        for line in stream:
            with _print_lock:
                target.buffer.write(prefix + line)
                target.flush()


def end_step(conn, job_id: int, step: dict, statuses: list[int]) -> int:
    """Record the step as slurmctld does and return srun's exit code."""
    status = step_status(step, statuses)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    state = "CANCELLED" if sig else "FAILED" if code else "COMPLETED"  # as as_mysql_step_complete()
    with db.transaction(conn):
        transitions.end_step(conn, job_id, str(step["id"]), time.time(), state, exit_code=code, exit_signal=sig)
    return exit_code(statuses)


def step_status(step: dict, statuses: list[int]) -> int:
    """The step's wait status: each node's slurmstepd reports its first task (in task order) killed
    by a signal, else its highest status (_get_exit_code() in mgr.c); slurmctld keeps the highest."""
    out, first = 0, 0
    for part in step["layout"]:
        mine = statuses[first:first + part["tasks"]]
        first += part["tasks"]
        killed = [s for s in mine if os.WIFSIGNALED(s)]
        out = max(out, killed[0] if killed else max(mine, default=0))
    return out


def srun_status(statuses: list[int]) -> int:
    """srun's own wait status: the highest signal that killed a task wins over any exit code, else
    the highest exit code (_task_finish() in launch_slurm.c)."""
    killed = [s for s in statuses if os.WIFSIGNALED(s)]
    if killed:
        return max(killed, key=os.WTERMSIG)
    return max(statuses, key=lambda s: os.WEXITSTATUS(s) if os.WIFEXITED(s) else 0, default=0)


def exit_code(statuses: list[int]) -> int:
    """srun's exit code: its status as a shell gives it (fini_srun(): 128 + signal)."""
    status = srun_status(statuses)
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _describe(status: int) -> str:
    """How srun words a task's end: strsignal() and "(core dumped)", or the exit code (launch_slurm.c)."""
    if os.WIFSIGNALED(status):
        return f"{signal.strsignal(os.WTERMSIG(status))}{' (core dumped)' if os.WCOREDUMP(status) else ''}"
    return f"Exited with exit code {os.WEXITSTATUS(status)}"


def main(argv: list[str]) -> int:
    try:
        conn, cluster = open_cluster()
        env_jobid, env_kill = env_options(dict(os.environ), cluster)
        req, rest = build_request("srun", argv)
        if req.jobid_text is not None:
            req.jobid = job_id_value(req.jobid_text, cluster)
        if not rest:
            print("srun: fatal: No command given to execute.", file=sys.stderr)
            return 1
        req.jobid = env_jobid if req.jobid is None else req.jobid
        if req.export is None:  # as --export, which wins over it
            req.export = os.environ.get("SLURM_EXPORT_ENV")
        req.kill_on_bad_exit = env_kill if req.kill_on_bad_exit is None else req.kill_on_bad_exit
        inherit_cpus_per_task(req, dict(os.environ), cluster)
        if req.jobid is None:
            return run_with_allocation(req, rest)
        # a step in a job that runs (the batch job, salloc's, --jobid's)
        return run_in_allocation(conn, cluster, existing_allocation(conn, req.jobid), req, rest)
    except (OptionError, UsageError, SubmitError) as err:
        return report("srun", err)
    except NoAllocation as err:
        print(f"srun: error: {err}\nsrun: Check SLURM_JOB_ID environment variable. Expired or invalid job "
              f"{err.job_id}", file=sys.stderr)
        return 1
    except StepError as err:
        _say(*(f"srun: {err.level}: {line}" for line in str(err).splitlines()))
        return 1


def run_in_allocation(conn, cluster, job, req, argv) -> int:
    """A job step: spawn the tasks, forward signals, wait, record."""
    inherited = os.environ.get("SLURM_NTASKS")
    step, pids, threads = start_step(conn, job, cluster, req, argv, export_env(req.export, dict(os.environ)),
                                     int(inherited) if inherited and inherited.isdigit() else None)
    signals = SignalThread({t[0] for t in pids}).start()
    killer = KillOnBadExit(job["id"], step, cluster, bool(req.kill_on_bad_exit))
    statuses = _wait_tasks(pids, threads, killer)
    signals.stop()
    if _force_terminated(statuses) and not signals.forced:
        _say(f"srun: Force Terminated StepId={job['id']}.{step['id']}")
    return end_step(conn, job["id"], step, statuses)


class SignalThread:
    """srun's signal thread: the signals srun forwards are blocked in every other thread, and this one
    takes them with sigwait(), says what srun says of each and forwards it to the step's tasks, as
    Slurm's srun does. Nothing runs in a signal handler: a handler that ran while another's line
    was half written used to split it, and one caught by a thread other than the main one waited
    for the main thread to leave waitpid() (the task's end) before it forwarded anything."""

    FORWARDED = {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT}
    WAKE = signal.SIGRTMIN  # sent by stop() to this thread alone

    def __init__(self, task_pids: set[int]) -> None:
        self.task_pids = task_pids
        self.forced = False  # "forcing job termination" was said (the first SIGTERM)
        self._thread = threading.Thread(target=self._run, name="srun signals", daemon=True)

    def start(self) -> "SignalThread":
        """Block the signals in this thread (every later thread inherits it) and start taking them."""
        signal.pthread_sigmask(signal.SIG_BLOCK, self.FORWARDED | {self.WAKE})
        self._thread.start()
        return self

    def stop(self) -> None:
        """The tasks have ended: leave (a signal that comes later stays blocked, srun is ending)."""
        signal.pthread_kill(self._thread.ident, self.WAKE)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            sig = signal.sigwait(self.FORWARDED | {self.WAKE})
            # Linux hands out pending signals lowest number first: a SIGTERM sent after a SIGCONT (the
            # order in which a job is ended), both waiting on a busy machine, would be taken first
            if sig != signal.SIGCONT and signal.SIGCONT in signal.sigpending():
                self._take(signal.sigwait({signal.SIGCONT}))
            if sig == self.WAKE:
                self._take_pending()
                return
            self._take(sig)

    def _take_pending(self) -> None:
        """Take what was sent to srun before its tasks ended. WAKE is sent to this thread alone, and
        Linux hands out a thread's own signals before the process's: a SIGTERM that came with the
        job's cancel, still pending on a busy machine, was dropped, and srun said "Force Terminated"
        where Slurm's srun, its signal thread always awake, says "forcing job termination"."""
        for sig in sorted(signal.sigpending() & self.FORWARDED, key=lambda s: s != signal.SIGCONT):
            self._take(signal.sigwait({sig}))

    def _take(self, sig: int) -> None:
        if sig == signal.SIGCONT:  # what Slurm 22.05's srun says when its job is cancelled or times out
            _say("srun: got SIGCONT")
        elif sig == signal.SIGTERM and not self.forced:
            self.forced = True
            _say("srun: forcing job termination")
        procs.send([p for p in procs.descendants() if p.pid in self.task_pids], sig)


class KillOnBadExit:
    """srun -K: the first task to fail (non-zero exit or a signal) ends the whole step, as in
    _task_finish() of Slurm 22.05's launch_slurm.c: srun says "Terminating StepId=...", the step's
    slurmstepd (if its node still runs tasks) prints its CANCELLED line and sends every task
    SIGCONT and SIGTERM, then SIGKILL after KillWait (req.c, _handle_signal_container)."""

    def __init__(self, job_id: int, step: dict, cluster: Cluster, enabled: bool) -> None:
        self.step_id = f"{job_id}.{step['id']}"
        # 22.05's srun logs it from the launch plugin, with its prefix; 24.11's plainly
        self.says = "srun: " if cluster.since("24.11") else "srun: launch/slurm: _step_signal: "
        self.first_node = step["layout"][0]["node"]
        self.kill_wait = cluster.kill_wait_s
        self.enabled = enabled
        self.fired = False

    def task_ended(self, status: int, busy_nodes: set[str]) -> None:
        """A task ended with ``status``; ``busy_nodes`` still run tasks of the step."""
        if not self.enabled or self.fired or not status:
            return
        self.fired = True
        # info() in the launch/slurm plugin: its log prefix names plugin and function
        lines = [f"{self.says}Terminating StepId={self.step_id}"]
        if self.first_node in busy_nodes:
            lines.append(f"slurmstepd-{self.first_node}: error: *** STEP {self.step_id} ON {self.first_node} "
                         f"CANCELLED AT {time.strftime('%Y-%m-%dT%H:%M:%S')} ***")
        _say(*lines)
        threading.Thread(target=self._terminate, daemon=True).start()

    def _terminate(self) -> None:
        tasks = procs.descendants()
        procs.send(tasks, signal.SIGCONT)
        procs.send(tasks, signal.SIGTERM)
        time.sleep(self.kill_wait)
        procs.send(procs.descendants(), signal.SIGKILL)


def _wait_tasks(pids: list[tuple[int, str, int]], threads: dict[int, list[threading.Thread]],
                killer: KillOnBadExit) -> list[int]:
    """Wait for the tasks in the order they end, reporting each failed one as srun does;
    returns their wait statuses in task order."""
    running = {pid: (node, task) for pid, node, task in pids}
    ended: dict[int, int] = {}
    while running:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:  # lost track of them (should not happen): count them as ended
            ended.update({pid: 0 for pid in running})
            break
        if pid not in running:
            continue
        node, task = running.pop(pid)
        ended[pid] = status
        _drain(threads, task)
        _report(node, task, status)
        killer.task_ended(status, {n for n, _ in running.values()})
    return [ended[pid] for pid, _, _ in pids]


def _report(node: str, task: int, status: int) -> None:
    if status:
        _say(f"srun: error: {node}: task {task}: {_describe(status)}")


def _force_terminated(statuses: list[int | None]) -> bool:
    """Did a task die of SIGTERM or SIGKILL? Then srun says "Force Terminated" (step_launch.c)."""
    return any(s and os.WIFSIGNALED(s) and os.WTERMSIG(s) in (signal.SIGTERM, signal.SIGKILL) for s in statuses)


def _watch_tasks(sup, pids: list[tuple[int, str, int]], threads: dict[int, list[threading.Thread]],
                 killer: KillOnBadExit) -> None:
    """A stand-alone srun's tasks are reaped by its supervisor: report each as it ends, and let -K act."""
    left = {pid: (node, task) for pid, node, task in pids}
    while left:
        for pid in [p for p in left if sup.mains.get(p) is not None]:
            node, task = left.pop(pid)
            _drain(threads, task)
            _report(node, task, sup.mains[pid])
            killer.task_ended(sup.mains[pid], {n for p, (n, _) in left.items() if sup.mains.get(p) is None})
        time.sleep(0.02)


def run_with_allocation(req: JobRequest, argv: list[str]) -> int:
    """srun outside an allocation: allocate, then hand it to its supervisor, which runs the step
    (:func:`granted`) and releases it (job name = the program)."""
    from .interactive import allocate, hand_over

    step_req = JobRequest.from_dict(req.to_dict())
    _, job = allocate("srun", req, req.name or os.path.basename(argv[0]))
    hand_over("srun", {"job": job["id"], "request": step_req.to_dict(), "argv": argv})


def granted(handoff: dict, supervise) -> int:
    """In the allocation's supervisor (:mod:`hpcnb.localslurm.allocation`): run the step, release."""
    conn, cluster = open_cluster()
    job = db.get_job(conn, handoff["job"])
    step_req, argv = JobRequest.from_dict(handoff["request"]), handoff["argv"]
    holder: dict = {}

    def start(sup) -> None:
        step, pids, threads = start_step(conn, job, cluster, step_req, argv, job["req"]["env"], None)
        holder.update(step=step, pids=pids, threads=threads)
        for pid, _, _ in pids:
            sup.mains[pid] = None
        killer = KillOnBadExit(job["id"], step, cluster, bool(step_req.kill_on_bad_exit))
        holder["watcher"] = threading.Thread(target=_watch_tasks, args=(sup, pids, threads, killer), daemon=True)
        holder["watcher"].start()

    outcome, sup = supervise(job, start)
    if "watcher" in holder:
        holder["watcher"].join()  # every task has ended: it reports the last ones and stops
    statuses = [sup.mains[pid] or 0 for pid, _, _ in holder.get("pids", [])]
    if "step" in holder and _force_terminated(statuses) and outcome.state != "TIMEOUT":
        _say(f"srun: Force Terminated StepId={job['id']}.{holder['step']['id']}")
    if outcome.state == "TIMEOUT":
        _say(f"srun: error: *** STEP {job['id']}.0 ON {job['alloc'][0]['node']} CANCELLED AT "
             f"{time.strftime('%Y-%m-%dT%H:%M:%S')} DUE TO TIME LIMIT ***")
    if "step" not in holder:
        return 1
    if outcome.state == "FAILED":  # srun ends its job with its own status: slurm_complete_job(job, global_rc)
        status = srun_status(statuses)
        with db.transaction(conn):
            conn.execute("UPDATE jobs SET exit_code=?, exit_signal=? WHERE id=? AND state='FAILED'",
                         (os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0,
                          os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0, job["id"]))
    return end_step(conn, job["id"], holder["step"], statuses)
