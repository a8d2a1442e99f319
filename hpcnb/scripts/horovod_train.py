"""Train the tiny model with Horovod: ``horovodrun --gloo -np N -H node1:2,node2:2 python -m hpcnb.scripts.horovod_train``,
or ``srun python -m hpcnb.scripts.horovod_train`` (one Slurm task per worker).

Horovod's recipe: ``hvd.init()``; one device per process (``hvd.local_rank()``); a fixed batch
*per worker*, so the global batch grows with ``hvd.size()`` and the learning rate is scaled by
``hvd.size()``; ``hvd.DistributedOptimizer`` averages the gradients; ``hvd.broadcast_parameters``
and ``hvd.broadcast_optimizer_state`` start every worker from rank 0's state; only rank 0 writes.
"""
import argparse
import os
import socket
import sys
import time

import torch

try:
    import horovod.torch as hvd
except ImportError as err:  # Horovod is compiled against one torch version: it is often missing
    sys.exit(f"Horovod is not installed for this Python/torch ({err}). Build it with: bash ci/build-horovod.sh .venv")
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from hpcnb.lessons import training
from hpcnb.lessons.distributed import horovod_from_slurm, launched_by_horovodrun, pick_device

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-per-worker", type=int, default=32)
parser.add_argument("--base-lr", type=float, default=0.025, help="the learning rate of one worker")
parser.add_argument("--out", default="result", help="writes OUT.json and OUT.pt")
args = parser.parse_args()

launcher = "horovodrun" if launched_by_horovodrun() else "srun"
rendezvous = horovod_from_slurm()  # under srun: the ranks from Slurm's, rank 0 serves the rendezvous
hvd.init()
# GPU tensors need a Horovod built with NCCL (HOROVOD_GPU_OPERATIONS=NCCL); ci/build-horovod.sh
# builds one where CUDA is present. Without it, gradients stay on the CPU, even on a GPU node.
device = pick_device(hvd.local_rank()) if hvd.nccl_built() else torch.device("cpu")
training.use_slurm_cpus()
host = os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()  # the host horovodrun meant (-H), or Slurm's node
hosts = hvd.allgather_object(host)
here = socket.gethostname()  # the host it runs on: not the same where horovodrun took node2 for local
meant = "horovodrun's host" if launcher == "horovodrun" else "Slurm's node"
print(f"rank {hvd.rank()}/{hvd.size()} (local rank {hvd.local_rank()}) on {here}"
      + (f" ({meant} {host})" if here != host else ""), flush=True)

data = training.make_dataset()
sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=training.SEED)
loader = DataLoader(data, batch_size=args.batch_per_worker, sampler=sampler)
model = training.make_model().to(device)
lr = args.base_lr * hvd.size()  # the global batch is size x larger: scale the learning rate with it
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # every worker starts from rank 0's weights
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

losses, epoch_seconds = [], []  # rank 0's time per epoch (the loss computed after it left out)
hvd.allreduce(torch.zeros(1), name="barrier")
start = time.perf_counter()
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    began = time.perf_counter()
    training.train_epoch(model, loader, optimizer, device)
    epoch_seconds.append(time.perf_counter() - began)
    if hvd.rank() == 0:
        losses.append(training.full_loss(model, data, device))
        print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)
seconds = time.perf_counter() - start

if hvd.rank() == 0:  # only rank 0 writes: every worker holds the same weights
    training.save_result(args.out, model, world_size=hvd.size(), seconds=seconds, epoch_seconds=epoch_seconds,
                         epochs=args.epochs, batch=args.batch_per_worker * hvd.size(), lr=lr, losses=losses,
                         nodes=sorted(set(hosts)), hosts=hosts, backend="gloo" if hvd.gloo_enabled() else "mpi",
                         launcher=launcher)
    print(f"trained in {seconds:.2f} s", flush=True)
hvd.shutdown()  # Horovod's own teardown: its background thread stops here
sys.stdout.flush()
os._exit(0)  # and none of torch's may abort Python's own teardown (hpcnb.lessons.distributed.leave)
