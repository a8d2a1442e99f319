"""The SLURM_* environment, in Slurm 22.05's three layers: batch shell, srun task, salloc shell.

Which variables appear, and when, follows captures from a real Slurm 22.05.8 (see tests/fixtures).
"""
from __future__ import annotations

import os
import pwd
import socket
from typing import Any

import hostlist

from . import paths
from .cluster import Cluster

GPU_VARS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")


def compress_counts(counts: list[int]) -> str:
    """[2, 2, 1] -> ``2(x2),1`` (Slurm's SLURM_TASKS_PER_NODE style)."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        run = j - i + 1
        out.append(f"{counts[i]}(x{run})" if run > 1 else str(counts[i]))
        i = j + 1
    return ",".join(out)


def slurm_conf_path() -> str:
    return str(paths.state_dir() / "slurm.conf")


def job_vars(job: dict[str, Any], cluster: Cluster) -> dict[str, str]:
    """Variables every layer of a job sees (the salloc shell sees exactly these)."""
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
        "SLURM_NODE_ALIASES": "(null)",
        "SLURM_SUBMIT_DIR": req["submit_dir"],
        "SLURM_SUBMIT_HOST": req["submit_host"],
        "SLURM_TASKS_PER_NODE": compress_counts([p["tasks"] for p in job["alloc"]]),
    }
    if req["ntasks"] or req["ntasks_per_node"]:
        ntasks = str(sum(p["tasks"] for p in job["alloc"]))
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = ntasks
    if req["ntasks_per_node"]:
        env["SLURM_NTASKS_PER_NODE"] = str(req["ntasks_per_node"])
    if req["cpus_per_task"]:
        env["SLURM_CPUS_PER_TASK"] = str(req["cpus_per_task"])
    if "gpus-per-node" in req["given"] and req["gpus_per_node"]:
        env["SLURM_GPUS_PER_NODE"] = str(req["gpus_per_node"])
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
        "SLURM_PRIO_PROCESS": "0",
    }


def _has_user(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def node_vars(job: dict[str, Any], cluster: Cluster, part: dict[str, Any], gpus: list[int]) -> dict[str, str]:
    """What slurmd adds on a compute node: node name, CPUs there, GPUs, SLURM_TMPDIR."""
    node = part["node"]
    env = {
        "SLURMD_NODENAME": node,
        "SLURM_CPUS_ON_NODE": str(part["cpus"]),
        "SLURM_TOPOLOGY_ADDR": node,
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        **_user_vars(job),
        **_mem_vars(job, cluster),
        "SLURM_WORKING_CLUSTER": f"{cluster.name}:localhost:6817:9728:109",
    }
    if part["gpus"]:
        ids = ",".join(map(str, gpus))
        env.update({name: ids for name in GPU_VARS})
        env["SLURM_JOB_GPUS"] = ",".join(map(str, part["gpus"]))
        env["SLURM_GPUS_ON_NODE"] = str(len(part["gpus"]))
    if cluster.slurm_tmpdir:
        env["SLURM_TMPDIR"] = str(node_tmpdir(job["id"], node))
    return env


def node_tmpdir(job_id: int, node: str):
    return paths.node_tmp_root() / node / f"job_{job_id}"


def submit_host() -> str:
    return socket.gethostname()


def batch_env(job: dict[str, Any], cluster: Cluster, base: dict[str, str]) -> dict[str, str]:
    """The batch shell's environment: the submit environment plus job and node variables."""
    part = job["alloc"][0]
    env = dict(base)
    for name in GPU_VARS:
        env.pop(name, None)
    env.update(job_vars(job, cluster))
    env.update(node_vars(job, cluster, part, part["gpus"]))
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
    """One srun task's environment. ``step`` holds the step layout (see commands.srun)."""
    part = step["layout"][node_index]
    env = dict(base)
    env.update(job_vars(job, cluster))
    env.update(node_vars(job, cluster, part["alloc"], part["alloc"]["gpus"]))
    first = sum(p["tasks"] for p in step["layout"][:node_index])
    env.update(
        {
            "SLURM_PROCID": str(proc_id),
            "SLURM_LOCALID": str(local_id),
            "SLURM_NODEID": str(node_index),
            "SLURM_GTIDS": ",".join(str(first + i) for i in range(part["tasks"])),
            "SLURM_STEPID": str(step["id"]),
            "SLURM_STEP_ID": str(step["id"]),
            "SLURM_STEP_NODELIST": step["nodelist"],
            "SLURM_STEP_NUM_NODES": str(len(step["layout"])),
            "SLURM_STEP_NUM_TASKS": str(step["ntasks"]),
            "SLURM_STEP_TASKS_PER_NODE": compress_counts([p["tasks"] for p in step["layout"]]),
            "SLURM_STEP_LAUNCHER_PORT": str(launcher_port),
            "SLURM_SRUN_COMM_HOST": "127.0.0.1",
            "SLURM_SRUN_COMM_PORT": str(launcher_port),
            "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1",
            "SLURM_DISTRIBUTION": "block",
            "SLURM_UMASK": _umask(),
            "SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0": compress_counts([p["cpus"] for p in job["alloc"]]),
            "SRUN_DEBUG": "3",
        }
    )
    if part["alloc"]["gpus"]:
        env["SLURM_STEP_GPUS"] = env["SLURM_JOB_GPUS"]
    if step.get("cpus_per_task"):
        env["SLURM_CPUS_PER_TASK"] = str(step["cpus_per_task"])
    if local_id == 0:
        env.setdefault("TMPDIR", "/tmp")  # Slurm 22.05 quirk: only the first task per node gets it
    return env


def _umask() -> str:
    mask = os.umask(0)
    os.umask(mask)
    return f"{mask:04o}"
