"""An all-reduce across the job's ranks, checked and timed: ``make test-gpu``'s step across nodes.

Run one task per GPU under srun, in an allocation of two or more nodes::

    srun --nodes=2 --ntasks-per-node=1 --gpus-per-node=1 python -m hpcnb.scripts.allreduce_check

Every rank all-reduces a buffer of ones (``--mib`` MiB, float32) on its device (NCCL on GPUs,
gloo on CPUs: :func:`hpcnb.lessons.distributed.init_process_group`), checks that every element came
back as the number of ranks, then times ``--repeats`` more. Rank 0 prints one line ``ALLREDUCE
{json}``: the backend, ranks, nodes, the check, and the bus bandwidth, NCCL's own measure of an
all-reduce (2 (n - 1) / n x bytes / time, comparable across rank counts). A wrong sum exits 1.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

from hpcnb.lessons.distributed import init_process_group, leave, pick_device, synchronize

p = argparse.ArgumentParser(prog="python -m hpcnb.scripts.allreduce_check", description=__doc__.split("\n")[0])
p.add_argument("--mib", type=int, default=256, help="the buffer's size in MiB")
p.add_argument("--repeats", type=int, default=5, help="timed all-reduces after the checked one")
args = p.parse_args()


def bus_bandwidth_gbs(size_bytes: int, ranks: int, seconds: float) -> float:
    """An all-reduce's bus bandwidth in GB/s, as NCCL's tests report it."""
    return 2 * (ranks - 1) / ranks * size_bytes / seconds / 1e9 if ranks > 1 and seconds > 0 else 0.0


world = init_process_group()
device = pick_device(world.local_rank)
buffer = torch.ones(args.mib << 18, device=device)   # MiB of float32
dist.all_reduce(buffer)
right = bool(torch.all(buffer == world.world_size).item())
synchronize(device)
start = time.perf_counter()
for _ in range(args.repeats):
    dist.all_reduce(buffer)
synchronize(device)
seconds = (time.perf_counter() - start) / max(args.repeats, 1)
nodes = int(os.environ.get("SLURM_STEP_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)
if world.rank == 0:
    print("ALLREDUCE " + json.dumps(dict(backend=dist.get_backend(), ranks=world.world_size, nodes=nodes,
                                         device=str(device), mib=args.mib, sum_right=right, seconds=seconds,
                                         bus_gbs=bus_bandwidth_gbs(buffer.numel() * 4, world.world_size, seconds))),
          flush=True)
leave(0 if right else 1)
