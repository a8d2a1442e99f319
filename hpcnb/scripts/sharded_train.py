"""The same model trained with DDP, ZeRO-1 or FSDP2, its bytes per rank measured (lesson 14).

Run one task per rank under srun::

    srun --label python -m hpcnb.scripts.sharded_train --strategy fsdp --save ckpt

``--strategy`` is ``ddp`` (every rank holds everything), ``zero1``
(``ZeroRedundancyOptimizer``: the optimizer state is split across the ranks) or ``fsdp``
(``fully_shard``: parameters, gradients and optimizer state split). Each rank prints one line
``SHARDING {json}``: its parameter, gradient and optimizer-state bytes (the elements of its own
tensors, of its local shard where sharded), its step times and its peak RSS. ``--save DIR``
(fsdp only) writes a sharded checkpoint with ``torch.distributed.checkpoint``. ``--load DIR``
trains nothing: it loads such a checkpoint into this run's ranks (any number, or one process
without a process group) and prints the model's full norm.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict

from hpcnb.lessons.distributed import init_process_group, leave, pick_device, synchronize
from hpcnb.lessons.sharding import optimizer_tensors, tensor_bytes

p = argparse.ArgumentParser(prog="python -m hpcnb.scripts.sharded_train", description=__doc__.split("\n")[0])
p.add_argument("--strategy", choices=["ddp", "zero1", "fsdp"], default="ddp")
p.add_argument("--width", type=int, default=512, help="the hidden layers' width")
p.add_argument("--depth", type=int, default=4, help="the number of hidden layers")
p.add_argument("--steps", type=int, default=8)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--save", help="fsdp: save a sharded checkpoint (torch.distributed.checkpoint) in this folder")
p.add_argument("--load", help="load the checkpoint in this folder and print the model's full norm")
args = p.parse_args()


def build(width: int, depth: int) -> torch.nn.Sequential:
    """An MLP: ``depth`` blocks of Linear(width, width) + ReLU, then Linear(width, 1)."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's own part of a tensor: the local shard of a DTensor, else the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def full_norm(model: torch.nn.Module) -> float:
    """The norm of all parameters together, from each rank's shards (sum of squares all-reduced)."""
    sq = sum(local(q.detach()).double().pow(2).sum() for q in model.parameters())
    sq = torch.as_tensor(sq, dtype=torch.float64, device=next(model.parameters()).device)
    if dist.is_initialized() and any(hasattr(q, "to_local") for q in model.parameters()):
        dist.all_reduce(sq)
    return sq.sqrt().item()


def shard(model: torch.nn.Sequential) -> torch.nn.Sequential:
    """FSDP2: each Linear layer, then the root, sharded over the ranks (in place)."""
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)   # each layer's parameters sharded; gathered only while in use
    fully_shard(model)
    return model


def wrap(model: torch.nn.Module, device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and its Adam optimizer, wrapped for ``--strategy``."""
    model = model.to(device)
    if args.strategy == "fsdp":
        return shard(model), torch.optim.Adam(model.parameters(), lr=1e-3)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    if args.strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    return ddp, torch.optim.Adam(ddp.parameters(), lr=1e-3)


def train(rank: int, size: int, device: torch.device) -> None:
    model, opt = wrap(build(args.width, args.depth), device)
    gen = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(args.steps):
        x = torch.randn(args.batch, args.width, generator=gen).to(device)
        synchronize(device)
        start = time.perf_counter()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        synchronize(device)
        times.append(time.perf_counter() - start)
        grads = [local(q.grad) for q in model.parameters() if q.grad is not None]   # before zero_grad
        opt.zero_grad(set_to_none=True)
    params = [local(q.detach()) for q in model.parameters()]
    record = dict(rank=rank, world=size, strategy=args.strategy, width=args.width, depth=args.depth,
                  n_params=sum(q.numel() for q in model.parameters()),
                  param_bytes=tensor_bytes(params), grad_bytes=tensor_bytes(grads),
                  optim_bytes=tensor_bytes(optimizer_tensors(opt)), step_s=times[1:],   # the first step warms up
                  max_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, norm=full_norm(model))
    print("SHARDING " + json.dumps(record), flush=True)
    if args.save:
        dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=args.save)   # each rank writes its shards
        if rank == 0:
            print(f"saved a checkpoint of {size} ranks in {args.save}", flush=True)


def load(rank: int, size: int, device: torch.device) -> None:
    """Load the checkpoint into this run's ranks, sharded as this run shards (or whole in one process)."""
    model = build(args.width, args.depth).to(device)
    if dist.is_initialized():
        shard(model)
    state = {"model": get_model_state_dict(model)}
    dcp.load(state, checkpoint_id=args.load)   # each rank reads the pieces of its own shards
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, state["model"])
    held = tensor_bytes([local(q.detach()) for q in model.parameters()])
    print("SHARDING " + json.dumps(dict(rank=rank, world=size, strategy=f"load-{size}", param_bytes=held,
                                        norm=full_norm(model))), flush=True)


torch.set_num_threads(int(os.environ.get("SLURM_CPUS_PER_TASK", "1")))   # no more threads than CPUs given
if int(os.environ.get("SLURM_NTASKS", os.environ.get("SLURM_STEP_NUM_TASKS", "1"))) > 1:
    world = init_process_group()   # NCCL on GPUs, gloo on CPUs (hpcnb.lessons.distributed)
    rank, size, device = world.rank, world.world_size, pick_device(world.local_rank)
elif args.load:
    rank, size, device = 0, 1, pick_device(0)   # one process: no process group (DCP loads without one)
else:
    p.error("training needs 2 or more tasks (srun --ntasks=2 ...); one process may only --load")
(load if args.load else train)(rank, size, device)
if dist.is_initialized():
    leave()
