"""A training job that survives time limits, preemption and requeueing (lesson 12).

    python -m hpcnb.scripts.ckpt_train --ckpt-dir ckpt --steps 40

* On start it resumes from the newest checkpoint in ``--ckpt-dir`` (or starts fresh) and says so.
* It saves a checkpoint every ``--every`` steps (atomically: :func:`hpcnb.lessons.checkpoint.atomic_save`).
* On ``SIGUSR1`` (``#SBATCH --signal=B:USR1@<seconds>``) it saves and asks Slurm to requeue the
  job (``scontrol requeue $SLURM_JOB_ID``); on ``SIGTERM`` (preemption, ``scancel``, the time
  limit) it saves and exits — a preempted ``--requeue`` job is requeued by Slurm itself. A warning
  that comes before the first step of two runs in a row means a time limit too short for the
  start-up: it then saves and exits without a requeue.
* ``--steps-per-run K`` stops after K steps in one run (saving first): a link of a chain of jobs
  (``--array=1-N%1`` or ``--dependency=afterok``). A run that finds the training finished does
  nothing.
* At the end it writes ``--out`` (JSON: steps, loss, a checksum of the weights).

Training is deterministic — step ``i`` always sees the same batch, one thread — so a run that
was interrupted and resumed ends with exactly the weights of one that was never interrupted.
``--step-seconds`` paces each step to at least that long, to stand in for a heavier model.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from hpcnb.lessons.checkpoint import Checkpointer, SignalGuard, restart_count


def weights_checksum(model) -> str:
    """A short hash of the weights' exact bytes: equal only for bit-identical weights."""
    import hashlib

    h = hashlib.sha256()
    for tensor in model.state_dict().values():
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def stalled_twice(ckpt_dir: str) -> bool:
    """Whether the run before this one, too, was warned before its first step; notes this run's
    number in ``ckpt_dir/warned-before-training`` for the next one to ask."""
    mark = Path(ckpt_dir) / "warned-before-training"
    run = restart_count()
    try:
        before = mark.read_text().strip()
    except OSError:
        before = ""
    mark.write_text(f"{run}\n")
    return before == str(run - 1)


def main(argv: list[str] | None = None) -> int:
    # Catch the signals first: one that arrived while torch is still importing would
    # otherwise kill the process (SIGUSR1's default action is to terminate).
    guard = SignalGuard(("SIGUSR1", "SIGTERM"), requeue_on=("SIGUSR1",))
    try:
        return train(guard, argv)
    finally:
        guard.ignore()  # done: a late signal must not turn a finished job into a failed one


def train(guard: SignalGuard, argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpcnb.scripts.ckpt_train", description=__doc__.split("\n")[0])
    p.add_argument("--ckpt-dir", default="ckpt")
    p.add_argument("--steps", type=int, default=40, help="total steps of the whole training")
    p.add_argument("--steps-per-run", type=int, default=None, help="stop after this many steps in one run")
    p.add_argument("--every", type=int, default=5, help="save a checkpoint every N steps")
    p.add_argument("--step-seconds", type=float, default=0.1, help="make each step last at least this long")
    p.add_argument("--keep", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON summary written when the training is finished")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    job = os.environ.get("SLURM_JOB_ID", "-")
    array = os.environ.get("SLURM_ARRAY_TASK_ID")
    who = f"job {job}" + (f" (array task {array})" if array else "") + f", run {restart_count() + 1}"
    where = os.environ.get("SLURMD_NODENAME", "here")

    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(32, 4, generator=g)
    eval_x = torch.randn(512, 32, generator=g)
    eval_y = (eval_x @ teacher).argmax(dim=1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    ck = Checkpointer(args.ckpt_dir, keep=args.keep)
    start = ck.restore(model, opt)
    if start >= args.steps:
        print(f"{who} on {where}: the training is already finished (step {start} of {args.steps})", flush=True)
        return 0
    if start:
        print(f"{who} on {where}: resuming from step {start} ({ck.restored_from.name})", flush=True)
    else:
        print(f"{who} on {where}: no checkpoint, starting at step 0", flush=True)
    stop = args.steps if args.steps_per_run is None else min(args.steps, start + args.steps_per_run)

    def loss_now() -> float:
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(model(eval_x), eval_y).item()

    warned_before_start = guard.triggered  # a signal during start-up (imports, restore)
    for step in range(start, stop):
        began = time.monotonic()
        bg = torch.Generator().manual_seed(1000 + step)  # batch `step` is always the same batch
        x = torch.randn(64, 32, generator=bg)
        y = (x @ teacher).argmax(dim=1)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done = step + 1
        rest = args.step_seconds - (time.monotonic() - began)
        if rest > 0 and not guard.triggered:
            time.sleep(rest)
        if guard.triggered and done < args.steps:  # at the last step: finish, nothing left to requeue for
            ck.save(done, model, opt)
            if guard.should_requeue and warned_before_start:
                # The warning came before this run had started training: start-up took longer than
                # the time the job has before its warning. Once may be a slow start (a cold file
                # cache, a busy node); twice in a row, requeueing would only repeat it.
                if stalled_twice(args.ckpt_dir):
                    print(f"{guard.signal} arrived before the first step of this run and of the one before: "
                          f"the job's time limit leaves too little time after start-up; not requeueing "
                          f"(give it a longer --time)", flush=True)
                    guard.finish(requeue=False)
                print(f"{guard.signal} arrived before the first step of this run: a slow start? "
                      f"One more run (not two, if the next one starts as slowly)", flush=True)
            then = "asking Slurm to requeue the job" if guard.should_requeue else "exiting"
            print(f"{guard.signal} after step {done}: checkpoint saved, {then}", flush=True)
            guard.finish()
        if done % args.every == 0 and done < stop:
            ck.save(done, model, opt)
            print(f"step {done}: loss {loss_now():.4f}, checkpoint saved", flush=True)

    ck.save(stop, model, opt)
    if stop < args.steps:
        print(f"step {stop}: this run's share is done, checkpoint saved; {args.steps - stop} steps to go", flush=True)
        return 0
    final = {"steps": stop, "loss": round(loss_now(), 6), "checksum": weights_checksum(model),
             "job_id": job, "restarts": restart_count()}
    print(f"finished: step {stop}, loss {final['loss']:.4f}, weights checksum {final['checksum']}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(final, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
