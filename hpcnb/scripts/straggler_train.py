"""Data-parallel training that times every rank's steps, for finding a straggler (lesson 13).

Run one task per rank under srun::

    srun python -m hpcnb.scripts.straggler_train --steps 30 --out times.json

Each step on each rank is timed in two parts:

* ``compute_s`` — forward and backward on this rank's share of the batch (its own work);
* ``wait_s``    — the gradient all-reduce: communication plus waiting for the slowest rank.

Every rank prints one line per step (``rank=2 host=node2 step=7 compute_s=... wait_s=...``,
see :func:`hpcnb.lessons.stragglers.step_line`); at the end the times are gathered across ranks with
torch.distributed and rank 0 writes them to ``--out`` (JSON) and prints the outlier test.

``--simulate-slow-rank R --simulate-factor F`` makes rank R's compute F times longer by
sleeping, for clusters where no node can be slowed on purpose (on the local Slurm,
``hpcnb slurm slow-node node2 5`` slows a whole virtual node for real).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import NoReturn


def main(argv: list[str] | None = None) -> NoReturn:
    p = argparse.ArgumentParser(prog="python -m hpcnb.scripts.straggler_train", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the statistics")
    p.add_argument("--batch", type=int, default=1024, help="samples per rank and step")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--out", default="times.json")
    p.add_argument("--simulate-slow-rank", type=int, default=None)
    p.add_argument("--simulate-factor", type=float, default=5.0)
    p.add_argument("--quiet", action="store_true", help="no per-step lines")
    args = p.parse_args(argv)

    import torch
    import torch.distributed as dist

    from hpcnb.lessons.distributed import init_process_group, leave, pick_device, synchronize
    from hpcnb.lessons.stragglers import find_stragglers, format_report, gather_step_times, save_times, step_line

    torch.set_num_threads(int(os.environ.get("SLURM_CPUS_PER_TASK") or 1))
    world = init_process_group()  # NCCL on a GPU, gloo on the CPU
    device = pick_device(world.local_rank)
    rank, size = world.rank, world.world_size
    host = os.environ.get("SLURMD_NODENAME", "?")

    torch.manual_seed(0)  # same initial weights everywhere
    model = torch.nn.Sequential(torch.nn.Linear(128, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    params = list(model.parameters())
    g = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    x = torch.randn(args.batch, 128, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    x, y = x.to(device), y.to(device)

    compute, wait = [], []
    dist.barrier()
    for step in range(args.steps):
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        synchronize(device)  # the GPU's queued work belongs to this rank's compute time
        if args.simulate_slow_rank == rank:
            time.sleep((args.simulate_factor - 1) * (time.perf_counter() - t0))
        t1 = time.perf_counter()
        flat = torch.cat([q.grad.reshape(-1) for q in params])
        dist.all_reduce(flat)  # every rank waits here for the slowest one
        flat /= size
        offset = 0
        for q in params:
            q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))
            offset += q.numel()
        opt.step()
        synchronize(device)
        t2 = time.perf_counter()
        if step >= args.warmup:
            compute.append(t1 - t0)
            wait.append(t2 - t1)
            if not args.quiet:
                # one write per line: the ranks share the output file, and a line written in two
                # pieces (text, then newline) can be split by another rank's line
                sys.stdout.write(step_line(rank, step, host, compute_s=t1 - t0, wait_s=t2 - t1) + "\n")
                sys.stdout.flush()

    gathered = gather_step_times({"compute_s": compute, "wait_s": wait}, host=host)
    if rank == 0:
        steps = list(range(args.warmup, args.steps))
        for rec in gathered.values():
            rec["steps"] = steps
        save_times(args.out, gathered, world_size=size, job_id=os.environ.get("SLURM_JOB_ID"),
                   simulated_slow_rank=args.simulate_slow_rank)
        times = {r: rec["compute_s"] for r, rec in gathered.items()}
        if size >= 3:
            print(format_report(find_stragglers(times, {r: rec["host"] for r, rec in gathered.items()})), flush=True)
        print(f"wrote {args.out} ({size} ranks x {len(steps)} steps)", flush=True)
    leave()  # barrier, destroy the group, exit (see hpcnb.lessons.distributed.leave)

if __name__ == "__main__":
    main()
