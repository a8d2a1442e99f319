"""Data-parallel training with a planted fault, for diagnosing hangs and crashes (lesson 15).

Run one task per rank under srun (``--label`` puts each line's rank in front of it)::

    srun --label python -m hpcnb.scripts.faulty_ddp --fault skip

Every rank trains the same small model on its own batches and averages the gradients with an
explicit all-reduce each step, printing ``rank=R host=H step=S loss=...`` per step. ``--fault``
plants one mistake in rank ``--rank`` (default: the last rank) at step ``--at-step``:

* ``none``  — no fault: the run ends normally;
* ``skip``  — the rank runs out of batches one step early (an uneven shard): it skips that step's
  all-reduce and waits at the final barrier while the others wait in the all-reduce;
* ``shape`` — the rank built its model with another width: its gradient has another size;
* ``die``   — the rank is killed (``SIGKILL``, as the kernel's OOM killer does);
* ``addr``  — the rank looks for rank 0 at an address where nothing answers (``192.0.2.1``, no
  network routes it), for 3 x ``--timeout``: rank 0 gives up first, saying who joined;
* ``mystery`` — one rank (which one: the job id says, :func:`hpcnb.lessons.hangs.planted`) never
  gets its batch: its read hangs while the others wait in the all-reduce (the exercise: find the
  rank and the line from the stack dumps).

``--timeout`` (seconds, default 10) is ``init_process_group``'s timeout: the rendezvous and every
collective wait at most that long, then fail with an error instead of hanging for good.
``faulthandler`` prints every thread's Python stack on ``SIGUSR1`` (``scancel --signal=USR1 JOBID``)
and on a crash, and the process goes on. With ``TORCH_FR_BUFFER_SIZE`` set, a rank whose collective
fails (its timeout) writes its flight recorder first (:func:`hpcnb.lessons.hangs.dump_flight_recorder`).
"""
from __future__ import annotations

import faulthandler
import signal

faulthandler.enable()                                     # a crash (SIGSEGV, SIGABRT...) prints the stacks
faulthandler.register(signal.SIGUSR1, all_threads=True)   # so does SIGUSR1, and the rank carries on

import argparse  # noqa: E402  (faulthandler first: a hang while importing is dumped too)
import datetime  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from hpcnb.lessons.distributed import (  # noqa: E402
    backend_for, check_resolves, device_id_for, leave, pick_device, slurm_world)
from hpcnb.lessons.hangs import NOWHERE, dump_flight_recorder, planted  # noqa: E402

p = argparse.ArgumentParser(prog="python -m hpcnb.scripts.faulty_ddp", description=__doc__.split("\n")[0])
p.add_argument("--fault", choices=["none", "skip", "shape", "die", "addr", "mystery"], default="none")
p.add_argument("--rank", type=int, default=-1, help="the faulty rank (default: the last one)")
p.add_argument("--at-step", type=int, default=3, help="the step at which the fault strikes")
p.add_argument("--steps", type=int, default=6)
p.add_argument("--timeout", type=float, default=10.0, help="seconds any rendezvous or collective may wait")
args = p.parse_args()

world = slurm_world()   # ranks from Slurm's variables, rank 0's node, a port from the job id
rank, size = world.rank, world.world_size
fault, bad = args.fault, args.rank % size
if fault == "mystery":
    bad, fault = planted(int(os.environ["SLURM_JOB_ID"]), size), "io"
faulty = rank == bad and fault != "none"
host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
os.environ.update(MASTER_ADDR=NOWHERE if faulty and fault == "addr" else world.master_addr,
                  MASTER_PORT=str(world.master_port))
print(f"rank={rank} host={host} pid={os.getpid()} looks for rank 0 at "
      f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
check_resolves(os.environ["MASTER_ADDR"], world.master_port)   # a name that does not resolve fails at once
device = pick_device(world.local_rank)   # this rank's GPU, or the CPU
dist.init_process_group(backend_for(device), rank=rank, world_size=size, device_id=device_id_for(device),
                        timeout=datetime.timedelta(seconds=args.timeout * (3 if faulty and fault == "addr" else 1)))


def read_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch for the step. (In the mystery fault one rank's file system never answers.)"""
    if faulty and fault == "io" and step == args.at_step:
        time.sleep(3600)   # stands for a read that never returns: a hung file system, a deadlocked loader
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(64, 16, generator=g)
    return x.to(device), x[:, :4].sum(dim=1, keepdim=True).to(device)


def average_gradients(model: torch.nn.Module) -> None:
    """All-reduce the gradients, flattened into one buffer, and divide by the number of ranks."""
    grads = [q.grad for q in model.parameters()]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat)                 # every rank must call this, with a buffer of the same size
    flat /= size
    torch.nn.utils.vector_to_parameters(flat, grads)


torch.manual_seed(0)
width = 48 if faulty and fault == "shape" else 32   # the shape fault: a rank built another model
model = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.Tanh(), torch.nn.Linear(width, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
last = args.at_step if faulty and fault == "skip" else args.steps   # the skip fault: one batch less

def train() -> None:
    """The training loop, then the final barrier."""
    for step in range(last):
        if faulty and fault == "die" and step == args.at_step:
            print(f"rank={rank} host={host} step={step} is killed now", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = read_batch(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()
        print(f"rank={rank} host={host} step={step} loss={loss.item():.4f}", flush=True)
    dist.barrier()                            # every rank, once its training is done


try:
    train()
except RuntimeError:   # a collective failed (its timeout, a peer gone): keep this rank's record of them
    if dist.get_backend() == "gloo":   # NCCL's watchdog writes it itself (TORCH_NCCL_DUMP_ON_TIMEOUT=1)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # srun --kill-on-bad-exit: the dump first
        dump_flight_recorder(rank)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise
print(f"rank={rank} host={host} done", flush=True)
leave()   # destroy the process group and exit (hpcnb.lessons.distributed.leave says why not a plain return)
