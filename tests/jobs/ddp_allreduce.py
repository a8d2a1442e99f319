"""A 2-node DDP smoke job: every rank contributes its rank; rank 0 writes the sum."""

import torch
import torch.distributed as dist

from hpcnb.lessons.distributed import init_process_group, leave

world = init_process_group(timeout_s=60)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
loss = model(torch.full((8, 4), float(world.rank))).sum()
loss.backward()
total = torch.tensor([float(world.rank)])
dist.all_reduce(total)
grads = [p.grad.clone() for p in model.parameters()]
dist.all_reduce(grads[0])
if world.rank == 0:
    print(f"world={world.world_size} nodes={world.num_nodes} master={world.master_addr}:{world.master_port} "
          f"sum={int(total.item())}", flush=True)
leave()  # barrier, destroy the group, exit without Python's teardown
