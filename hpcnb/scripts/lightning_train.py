"""The tiny model as a LightningModule, trained by ``Trainer(num_nodes=..., devices=..., strategy="ddp")``.

Launch one process per device with srun (``--ntasks-per-node`` = ``--devices``); Lightning finds
ranks, world size, MASTER_ADDR and MASTER_PORT in Slurm's variables itself (SLURMEnvironment).

``--inspect`` builds the Trainer, prints what every process believes (cluster environment, ranks)
and stops without training. ``--slurm-env`` passes ``SLURMEnvironment()`` explicitly (used even when
the job is named ``interactive``). ``--requeue`` passes ``SLURMEnvironment(auto_requeue=True)``: on the
job's warning signal (``#SBATCH --signal=SIGUSR1@90``) Lightning saves ``hpc_ckpt_<n>.ckpt`` in
``--root`` and requeues the job; the next run resumes from it. :class:`RequeueAtStepEnd` makes
Lightning do that at the end of a training step rather than inside the signal handler.
"""
import argparse
import os
import signal
import sys
import time

# A warning signal that comes while torch is still importing would kill the process (SIGUSR1's
# default action): with --requeue, record it from the start; RequeueAtStepEnd acts on it.
early_signals: list[int] = []
if "--requeue" in sys.argv:
    signal.signal(signal.SIGUSR1, lambda signum, frame: early_signals.append(signum))

import pytorch_lightning as pl  # after the handler, on purpose
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from hpcnb.lessons import training
from hpcnb.lessons.distributed import check_resolves, leave

parser = argparse.ArgumentParser()
parser.add_argument("--nodes", type=int, default=int(os.environ.get("SLURM_NNODES", 1)))
parser.add_argument("--devices", type=int, default=1, help="processes (devices) per node")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch", type=int, default=128, help="samples per optimizer step, over all processes")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--out", default="result", help="writes OUT.json and OUT.pt")
parser.add_argument("--root", default="lightning", help="Trainer(default_root_dir=...): hpc checkpoints go here")
parser.add_argument("--inspect", action="store_true", help="print each process's view of the cluster, do not train")
parser.add_argument("--slurm-env", action="store_true", help="pass SLURMEnvironment explicitly, even if not detected")
parser.add_argument("--requeue", action="store_true", help="pass SLURMEnvironment(auto_requeue=True)")
parser.add_argument("--step-seconds", type=float, default=0.0, help="make every step last this long (demos)")
args = parser.parse_args()


class Regressor(pl.LightningModule):
    def __init__(self, lr: float, step_seconds: float = 0.0):
        super().__init__()
        self.net = training.make_model()
        self.lr, self.step_seconds = lr, step_seconds

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.step_seconds:
            time.sleep(self.step_seconds)  # stands in for a long step on a real model
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Timer(pl.Callback):
    """Seconds from the start to the end of training (setup and checkpoint restore excluded)."""

    def on_train_start(self, trainer, module):
        self.start = time.perf_counter()

    def on_train_epoch_start(self, trainer, module):
        if trainer.is_global_zero:
            print(f"epoch {trainer.current_epoch} starts at step {trainer.global_step}", flush=True)

    def on_train_end(self, trainer, module):
        self.seconds = time.perf_counter() - self.start


class RequeueAtStepEnd(pl.Callback):
    """Lightning's auto-requeue (checkpoint, then ``scontrol requeue``) at a step end every rank agrees on.

    Lightning's own handler saves the checkpoint, a collective, inside the signal handler: a rank
    signalled while its partner is in the gradients' all-reduce waits for it, and it for the rank,
    until the time limit. Installed before Lightning's (which then adds none), this handler only
    records the signal; after each step the ranks all-reduce the flag and, once any rank got the
    signal, all of them run Lightning's handler at the same point.
    """

    def __init__(self) -> None:
        self.signalled = bool(early_signals)

    def setup(self, trainer, module, stage):
        signal.signal(trainer.strategy.cluster_environment.requeue_signal, self._record)

    def _record(self, signum, frame):
        self.signalled = True

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        flag = torch.tensor([float(self.signalled)], device=module.device)
        if torch.distributed.is_initialized():
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if flag.item():
            self.signalled = False
            signum = int(trainer.strategy.cluster_environment.requeue_signal)
            trainer._signal_connector._slurm_sigusr_handler_fn(signum, None)  # Lightning's own requeue code


accelerator = "gpu" if torch.cuda.is_available() else "cpu"
training.use_slurm_cpus()
plugins = []
if args.slurm_env or args.requeue:
    from pytorch_lightning.plugins.environments import SLURMEnvironment

    plugins.append(SLURMEnvironment(auto_requeue=args.requeue))
timer = Timer()
callbacks = [timer, RequeueAtStepEnd()] if args.requeue else [timer]
trainer = pl.Trainer(
    num_nodes=args.nodes, devices=args.devices, strategy="ddp", accelerator=accelerator, plugins=plugins,
    max_epochs=args.epochs, default_root_dir=args.root, callbacks=callbacks,
    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
)
env = trainer.strategy.cluster_environment
print(f"process {os.environ.get('SLURM_PROCID', '?')} on {os.environ.get('SLURMD_NODENAME', '?')}: "
      f"{type(env).__name__}, global rank {trainer.global_rank} of {trainer.world_size}, "
      f"node rank {trainer.node_rank}, local rank {trainer.local_rank}, "
      f"rank 0 at {env.main_address}:{env.main_port}", flush=True)
if args.inspect:
    raise SystemExit(0)
check_resolves(env.main_address, env.main_port)  # at once, not after c10d's retries in fit()

pl.seed_everything(training.SEED, verbose=False)  # also the seed of the DistributedSampler Lightning adds
data = training.make_dataset()
loader = DataLoader(data, batch_size=args.batch // trainer.world_size, shuffle=True)
model = Regressor(args.lr, args.step_seconds)
trainer.fit(model, loader)

if trainer.is_global_zero:  # only rank 0 writes: every rank holds the same weights
    training.save_result(args.out, model.net, world_size=trainer.world_size, seconds=timer.seconds,
                         epochs=args.epochs, batch=args.batch, lr=args.lr,
                         losses=[training.full_loss(model.net, data)], cluster_environment=type(env).__name__,
                         resumed_from=os.path.basename(trainer.ckpt_path or "") or None,
                         restarts=int(os.environ.get("SLURM_RESTART_COUNT", 0)))
    print(f"trained in {timer.seconds:.2f} s; final loss {training.full_loss(model.net, data):.4f}", flush=True)

# Leave together, close the process group, and exit without Python's teardown, where gloo's threads
# can still abort the process ("terminate called ..."): see hpcnb.lessons.distributed.leave
leave()
