"""The same data-parallel training at any number of tasks, timed, for scaling curves (lesson 11).

Run one task per process under srun::

    srun python -m hpcnb.scripts.scaling_train --kind strong --batch 1024 --steps 60

* ``--kind strong``: the global batch (``--batch``) is fixed and split over the tasks, so every
  run does the same total work and, more tasks, each does less.
* ``--kind weak``: every task keeps ``--batch`` samples per step, so the global batch (and the
  total work) grows with the tasks; the learning rate is scaled with it
  (:func:`hpcnb.lessons.scaling.lr_scaling`, linear rule from ``--base-lr`` at ``--base-batch``).

The model is an MLP on a synthetic classification task; gradients are averaged with
``torch.nn.parallel.DistributedDataParallel`` (NCCL on GPUs, gloo on CPUs). Only the training loop is timed
(after ``--warmup`` untimed steps), in ``--blocks`` blocks between barriers; ``seconds`` is the
fastest block's time per step times ``--steps``, ``seconds_max`` the slowest block's (the run's
spread), ``wall_s`` the whole loop's plain time. Rank 0 prints one line::

    SCALING kind=strong tasks=2 nodes=1 seconds=1.234 samples=61440 global_batch=1024 ...

which is a row of :mod:`hpcnb.lessons.scaling`'s runs table (``startup_s`` is the time from the
process's start to the first timed step: Python, torch, and the process group).
"""
from __future__ import annotations

import argparse
import os
import time
from typing import NoReturn


def main(argv: list[str] | None = None) -> NoReturn:
    p = argparse.ArgumentParser(prog="python -m hpcnb.scripts.scaling_train", description=__doc__.split("\n")[0])
    p.add_argument("--kind", choices=("strong", "weak"), default="strong")
    p.add_argument("--batch", type=int, default=1024,
                   help="strong: the global batch; weak: the batch of each task")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--blocks", type=int, default=5,
                   help="time the steps in this many blocks: keep the fastest, and the slowest as the spread")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--base-lr", type=float, default=0.05)
    p.add_argument("--base-batch", type=int, default=1024)
    args = p.parse_args(argv)

    import psutil
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from hpcnb.lessons.distributed import init_process_group, leave, pick_device, synchronize
    from hpcnb.lessons.scaling import global_batch, lr_scaling

    imported = time.time() - psutil.Process().create_time()
    torch.set_num_threads(int(os.environ.get("SLURM_CPUS_PER_TASK") or 1))
    world = init_process_group()  # NCCL on a GPU, gloo on the CPU
    device = pick_device(world.local_rank)
    connected = time.time() - psutil.Process().create_time()
    rank, tasks = world.rank, world.world_size
    if args.kind == "strong":
        if args.batch % tasks:
            raise SystemExit(f"--batch {args.batch} does not split evenly over {tasks} tasks")
        per_task, gbatch = args.batch // tasks, args.batch
    else:
        per_task, gbatch = args.batch, global_batch(args.batch, tasks)
    lr = lr_scaling(args.base_lr, args.base_batch, gbatch)

    # synthetic task: labels from a fixed random "teacher"; the same data on every rank
    g = torch.Generator().manual_seed(0)
    data_x = torch.randn(16384, 128, generator=g)
    data_y = (data_x @ torch.randn(128, 10, generator=g)).argmax(dim=1)
    data_x, data_y = data_x.to(device), data_y.to(device)  # the tensors live where the backend works
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    model = torch.nn.Sequential(torch.nn.Linear(128, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 10)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)

    def step(i: int) -> float:
        # this rank's slice of global batch i
        start = (i * gbatch + rank * per_task) % (len(data_x) - per_task)
        x, y = data_x[start:start + per_task], data_y[start:start + per_task]
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()  # DDP averages the gradients over all tasks here
        opt.step()
        return loss.item()

    for i in range(args.warmup):
        step(i)
    synchronize(device)
    dist.barrier()
    t0 = time.perf_counter()
    startup = time.time() - psutil.Process().create_time()
    # Time the loop in blocks of steps and keep the fastest block's pace: other programs on a
    # shared machine steal time in bursts, and the fastest block is closest to the run's own speed
    # (the same idea as timeit's "best of"). wall_s is the plain time of the whole loop.
    blocks = max(1, min(args.blocks, args.steps))
    bounds = [args.warmup + args.steps * b // blocks for b in range(blocks + 1)]
    pace = []
    for first, last in zip(bounds, bounds[1:]):
        tb = time.perf_counter()
        for i in range(first, last):
            step(i)
        synchronize(device)  # the GPU's queued work is part of the block's time
        dist.barrier()
        pace.append((time.perf_counter() - tb) / (last - first))
    wall = time.perf_counter() - t0
    seconds, seconds_max = min(pace) * args.steps, max(pace) * args.steps
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(data_x), data_y).item()
    if rank == 0:
        samples = args.steps * gbatch
        nodes = int(os.environ.get("SLURM_NNODES") or os.environ.get("SLURM_JOB_NUM_NODES") or 1)
        print(f"SCALING kind={args.kind} tasks={tasks} nodes={nodes} seconds={seconds:.4f} "
              f"seconds_max={seconds_max:.4f} samples={samples} "
              f"global_batch={gbatch} per_task_batch={per_task} lr={lr:g} loss={loss:.6f} "
              f"wall_s={wall:.4f} startup_s={startup:.2f} import_s={imported:.2f} connect_s={connected - imported:.2f} "
              f"job_id={os.environ.get('SLURM_JOB_ID', '')}", flush=True)
    leave()  # barrier, destroy the group, exit (see hpcnb.lessons.distributed.leave)

if __name__ == "__main__":
    main()
