"""Lightning DDP on 2 nodes x 2 processes (CPU): each rank reports what Lightning made of Slurm."""
import os
import warnings

import torch
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        x, y = batch
        return ((self.layer(x) - y) ** 2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


pl.seed_everything(0, verbose=False)
gen = torch.Generator().manual_seed(7)
x = torch.randn(256, 8, generator=gen)
data = TensorDataset(x, x.sum(dim=1, keepdim=True))
trainer = pl.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", max_epochs=2,
                     enable_progress_bar=False, enable_model_summary=False, logger=False,
                     enable_checkpointing=False, deterministic=True)
model = Tiny()
trainer.fit(model, DataLoader(data, batch_size=16, shuffle=False))
env = trainer.strategy.cluster_environment
print(f"rank {trainer.global_rank}/{trainer.world_size} node_rank {trainer.node_rank} "
      f"local {trainer.local_rank} env {type(env).__name__} master {env.main_address} "
      f"job {'ok' if env.job_id() == int(os.environ['SLURM_JOB_ID']) else 'wrong'}", flush=True)
if trainer.global_rank == 0:
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    print(f"weights {' '.join(f'{w:.5f}' for w in weights.tolist())}", flush=True)
