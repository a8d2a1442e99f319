"""A few deterministic Horovod steps; rank 0 prints the averaged weights. Started by horovodrun, or
by srun (one Slurm task per worker: hpcnb's horovod_from_slurm gives each what horovodrun would)."""
import os

import torch
import horovod.torch as hvd

from hpcnb.lessons.distributed import horovod_from_slurm

rendezvous = horovod_from_slurm()  # (nothing under horovodrun) rank 0 keeps it until the end
hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
gen = torch.Generator().manual_seed(1000 + hvd.rank())
for _ in range(5):
    x = torch.randn(16, 8, generator=gen)
    loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
host = os.environ.get("HOROVOD_HOSTNAME", "?")
print(f"rank {hvd.rank()}/{hvd.size()} local {hvd.local_rank()} host {host}", flush=True)
if hvd.rank() == 0:
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    print(f"weights {' '.join(f'{w:.5f}' for w in weights.tolist())}", flush=True)
hvd.shutdown()
