"""Train the tiny model with DistributedDataParallel across nodes, launched by srun or by torchrun."""
import argparse
import datetime
import os
import subprocess
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from hpcnb.lessons import tensorboard, training
from hpcnb.lessons.distributed import backend_for, check_resolves, device_id_for, leave, pick_device, synchronize

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch", type=int, default=128, help="samples per optimizer step, over all processes")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--out", default="result", help="writes OUT.json and OUT.pt")
parser.add_argument("--tensorboard", metavar="DIR", help="rank 0 writes its losses to DIR/OUT for TensorBoard")
args = parser.parse_args()

# One process per device, on every node: torchrun sets RANK, LOCAL_RANK and WORLD_SIZE;
# under srun (one task per device) Slurm's own variables say the same
rank = int(os.environ.get("RANK") or os.environ["SLURM_PROCID"])
local_rank = int(os.environ.get("LOCAL_RANK") or os.environ["SLURM_LOCALID"])
world_size = int(os.environ.get("WORLD_SIZE") or os.environ["SLURM_NTASKS"])
# Rank 0 listens on the job's first node, on a port derived from the job id (torchrun sets both)
if "MASTER_ADDR" not in os.environ:
    nodes = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                           capture_output=True, text=True, check=True).stdout.split()
    os.environ["MASTER_ADDR"] = nodes[0]
if "MASTER_PORT" not in os.environ:
    os.environ["MASTER_PORT"] = str(16000 + int(os.environ["SLURM_JOB_ID"]) % 16000)
device = pick_device(local_rank)  # cuda:local_rank (of the GPUs this task sees) and set_device; else the CPU
backend = backend_for(device)  # nccl for GPU tensors, gloo for CPU tensors
# a name that does not resolve fails here, at once, not after c10d's retries
check_resolves(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
# a collective that waits longer than the timeout fails: a dead peer never hangs the job;
# device_id: NCCL binds to this rank's GPU instead of guessing it from the rank
dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=120),
                        device_id=device_id_for(device))

training.use_slurm_cpus()
hosts = training.hosts_of_ranks()
print(f"rank {rank}/{world_size} (local rank {local_rank}) on {hosts[rank]}, "
      f"rank 0 at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, {backend}", flush=True)

data = training.make_dataset()
sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=training.SEED)
loader = DataLoader(data, batch_size=args.batch // world_size, sampler=sampler)
model = training.make_model().to(device)
model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

losses, epoch_seconds = [], []  # rank 0's time per epoch (the loss computed after it left out)
# TensorBoard: rank 0 alone writes (each rank writing would add one copy of the curves per process)
board = tensorboard.writer(f"{args.tensorboard}/{args.out}") if args.tensorboard and rank == 0 else None
step = 0


def log_step(loss: float) -> None:
    global step
    board.add_scalar("train/batch_loss", loss, step)
    step += 1


dist.barrier()
start = time.perf_counter()
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
    began = time.perf_counter()
    training.train_epoch(model, loader, optimizer, device, on_step=log_step if board else None)
    synchronize(device)
    epoch_seconds.append(time.perf_counter() - began)
    if rank == 0:
        losses.append(training.full_loss(model, data, device))
        print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)
        if board:
            board.add_scalar("epoch/loss", losses[-1], epoch)
            board.add_scalar("epoch/seconds", epoch_seconds[-1], epoch)
if board:
    board.close()
synchronize(device)  # on a GPU: wait for the queued kernels before reading the clock
seconds = time.perf_counter() - start

if rank == 0:  # only rank 0 writes: every rank holds the same weights
    training.save_result(args.out, model, world_size=world_size, seconds=seconds, epoch_seconds=epoch_seconds,
                         epochs=args.epochs, batch=args.batch, lr=args.lr, losses=losses,
                         nodes=sorted(set(hosts)), hosts=hosts, backend=backend,
                         launcher="torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "srun")
    print(f"trained in {seconds:.2f} s", flush=True)
leave()  # barrier, destroy_process_group, exit (hpcnb.lessons.distributed.leave says why not a plain return)
