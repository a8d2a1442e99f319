"""Train the tiny model with DistributedDataParallel on the devices of one node (one srun task each)."""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from hpcnb.lessons import training
from hpcnb.lessons.distributed import backend_for, check_resolves, device_id_for, leave, pick_device, synchronize

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch", type=int, default=128, help="samples per optimizer step, over all processes")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--out", default="result", help="writes OUT.json and OUT.pt")
args = parser.parse_args()

# One process per device, all on this node: srun numbers them 0, 1, ... in SLURM_LOCALID
rank = int(os.environ["SLURM_LOCALID"])
world_size = int(os.environ["SLURM_NTASKS"])
# Rank 0 listens on this node, on a port derived from the job id (two jobs on a node don't clash)
os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = str(16000 + int(os.environ["SLURM_JOB_ID"]) % 16000)
device = pick_device(rank)  # cuda:rank (of the GPUs this task sees) and set_device; else the CPU
backend = backend_for(device)  # nccl for GPU tensors, gloo for CPU tensors
# a name that does not resolve fails here, at once, not after c10d's retries
check_resolves(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
# a collective that waits longer than the timeout fails: a dead peer never hangs the job;
# device_id: NCCL binds to this rank's GPU instead of guessing it from the rank
dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=120),
                        device_id=device_id_for(device))

training.use_slurm_cpus()

data = training.make_dataset()
sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=training.SEED)
loader = DataLoader(data, batch_size=args.batch // world_size, sampler=sampler)
model = training.make_model().to(device)
model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

losses = []
dist.barrier()
start = time.perf_counter()
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
    training.train_epoch(model, loader, optimizer, device)
    if rank == 0:
        losses.append(training.full_loss(model, data, device))
        print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)
synchronize(device)  # on a GPU: wait for the queued kernels before reading the clock
seconds = time.perf_counter() - start

if rank == 0:  # only rank 0 writes: every rank holds the same weights
    training.save_result(args.out, model, world_size=world_size, seconds=seconds, epochs=args.epochs,
                         batch=args.batch, lr=args.lr, losses=losses)
    print(f"trained in {seconds:.2f} s", flush=True)
leave()  # barrier, destroy_process_group, exit (hpcnb.lessons.distributed.leave says why not a plain return)
