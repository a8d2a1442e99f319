"""A few deterministic DDP steps over gloo; rank 0 prints the result (the same on any Slurm)."""
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
local = int(os.environ["SLURM_LOCALID"])
dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(1000 + rank)  # every rank its own (fixed) data
for _ in range(5):
    x = torch.randn(16, 8, generator=gen)
    loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
peers = [None] * world
dist.all_gather_object(peers, (rank, local, os.environ["SLURMD_NODENAME"], socket.gethostbyname(os.environ["SLURMD_NODENAME"])))
print(f"rank {rank}/{world} local {local} node {os.environ['SLURMD_NODENAME']}", flush=True)
if rank == 0:
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    print(f"peers {sorted(peers)}", flush=True)
    print(f"weights {' '.join(f'{w:.5f}' for w in weights.tolist())}", flush=True)
dist.barrier()  # nobody tears gloo down while another rank still talks to it
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # no interpreter teardown: gloo's threads can abort it (see hpcnb.lessons.distributed.leave)
