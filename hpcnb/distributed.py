"""torch.distributed from Slurm's variables: ranks, world size, a master address and a port that can't clash.

Slurm never sets MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE; this module derives them the way the
lessons teach: ranks from SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS, the first host of the job from
``scontrol show hostnames``, and a port derived from the job id.
"""
from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass

PORT_BASE, PORT_SPAN = 20000, 40000


class SlurmContextError(RuntimeError):
    """Not inside a Slurm job step, or the job's nodes cannot be reached."""


@dataclass(frozen=True)
class World:
    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int


def job_port(job_id: int) -> int:
    """A MASTER_PORT derived from the job id: two jobs sharing a node don't collide."""
    return PORT_BASE + job_id % PORT_SPAN


def first_host(nodelist: str) -> str:
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def slurm_world(env: dict[str, str] | None = None) -> World:
    env = dict(os.environ if env is None else env)
    missing = [v for v in ("SLURM_PROCID", "SLURM_JOB_ID", "SLURM_JOB_NODELIST") if v not in env]
    if missing:
        raise SlurmContextError(
            f"{', '.join(missing)} not set: launch each task with srun inside a job (e.g. `srun python train.py`)"
        )
    ntasks = env.get("SLURM_NTASKS") or env.get("SLURM_STEP_NUM_TASKS") or "1"
    return World(
        rank=int(env["SLURM_PROCID"]),
        local_rank=int(env.get("SLURM_LOCALID", "0")),
        world_size=int(ntasks),
        node_rank=int(env.get("SLURM_NODEID", "0")),
        num_nodes=int(env.get("SLURM_NNODES", "1")),
        master_addr=first_host(env["SLURM_JOB_NODELIST"]),
        master_port=int(env.get("MASTER_PORT") or job_port(int(env["SLURM_JOB_ID"]))),
    )


def init_process_group(backend: str | None = None, timeout_s: float = 120) -> World:
    """Set MASTER_ADDR/PORT, then ``torch.distributed.init_process_group`` (NCCL on GPUs, else gloo)."""
    import datetime

    import torch
    import torch.distributed as dist

    world = slurm_world()
    try:
        socket.getaddrinfo(world.master_addr, world.master_port)
    except OSError:
        raise SlurmContextError(
            f"the first node {world.master_addr!r} does not resolve; on the local Slurm run `hpcnb check-names`"
        ) from None
    os.environ.update(MASTER_ADDR=world.master_addr, MASTER_PORT=str(world.master_port))
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(world.local_rank % torch.cuda.device_count())
    dist.init_process_group(backend, rank=world.rank, world_size=world.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return world
