"""The SLURM_* environment, in Slurm's three layers: batch shell, srun task, salloc shell.

Which variables appear, and when, follows captures from a real Slurm 22.05.8 and 24.11.5 (see
tests/fixtures/captures-*); the cluster's ``slurm_version`` picks which.
"""
from __future__ import annotations

import grp
import os
import pwd
from typing import Any

import hostlist

from hpcnb.slurm.counts import compress_counts

from . import paths
from .cluster import Cluster

GPU_VARS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
# 24.11 (23.11+): every layer tells MPI launchers to start their daemons with srun --external-launcher
MPI_LAUNCHER_VARS = {
    "HYDRA_BOOTSTRAP": "slurm",
    "HYDRA_LAUNCHER_EXTRA_ARGS": "--external-launcher",
    "I_MPI_HYDRA_BOOTSTRAP": "slurm",
    "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "--external-launcher",
    "OMPI_MCA_plm_slurm_args": "--external-launcher",
    "PRTE_MCA_plm_slurm_args": "--external-launcher",
}
UNLIMITED_END_S = 365 * 86400  # SLURM_JOB_END_TIME of a job without a time limit: a year after its start


def slurm_conf_path() -> str:
    return str(paths.state_dir() / "slurm.conf")


def job_vars(job: dict[str, Any], cluster: Cluster, layer: str = "salloc") -> dict[str, str]:
    """The job-wide variables a layer is given: ``salloc`` (its shell sees exactly these),
    ``batch`` (sbatch's, before slurmd adds the node's) or ``srun`` (what srun itself sets for a step).

    As with Slurm 22.05: SLURM_NODE_ALIASES and SLURM_GPUS_PER_NODE come from sbatch/salloc only
    (srun sets neither); salloc exports SLURM_MEM_PER_* only for an explicit --mem/--mem-per-cpu
    (the batch shell always gets one: see batch_env); srun sets the step's task counts itself.
    24.11 drops SLURM_NODE_ALIASES and adds SLURM_TRES_PER_TASK (with -c), the MPI launcher
    variables, and (not in salloc's shell) the job's start and end times.
    """
    req = job["req"]
    nodes = [p["node"] for p in job["alloc"]]
    nodelist = hostlist.collect_hostlist(nodes)
    env = {
        "SLURM_CLUSTER_NAME": cluster.name,
        "SLURM_CONF": slurm_conf_path(),
        "SLURM_JOBID": str(job["id"]),
        "SLURM_JOB_ID": str(job["id"]),
        "SLURM_JOB_ACCOUNT": job["account"] or job["user"],
        "SLURM_JOB_CPUS_PER_NODE": compress_counts([p["cpus"] for p in job["alloc"]]),
        "SLURM_JOB_NAME": job["name"],
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_JOB_PARTITION": job["partition"],
        "SLURM_JOB_QOS": "normal",
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_NODELIST": nodelist,
        "SLURM_SUBMIT_DIR": req["submit_dir"],
        "SLURM_SUBMIT_HOST": req["submit_host"],
        "SLURM_TASKS_PER_NODE": compress_counts([p["tasks"] for p in job["alloc"]]),
    }
    if cluster.since("24.11"):
        env.update(MPI_LAUNCHER_VARS)
        if req["cpus_per_task"]:
            env["SLURM_TRES_PER_TASK"] = f"cpu={req['cpus_per_task']}"
        if layer != "salloc" and job["start_time"]:
            start = int(job["start_time"])
            env["SLURM_JOB_START_TIME"] = str(start)
            env["SLURM_JOB_END_TIME"] = str(start + (job["time_limit"] or UNLIMITED_END_S))
    elif layer != "srun":
        env["SLURM_NODE_ALIASES"] = "(null)"
    if req["ntasks"] or req["ntasks_per_node"]:
        ntasks = str(sum(p["tasks"] for p in job["alloc"]))
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = ntasks
    if req["ntasks_per_node"]:
        env["SLURM_NTASKS_PER_NODE"] = str(req["ntasks_per_node"])
    if req["cpus_per_task"]:
        env["SLURM_CPUS_PER_TASK"] = str(req["cpus_per_task"])
    if layer != "srun" and "gpus-per-node" in req["given"] and req["gpus_per_node"]:
        env["SLURM_GPUS_PER_NODE"] = str(req["gpus_per_node"])
    if layer == "salloc":
        if req["mem_mb"] is not None:
            env["SLURM_MEM_PER_NODE"] = str(req["mem_mb"])
        elif req["mem_per_cpu_mb"]:
            env["SLURM_MEM_PER_CPU"] = str(req["mem_per_cpu_mb"])
    if job["restart_count"]:
        env["SLURM_RESTART_COUNT"] = str(job["restart_count"])
    if job["array_job_id"] is not None:
        env.update(array_vars(job))
    return env


def array_vars(job: dict[str, Any]) -> dict[str, str]:
    ids = job["req"]["array_ids"]
    step = ids[1] - ids[0] if len(ids) > 1 and all(b - a == ids[1] - ids[0] for a, b in zip(ids, ids[1:])) else 1
    return {
        "SLURM_ARRAY_JOB_ID": str(job["array_job_id"]),
        "SLURM_ARRAY_TASK_COUNT": str(len(ids)),
        "SLURM_ARRAY_TASK_ID": str(job["array_task_id"]),
        "SLURM_ARRAY_TASK_MAX": str(max(ids)),
        "SLURM_ARRAY_TASK_MIN": str(min(ids)),
        "SLURM_ARRAY_TASK_STEP": str(step),
    }


def _mem_vars(job: dict[str, Any], cluster: Cluster) -> dict[str, str]:
    req = job["req"]
    if req["mem_mb"] is not None:
        return {"SLURM_MEM_PER_NODE": str(req["mem_mb"])}
    return {"SLURM_MEM_PER_CPU": str(req["mem_per_cpu_mb"] or cluster.def_mem_per_cpu_mb)}


def _user_vars(job: dict[str, Any]) -> dict[str, str]:
    return {
        "SLURM_JOB_UID": str(job["uid"]),
        "SLURM_JOB_GID": str(pwd.getpwuid(job["uid"]).pw_gid if _has_user(job["uid"]) else os.getgid()),
        "SLURM_JOB_USER": job["user"],
        "SLURM_PRIO_PROCESS": str(job["req"].get("nice", 0)),  # the submitter's nice value
    }


def _has_user(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def node_vars(job: dict[str, Any], cluster: Cluster, part: dict[str, Any], gpus: list[int],
              cpus: int | None = None) -> dict[str, str]:
    """What slurmd/slurmstepd add on a compute node: node name, CPUs there, GPUs, SLURM_TMPDIR.

    ``gpus`` are the GPUs of this step (or of the batch step) on the node; ``cpus`` the CPUs the
    step may use there (default: all the job's CPUs on the node).
    """
    node = part["node"]
    env = {
        "SLURMD_NODENAME": node,
        "SLURM_CPUS_ON_NODE": str(part["cpus"] if cpus is None else cpus),
        "SLURM_TOPOLOGY_ADDR": node,
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        **_user_vars(job),
    }
    if cluster.since("24.11"):
        env["SLURM_OOM_KILL_STEP"] = "0"
    else:
        env["SLURM_WORKING_CLUSTER"] = f"{cluster.name}:localhost:6817:9728:109"
    if gpus:
        ids = ",".join(map(str, gpus))
        env.update({name: ids for name in GPU_VARS})
        env["SLURM_GPUS_ON_NODE"] = str(len(gpus))
    if cluster.slurm_tmpdir:
        env["SLURM_TMPDIR"] = str(paths.node_tmpdir(job["id"], node))
    return env


def submit_host() -> str:
    return os.uname().nodename  # gethostname(2), without importing socket


_LOGIN_DROP = ("_", "PWD", "OLDPWD")
#: The local Slurm's own settings (its state, its nodes' scratch, its command folder, its site
#: profile, its controller's timings). They stand for the cluster's configuration, which a real
#: slurmd reads from slurm.conf whatever a job's --export says: every job keeps them.
LOCAL_SETTINGS = ("HPCNB_STATE_DIR", "HPCNB_NODE_TMP", "HPCNB_BIN_DIR", "HPCNB_PROFILE", "HPCNB_FIRST_JOB_ID",
                  "HPCNB_CONTROLLER_IDLE", "HPCNB_LAUNCH_GRACE", "HPCNB_ENV_KEPT_AFTER_END", "HPCNB_NODES")


def _login_defs(key: str) -> str | None:
    try:
        with open("/etc/login.defs") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return parts[1].removeprefix("PATH=")
    except OSError:
        pass
    return None


def login_env(uid: int) -> dict[str, str]:
    """The user's login environment, as slurmd loads it for ``--export=NONE`` (``su - user``)."""
    import subprocess

    try:
        pw = pwd.getpwuid(uid)
        user, home, shell = pw.pw_name, pw.pw_dir, pw.pw_shell or "/bin/sh"
    except KeyError:
        user, home, shell = os.environ.get("USER", str(uid)), os.environ.get("HOME", "/"), "/bin/sh"
    default = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" if uid == 0 else \
        "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
    start = {"HOME": home, "SHELL": shell, "USER": user, "LOGNAME": user, "MAIL": f"/var/mail/{user}",
             "PATH": _login_defs("ENV_SUPATH" if uid == 0 else "ENV_PATH") or default}
    try:
        out = subprocess.run([shell, "-l", "-c", "env -0; exit 0"], env=start, cwd=home if os.path.isdir(home) else "/",
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return start
    env = dict(start)
    for item in out.decode(errors="replace").split("\0"):
        key, eq, value = item.partition("=")
        if eq and key not in _LOGIN_DROP:
            env[key] = value
    return env


def _with_login_env(job: dict[str, Any], base: dict[str, str]) -> dict[str, str]:
    """SLURM_GET_USER_ENV=1 (sbatch --export=<anything but ALL>, --get-user-env): as slurmd, the
    user's login environment with the submitted one over it."""
    return {**login_env(job["uid"]), **base}


_COMMANDS_FOLDER: list[str] = []  # found once per process; forked supervisors inherit it


def local_commands_folder() -> str:
    """The folder of the local Slurm's commands (:func:`hpcnb.backend.local_bin_dir`, which checks
    and rewrites every command: some milliseconds), found once per process while its srun is there.
    The controller finds it as it starts, so that its supervisors never pay for it."""
    if not _COMMANDS_FOLDER or not os.path.exists(os.path.join(_COMMANDS_FOLDER[0], "srun")):
        from hpcnb.backend import local_bin_dir

        _COMMANDS_FOLDER[:] = [str(local_bin_dir())]
    return _COMMANDS_FOLDER[0]


def _with_local_commands(env: dict[str, str]) -> None:
    """The local Slurm's commands on the job's PATH, first, as a cluster's srun is on every login
    PATH: a job whose PATH is the login one (--export=NONE) or one without them runs our srun,
    never another Slurm's that this machine may also have."""
    folder = local_commands_folder()
    path = env.get("PATH")
    if path is not None and folder not in path.split(os.pathsep):
        env["PATH"] = f"{folder}{os.pathsep}{path}" if path else folder


def batch_env(job: dict[str, Any], cluster: Cluster, base: dict[str, str]) -> dict[str, str]:
    """The batch shell's environment: the submit environment plus job and node variables."""
    part = job["alloc"][0]
    env = _with_login_env(job, base) if base.get("SLURM_GET_USER_ENV") == "1" else dict(base)
    _with_local_commands(env)
    for name in (*GPU_VARS, "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"):
        env.pop(name, None)
    env.update(job_vars(job, cluster, "batch"))
    env.update(node_vars(job, cluster, part, part["gpus"]))
    env.update(_mem_vars(job, cluster))
    if part["gpus"]:
        env["SLURM_JOB_GPUS"] = ",".join(map(str, part["gpus"]))  # the batch step's only: steps inherit it
    env.update(
        {
            "ENVIRONMENT": "BATCH",
            "HOSTNAME": part["node"],
            "SLURM_GTIDS": "0",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "0",
            "SLURM_PROCID": "0",
        }
    )
    env.setdefault("TMPDIR", "/tmp")
    return env


def task_env(
    base: dict[str, str],
    job: dict[str, Any],
    cluster: Cluster,
    step: dict[str, Any],
    node_index: int,
    local_id: int,
    proc_id: int,
    launcher_port: int,
) -> dict[str, str]:
    """One srun task's environment. ``step`` holds the step layout (see commands.srun).

    ``base`` is srun's own environment: inside an allocation (a batch shell, a salloc shell) it
    carries the allocation's variables, which the task inherits; a stand-alone srun sets fewer
    (no SLURM_NODE_ALIASES, SLURM_MEM_PER_*, SLURM_JOB_GPUS, SLURM_GPUS_PER_NODE,
    SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0, and SLURM_DISTRIBUTION only with a memory option),
    as Slurm 22.05's srun does. 24.11's srun adds SLURMD_DEBUG, SLURM_TRES_PER_TASK (the step's -c),
    and for a stand-alone srun SLURM_JOB_GROUP and its own memory and --gpus-per-node requests;
    it drops SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0.
    """
    part = step["layout"][node_index]
    layout = step["layout"]
    in_allocation = base.get("SLURM_JOB_ID") == str(job["id"])
    req = job["req"]
    env = dict(base)
    gpus = part["alloc"]["gpus"]
    if not gpus:  # a step without GPUs on this node does not see the job's
        for name in (*GPU_VARS, "SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS"):
            env.pop(name, None)
    env.update(job_vars(job, cluster, "srun"))
    # without -c a step may use every CPU the job has on the node (22.05's default, no --exact)
    cpus = part["cpus"] if step.get("cpus_per_task") else part["alloc"]["cpus"]
    env.update(node_vars(job, cluster, part["alloc"], gpus, cpus))
    env["SLURM_PRIO_PROCESS"] = str(_srun_nice(job))
    first = sum(p["tasks"] for p in layout[:node_index])
    ntasks = step["ntasks"]
    from . import network

    launcher = network.launch_address(os.uname().nodename)  # srun's node (the login node's name is none)
    env.update(
        {
            "SLURM_PROCID": str(proc_id),
            "SLURM_LOCALID": str(local_id),
            "SLURM_NODEID": str(node_index),
            "SLURM_GTIDS": ",".join(str(first + i) for i in range(part["tasks"])),
            "SLURM_NNODES": str(len(layout)),
            "SLURM_NTASKS": str(ntasks),
            "SLURM_NPROCS": str(ntasks),
            "SLURM_TASKS_PER_NODE": compress_counts([p["tasks"] for p in layout]),
            "SLURM_STEPID": str(step["id"]),
            "SLURM_STEP_ID": str(step["id"]),
            "SLURM_STEP_NODELIST": step["nodelist"],
            "SLURM_STEP_NUM_NODES": str(len(layout)),
            "SLURM_STEP_NUM_TASKS": str(ntasks),
            "SLURM_STEP_TASKS_PER_NODE": compress_counts([p["tasks"] for p in layout]),
            "SLURM_STEP_LAUNCHER_PORT": str(launcher_port),
            "SLURM_SRUN_COMM_HOST": launcher,
            "SLURM_SRUN_COMM_PORT": str(launcher_port),
            "SLURM_LAUNCH_NODE_IPADDR": launcher,
            "SLURM_UMASK": _umask(),
        }
    )
    if step.get("exports_all", True):  # srun's own setting, in its environment: only --export=ALL passes it
        env["SRUN_DEBUG"] = "3"
    else:  # so do 24.11's launcher hints (measured: absent from an --export=<names> step)
        for name in MPI_LAUNCHER_VARS:
            if name not in base:
                env.pop(name, None)
    # srun picks cyclic when there are no more tasks than nodes, block otherwise (24.11: block too when
    # -c alone set the task count); a stand-alone srun exports it only when given a memory option
    if in_allocation or req.get("mem_mb") is not None or req.get("mem_per_cpu_mb"):
        env["SLURM_DISTRIBUTION"] = "cyclic" if ntasks <= len(layout) and not step.get("block") else "block"
    if gpus:
        env["SLURM_STEP_GPUS"] = ",".join(map(str, gpus))
    if step.get("cpus_per_task"):
        env["SLURM_CPUS_PER_TASK"] = str(step["cpus_per_task"])
    if cluster.since("24.11"):
        if not step.get("cpus_per_task"):
            env.pop("SLURM_TRES_PER_TASK", None)
        env.update(_srun_2411_vars(job, step, in_allocation))
    elif in_allocation:
        env["SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0"] = compress_counts([p["cpus"] for p in job["alloc"]])
    if local_id == 0:
        env.setdefault("TMPDIR", "/tmp")  # Slurm 22.05 quirk: only the first task per node gets it
    return env


def _srun_nice(job: dict[str, Any]) -> int:
    """A step's SLURM_PRIO_PROCESS: srun's own nice value. A real batch job runs at its slurmd's nice
    (0), the local one at its submitter's: that much is taken off inside a batch job."""
    base = job["req"].get("nice", 0) if job["kind"] == "batch" else 0
    return os.getpriority(os.PRIO_PROCESS, 0) - base


def _srun_2411_vars(job: dict[str, Any], step: dict[str, Any], in_allocation: bool) -> dict[str, str]:
    """What 24.11's srun adds to a task's environment (see task_env)."""
    env = {"SLURMD_DEBUG": "2"}
    if step.get("cpus_per_task"):
        env["SLURM_TRES_PER_TASK"] = f"cpu={step['cpus_per_task']}"
    if not in_allocation:
        req = job["req"]
        env["SLURM_JOB_GROUP"] = _group_name(int(_user_vars(job)["SLURM_JOB_GID"]))
        if "gpus-per-node" in req["given"] and req["gpus_per_node"]:
            env["SLURM_GPUS_PER_NODE"] = str(req["gpus_per_node"])
        if req["mem_mb"] is not None:
            env["SLURM_MEM_PER_NODE"] = str(req["mem_mb"])
        elif req["mem_per_cpu_mb"]:
            env["SLURM_MEM_PER_CPU"] = str(req["mem_per_cpu_mb"])
    return env


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _umask() -> str:
    mask = os.umask(0)
    os.umask(mask)
    return f"{mask:04o}"
