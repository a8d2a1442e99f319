"""Lessons 8, 10, 11 and 13, inside their jobs: torch.distributed from Slurm's variables: ranks,
world size, a master address and a port that can't clash; and Horovod's gloo workers started by srun.

Slurm never sets MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE; this module derives them the way the
lessons teach: ranks from SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS, the first host of the job from
``scontrol show hostnames``, and a port derived from the job id.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from hpcnb.slurm.counts import expand_counts

if TYPE_CHECKING:
    import torch

RENDEZVOUS_WAIT_S = 120.0  # how long Horovod's workers wait for rank 0 to serve the rendezvous
PORT_BASE, PORT_SPAN = 16000, 16000  # 16000-31999: below Linux's ephemeral ports (32768-60999); Lightning
# takes 15000 + the job id's last four digits (15000-24999), unless MASTER_PORT is set (lesson 8)


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


def hostnames(nodelist: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return out.stdout.split()


def first_host(nodelist: str) -> str:
    return hostnames(nodelist)[0]


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


def pick_device(local_rank: int) -> "torch.device":
    """This process's device, made current: ``cuda:i`` with ``i`` the local rank among the GPUs this
    process can see, else the CPU. Slurm's ``--gpus-per-task``/``--gpu-bind`` leave each task one GPU
    in ``CUDA_VISIBLE_DEVICES`` (so ``i`` is 0 there, not the local rank); with every GPU of the
    node visible, task ``r`` takes GPU ``r``."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def backend_for(device: "torch.device") -> str:
    """NCCL for GPU tensors, gloo for CPU tensors (NCCL cannot move CPU tensors)."""
    return "nccl" if device.type == "cuda" else "gloo"


def synchronize(device: "torch.device") -> None:
    """Wait for the device's queued work: GPU kernels run asynchronously, so a timer read without
    this measures how fast kernels were queued, not how long they ran."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def device_id_for(device: "torch.device") -> "torch.device | None":
    """``init_process_group``'s ``device_id``: this rank's GPU, or None on the CPU. Without it NCCL
    guesses the GPU from the global rank ("This can cause a hang if rank to GPU mapping is
    heterogeneous") and every ``barrier()`` warns."""
    return device if device.type == "cuda" else None


def check_resolves(host: str, port: int) -> None:
    """Fail at once where the rendezvous host's name does not resolve: c10d would retry the lookup
    until its timeout (minutes), printing only ``cannot be retrieved``. Call it before any rendezvous."""
    try:
        socket.getaddrinfo(host, port)
    except OSError:
        raise SlurmContextError(
            f"the first node {host!r} does not resolve; on the local Slurm run `hpcnb check-names`"
        ) from None


def init_process_group(backend: str | None = None, timeout_s: float = 120) -> World:
    """Set MASTER_ADDR/PORT (checked to resolve), pick this rank's device (:func:`pick_device`), then
    ``torch.distributed.init_process_group`` with the backend for that device (NCCL on GPUs, else
    gloo) and the GPU as ``device_id``. ``timeout_s`` bounds every collective: a rank whose peer
    died fails instead of waiting half an hour."""
    import datetime

    import torch.distributed as dist

    world = slurm_world()
    check_resolves(world.master_addr, world.master_port)
    os.environ.update(MASTER_ADDR=world.master_addr, MASTER_PORT=str(world.master_port))
    device = pick_device(world.local_rank)
    dist.init_process_group(backend or backend_for(device), rank=world.rank, world_size=world.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s), device_id=device_id_for(device))
    return world


def leave(code: int = 0) -> NoReturn:
    """End a training process: wait for every rank, destroy the process group, flush, and exit
    without the interpreter's teardown.

    Why not a plain return: the process group's C++ threads (gloo's, the TCP store's) can still
    be running while Python finalizes its objects, and a C++ thread object destroyed then ends the
    process with SIGABRT ("terminate called without an active exception", exit code -6). Under
    torchrun one such rank fails the whole run after its work is done; the other node's torchrun
    then waits in its exit barrier. ``os._exit`` skips that teardown; everything that matters (the
    results, the output) is written and flushed before it."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # leave together: a rank that quits while others still talk to it crashes them
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launched_by_horovodrun() -> bool:
    """Whether horovodrun started this process (it gives every worker its ``HOROVOD_RANK``)."""
    return "HOROVOD_RANK" in os.environ


def horovod_from_slurm() -> Any:
    """Give each Horovod gloo worker that ``srun`` started (one task per worker) what ``horovodrun``
    would: its ranks (``HOROVOD_RANK``, ``_LOCAL_RANK``, ``_CROSS_RANK`` ... from Slurm's), and the
    rendezvous, which rank 0 serves on the step's first node at the job's port (as DDP's
    MASTER_PORT). Call it before ``hvd.init()``; rank 0 gets the server back (keep it until
    ``hvd.shutdown()``), the others None. Under ``horovodrun`` (``HOROVOD_RANK`` set) or outside
    Slurm (one worker) it does nothing."""
    if launched_by_horovodrun() or "SLURM_PROCID" not in os.environ:
        return None
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

    world = slurm_world()
    hosts = hostnames(os.environ.get("SLURM_STEP_NODELIST") or os.environ["SLURM_JOB_NODELIST"])
    per_node = expand_counts(os.environ.get("SLURM_STEP_TASKS_PER_NODE") or os.environ["SLURM_TASKS_PER_NODE"])
    slots = get_host_assignments(parse_hosts(",".join(f"{h}:{n}" for h, n in zip(hosts, per_node))),
                                 world.world_size)
    me = slots[world.rank]
    if (me.hostname, me.local_rank) != (hosts[world.node_rank], world.local_rank):
        raise SlurmContextError(f"rank {world.rank} is task {world.local_rank} of {hosts[world.node_rank]}, where "
                                "Horovod counts ranks node by node: start the step with srun --distribution=block")
    check_resolves(hosts[0], world.master_port)
    address = socket.gethostbyname(hosts[0])
    os.environ.update(
        HOROVOD_GLOO_RENDEZVOUS_ADDR=address, HOROVOD_GLOO_RENDEZVOUS_PORT=str(world.master_port),
        HOROVOD_GLOO_IFACE=interface_towards(address), HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo",
        HOROVOD_HOSTNAME=me.hostname, HOROVOD_RANK=str(me.rank), HOROVOD_SIZE=str(me.size),
        HOROVOD_LOCAL_RANK=str(me.local_rank), HOROVOD_LOCAL_SIZE=str(me.local_size),
        HOROVOD_CROSS_RANK=str(me.cross_rank), HOROVOD_CROSS_SIZE=str(me.cross_size))
    if world.rank != 0:  # Horovod tries the rendezvous for 1.5 s only: wait for rank 0 to serve it
        wait_for_server(address, world.master_port, RENDEZVOUS_WAIT_S, what="Horovod's rendezvous (rank 0)")
        return None
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    server = RendezvousHTTPServer(("", world.master_port), RendezvousHandler, False)
    server.init(slots)
    threading.Thread(target=server.serve_forever, name="horovod-rendezvous", daemon=True).start()
    return server


def wait_for_server(address: str, port: int, timeout: float, what: str) -> None:
    """Return once ``address:port`` accepts a connection; SlurmContextError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((address, port), timeout=5).close()
            return
        except OSError as err:
            if time.monotonic() > deadline:
                raise SlurmContextError(f"{what} at {address}:{port} did not answer in {timeout:g} s: {err}") from None
        time.sleep(0.2)


def interface_towards(address: str) -> str:
    """The name of this host's network interface that reaches ``address`` (Horovod's gloo binds to it)."""
    import psutil

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((address, 9))  # UDP: no packet is sent, the kernel only picks the route
        local = probe.getsockname()[0]
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == local for a in addresses):
            return name
    raise SlurmContextError(f"no network interface of this host has {local}, the address towards {address}")
