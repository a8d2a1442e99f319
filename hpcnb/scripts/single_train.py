"""Train the tiny model on one device (a GPU if there is one, else the CPU)."""
import argparse
import time

import torch
from torch.utils.data import DataLoader

from hpcnb.lessons import training

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch", type=int, default=128, help="samples per optimizer step")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--out", default="result", help="writes OUT.json and OUT.pt")
args = parser.parse_args()

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
training.use_slurm_cpus()

data = training.make_dataset()
loader = DataLoader(data, batch_size=args.batch, shuffle=True,
                    generator=torch.Generator().manual_seed(training.SEED))
model = training.make_model().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

losses = []
start = time.perf_counter()
for epoch in range(args.epochs):
    training.train_epoch(model, loader, optimizer, device)
    losses.append(training.full_loss(model, data, device))
    print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)
seconds = time.perf_counter() - start

training.save_result(args.out, model, world_size=1, seconds=seconds, epochs=args.epochs,
                     batch=args.batch, lr=args.lr, losses=losses)
print(f"trained in {seconds:.2f} s", flush=True)
