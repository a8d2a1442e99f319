"""The same model trained with DDP, ZeRO-1 or FSDP2, its bytes per rank measured (lesson 14).

Run one task per rank under srun::

    srun --label python -m hpcnb.scripts.sharded_train --strategy fsdp --save ckpt

``--strategy`` is ``ddp`` (every rank holds everything), ``zero1``
(``ZeroRedundancyOptimizer``: the optimizer state is split across the ranks) or ``fsdp``
(``fully_shard``: parameters, gradients and optimizer state split). Each rank prints one line
``SHARDING {json}``: its parameter, gradient and optimizer-state bytes (the elements of its own
tensors, of its local shard where sharded), its step times and its peak RSS. ``--save DIR``
(fsdp only) writes a sharded checkpoint with ``torch.distributed.checkpoint``: the model, Adam's
state and the step, in one ``dcp.save`` (a long run would use ``dcp.async_save``, which writes while
training goes on). ``--load DIR`` trains nothing: it loads the model from such a checkpoint into this
run's ranks (any number, or one process without a process group) and prints its full norm.
``--resume DIR`` goes on training from it, model and optimizer, on this run's ranks (any number,
one included), printing ``RESUMED {json}``: the step it resumed at, Adam's own step count as loaded
(0 with ``--weights-only``: Adam afresh), the held-out loss saved with it and the one it finds, and
the held-out loss after each further step.
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
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict, get_state_dict, set_model_state_dict, set_state_dict)

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
p.add_argument("--resume", help="fsdp: go on training from the checkpoint in this folder (model and optimizer)")
p.add_argument("--weights-only", action="store_true", help="with --resume: load the model only, Adam starts afresh")
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


def held_out_loss(model: torch.nn.Module, device: torch.device) -> float:
    """The loss on a fixed batch, the same on every rank and in every run."""
    x = torch.randn(64, args.width, generator=torch.Generator().manual_seed(10**6)).to(device)
    with torch.no_grad():
        return model(x).pow(2).mean().item()


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> list[torch.Tensor]:
    """One training step; returns this rank's gradients (before they are zeroed)."""
    model(x).pow(2).mean().backward()
    opt.step()
    grads = [local(q.grad) for q in model.parameters() if q.grad is not None]
    opt.zero_grad(set_to_none=True)
    return grads


def save(model: torch.nn.Module, opt: torch.optim.Optimizer, done: int, device: torch.device) -> None:
    """Model, optimizer and progress in one sharded checkpoint: each rank writes its own shards."""
    model_state, optim_state = get_state_dict(model, opt)
    progress = {"step": torch.tensor(done), "held_out_loss": torch.tensor(held_out_loss(model, device))}
    dcp.save({"model": model_state, "optim": optim_state, "progress": progress}, checkpoint_id=args.save)


def train(rank: int, size: int, device: torch.device) -> None:
    model, opt = wrap(build(args.width, args.depth), device)
    gen = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(args.steps):
        x = torch.randn(args.batch, args.width, generator=gen).to(device)
        synchronize(device)
        start = time.perf_counter()
        grads = step(model, opt, x)
        synchronize(device)
        times.append(time.perf_counter() - start)
    params = [local(q.detach()) for q in model.parameters()]
    record = dict(rank=rank, world=size, strategy=args.strategy, width=args.width, depth=args.depth,
                  n_params=sum(q.numel() for q in model.parameters()),
                  param_bytes=tensor_bytes(params), grad_bytes=tensor_bytes(grads),
                  optim_bytes=tensor_bytes(optimizer_tensors(opt)), step_s=times[1:],   # the first step warms up
                  max_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, norm=full_norm(model))
    print("SHARDING " + json.dumps(record), flush=True)
    if args.save:
        save(model, opt, args.steps, device)
        if rank == 0:
            print(f"saved a checkpoint of {size} ranks in {args.save}", flush=True)


def load(rank: int, size: int, device: torch.device) -> None:
    """Load the checkpoint into this run's ranks, sharded as this run shards (or whole in one process)."""
    model = build(args.width, args.depth).to(device)
    if dist.is_initialized():
        shard(model)
    state = {"model": get_model_state_dict(model)}
    dcp.load(state, checkpoint_id=args.load)   # each rank reads the pieces of its own shards
    set_model_state_dict(model, state["model"])
    held = tensor_bytes([local(q.detach()) for q in model.parameters()])
    print("SHARDING " + json.dumps(dict(rank=rank, world=size, strategy=f"load-{size}", param_bytes=held,
                                        norm=full_norm(model))), flush=True)


def restore(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Load the checkpoint into this run's layout (each rank reads the pieces of its own shards):
    the model and Adam's state, or the model alone with ``--weights-only``. Returns its progress."""
    progress = {"step": torch.tensor(0), "held_out_loss": torch.tensor(0.0)}
    if args.weights_only:
        state = {"model": get_model_state_dict(model), "progress": progress}
        dcp.load(state, checkpoint_id=args.resume)
        set_model_state_dict(model, state["model"])
        return state["progress"]
    model_state, optim_state = get_state_dict(model, opt)   # this run's layout: what to load into
    state = {"model": model_state, "optim": optim_state, "progress": progress}
    dcp.load(state, checkpoint_id=args.resume)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return state["progress"]


def resume(rank: int, size: int, device: torch.device) -> None:
    """Go on training from the checkpoint, sharded over this run's ranks: the model and Adam's
    state as they were saved (by any number of ranks), then ``--steps`` more steps."""
    model = shard(build(args.width, args.depth).to(device))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    progress = restore(model, opt)
    found = held_out_loss(model, device)
    adam_step = max((int(s["step"]) for s in opt.state.values() if "step" in s), default=0)   # 0: afresh
    gen = torch.Generator().manual_seed(1000 + rank)
    after = []
    for _ in range(args.steps):
        step(model, opt, torch.randn(args.batch, args.width, generator=gen).to(device))
        after.append(held_out_loss(model, device))
    print("RESUMED " + json.dumps(dict(rank=rank, world=size, weights_only=args.weights_only,
                                       step=int(progress["step"]), adam_step=adam_step,
                                       saved_loss=float(progress["held_out_loss"]), found_loss=found,
                                       then=after)), flush=True)


torch.set_num_threads(int(os.environ.get("SLURM_CPUS_PER_TASK", "1")))   # no more threads than CPUs given
if args.resume or int(os.environ.get("SLURM_NTASKS", os.environ.get("SLURM_STEP_NUM_TASKS", "1"))) > 1:
    world = init_process_group()   # NCCL on GPUs, gloo on CPUs (hpcnb.lessons.distributed)
    rank, size, device = world.rank, world.world_size, pick_device(world.local_rank)
elif args.load:
    rank, size, device = 0, 1, pick_device(0)   # one process: no process group (DCP loads without one)
else:
    p.error("training needs 2 or more tasks (srun --ntasks=2 ...); one process may only --load")
(load if args.load else resume if args.resume else train)(rank, size, device)
if dist.is_initialized():
    leave()
