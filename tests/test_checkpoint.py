"""hpcnb.lessons.checkpoint: atomic saves that survive a kill, resume of step and weights, signal handling."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from hpcnb.lessons.checkpoint import (  # noqa: E402
    Checkpointer, SignalGuard, atomic_save, latest_checkpoint, list_checkpoints, load_checkpoint,
    restart_count,
)

ROOT = Path(__file__).resolve().parent.parent

# A child process that saves {"version": 2, ...} to `target` and blocks in the middle of writing
# it (an object whose pickling waits), after announcing "writing" on stdout. The test kills it there.
_KILLED_WRITER = textwrap.dedent("""
    import sys, time
    import torch
    from hpcnb.lessons.checkpoint import atomic_save

    class Stall:
        def __reduce__(self):
            print("writing", flush=True)
            time.sleep(60)
            return (int, (0,))

    mode, target = sys.argv[1], sys.argv[2]
    obj = {"version": 2, "weights": torch.arange(1_000_000, dtype=torch.float32), "stall": Stall()}
    if mode == "atomic":
        atomic_save(obj, target)
    else:
        torch.save(obj, target)
""")


def _kill_mid_write(mode: str, target: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, mode, str(target)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "writing"
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def _model(seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def _train(model, opt, steps: range) -> None:
    for step in steps:
        g = torch.Generator().manual_seed(step)
        x = torch.randn(32, 8, generator=g)
        y = x[:, :2].sum(dim=1, keepdim=True).repeat(1, 2)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def _same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


# ------------------------------------------------------------------------------- atomic save

def test_atomic_save_survives_a_kill_mid_write(tmp_path: Path):
    target = tmp_path / "ckpt.pt"
    atomic_save({"version": 1, "weights": torch.ones(3)}, target)
    _kill_mid_write("atomic", target)
    # the half-written data went to a temporary file; the checkpoint itself is the old one, intact
    leftovers = [p.name for p in tmp_path.iterdir() if p != target]
    assert leftovers and all(".tmp-" in n for n in leftovers), leftovers
    state = load_checkpoint(target)
    assert state["version"] == 1 and torch.equal(state["weights"], torch.ones(3))


def test_a_plain_torch_save_killed_mid_write_loses_the_checkpoint(tmp_path: Path):
    """The failure atomic_save prevents: saving in place destroys the old file at once."""
    target = tmp_path / "ckpt.pt"
    torch.save({"version": 1, "weights": torch.ones(3)}, target)
    _kill_mid_write("plain", target)
    with pytest.raises(Exception):
        state = torch.load(target, weights_only=False)
        assert state["version"] == 1  # never reached: the file is truncated


def test_killed_save_is_invisible_to_resume_and_cleaned_up(tmp_path: Path):
    ck = Checkpointer(tmp_path, keep=5)
    model, opt = _model(), None
    ck.save(10, model)
    _kill_mid_write("atomic", tmp_path / "ckpt-00000020.pt")
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10]
    assert latest_checkpoint(tmp_path).name == "ckpt-00000010.pt"
    assert ck.restore(_model(1), opt) == 10
    ck.save(20, model)  # the next save removes the dead process's temporary file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000010.pt", "ckpt-00000020.pt"]


def test_atomic_save_failure_leaves_no_temporary_file(tmp_path: Path):
    target = tmp_path / "x.pt"
    atomic_save({"ok": 1}, target)
    with pytest.raises(Exception):
        atomic_save({"bad": lambda: 0}, target)  # a lambda cannot be pickled
    assert [p.name for p in tmp_path.iterdir()] == ["x.pt"]
    assert load_checkpoint(target) == {"ok": 1}


# ------------------------------------------------------------------------------- resume

def test_resume_restores_step_weights_and_optimizer(tmp_path: Path):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    _train(model, opt, range(0, 7))
    ck = Checkpointer(tmp_path)
    ck.save(7, model, opt, loss=0.5)

    fresh = _model(seed=123)
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.05, momentum=0.9)
    assert not _same_weights(fresh, model)
    step = Checkpointer(tmp_path).restore(fresh, fresh_opt)
    assert step == 7
    assert _same_weights(fresh, model)
    buf = [fresh_opt.state[p]["momentum_buffer"] for p in fresh.parameters()]
    assert all(torch.equal(a, opt.state[p]["momentum_buffer"]) for a, p in zip(buf, model.parameters()))


def test_interrupted_and_resumed_training_equals_uninterrupted(tmp_path: Path):
    ref = _model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    _train(ref, ref_opt, range(0, 12))

    # three "jobs", each resuming from the last one's checkpoint
    for chunk_end in (5, 9, 12):
        model = _model()  # each new process builds the model afresh; restore() overwrites it
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        ck = Checkpointer(tmp_path)
        start = ck.restore(model, opt)
        _train(model, opt, range(start, chunk_end))
        ck.save(chunk_end, model, opt)
    assert start == 9
    assert _same_weights(model, ref)


def test_restore_without_checkpoint_is_a_fresh_start(tmp_path: Path):
    model = _model()
    before = [t.clone() for t in model.state_dict().values()]
    ck = Checkpointer(tmp_path / "none-yet")
    assert ck.restore(model) == 0 and ck.restored_from is None
    assert all(torch.equal(a, b) for a, b in zip(before, model.state_dict().values()))


def test_keep_prunes_old_checkpoints_and_extra_roundtrips(tmp_path: Path):
    ck = Checkpointer(tmp_path, keep=2)
    model = _model()
    for step in (5, 10, 15, 20):
        ck.save(step, model, epoch=step // 5)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    (tmp_path / "ckpt-final.pt").write_text("not numbered")
    assert [s for s, _ in list_checkpoints(tmp_path)] == [15, 20]
    assert ck.restore(model) == 20 and ck.restored_extra == {"epoch": 4}
    with pytest.raises(ValueError):
        Checkpointer(tmp_path, keep=0)


def test_restart_count():
    assert restart_count({}) == 0
    assert restart_count({"SLURM_RESTART_COUNT": "3"}) == 3


# ------------------------------------------------------------------------------ signals

_GUARDED = textwrap.dedent("""
    import sys, time
    import torch
    from hpcnb.lessons.checkpoint import Checkpointer, SignalGuard

    guard = SignalGuard()
    model = torch.nn.Linear(2, 2)
    ck = Checkpointer(sys.argv[1])
    print("ready", flush=True)
    for step in range(1000):
        time.sleep(0.01)
        if guard.triggered:
            ck.save(step + 1, model)
            print(guard.signal, step + 1, flush=True)
            guard.finish()
""")


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGUSR1, 128 + signal.SIGUSR1)])
def test_signal_guard_checkpoints_then_exits(tmp_path: Path, sig: int, code: int):
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}  # SIGUSR1: no job to requeue
    proc = subprocess.Popen([sys.executable, "-c", _GUARDED, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    name, step = out.split()
    assert name == signal.Signals(sig).name
    assert proc.returncode == code, err
    assert latest_checkpoint(tmp_path).name == f"ckpt-{int(step):08d}.pt"
    if sig == signal.SIGUSR1:
        assert "not inside a Slurm job" in err


def test_signal_guard_restores_previous_handlers():
    before = signal.getsignal(signal.SIGUSR1)
    with SignalGuard(("USR1",)) as guard:
        assert signal.getsignal(signal.SIGUSR1) == guard._handle
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        assert guard.triggered and guard.signal == "SIGUSR1" and guard.should_requeue
    assert signal.getsignal(signal.SIGUSR1) == before


@pytest.mark.slow
def test_job_checkpoints_on_usr1_and_requeues_itself(tmp_path: Path):
    """On the local Slurm: --signal=B:USR1@N + --requeue; the job requeues itself until done.

    Each run has 30 s before its warning: start-up (torch's import) on a busy CI machine took more
    than 12 s, twice in a row, and the script then rightly refused to requeue."""
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH --time=0:40
        #SBATCH --signal=B:USR1@10
        #SBATCH --requeue
        #SBATCH --open-mode=append
        #SBATCH --output=job-%j.out
        exec {sys.executable} -m hpcnb.scripts.ckpt_train --ckpt-dir ckpt --steps 300 --every 50 --step-seconds 0.1 --out done.json
        """))
    res = subprocess.run(["sbatch", "--parsable", "--wait", str(script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    job = res.stdout.strip().split(";")[0]
    log = (tmp_path / f"job-{job}.out").read_text()
    assert res.returncode == 0, (res.stderr, log)
    assert "SIGUSR1 after step" in log and "asking Slurm to requeue" in log, log
    assert "run 2" in log and "resuming from step" in log, log
    done = json.loads((tmp_path / "done.json").read_text())
    assert done["steps"] == 300 and done["restarts"] >= 1
    # the same training, never interrupted, ends with bit-identical weights
    subprocess.run([sys.executable, "-m", "hpcnb.scripts.ckpt_train", "--ckpt-dir", "ref", "--steps", "300", "--every", "50",
                    "--step-seconds", "0", "--out", "ref.json"], cwd=tmp_path, check=True, capture_output=True)
    assert json.loads((tmp_path / "ref.json").read_text())["checksum"] == done["checksum"]


@pytest.mark.parametrize("slurm, command", [("local", "slurm preempt 42"), ("real", "scontrol requeue 42")])
def test_preempt_uses_the_local_admin_command_or_a_requeue(monkeypatch: pytest.MonkeyPatch, slurm: str,
                                                           command: str) -> None:
    import subprocess

    import hpcnb.backend
    import hpcnb.lessons.checkpoint as checkpoint

    seen = []

    def fake_run(argv: list[str], **_: object) -> subprocess.CompletedProcess:
        seen.append(" ".join(argv))
        return subprocess.CompletedProcess(argv, 1, "", "slurm_requeue error: Invalid job id specified")

    monkeypatch.setattr(hpcnb.backend, "which_slurm", lambda: slurm)
    monkeypatch.setattr(checkpoint.subprocess, "run", fake_run)
    with pytest.raises(RuntimeError, match="could not preempt job 42: slurm_requeue error: Invalid job id"):
        checkpoint.preempt(42)
    assert seen[0].endswith(command)
    assert checkpoint.requeue_demo_timing(1.5)[1] == ("0:20" if slurm == "local" else "0:03:00")


def test_a_slow_start_gets_longer_local_jobs_that_still_need_several_runs(monkeypatch):
    """Lesson 12 under load: each run must still start, train some steps and not all 240."""
    import hpcnb.backend
    import hpcnb.lessons.checkpoint as checkpoint

    monkeypatch.setattr(hpcnb.backend, "which_slurm", lambda: "local")
    for startup in (0.5, 3.0, 8.0, 15.0, 40.0):
        step_s, limit, warn = checkpoint.requeue_demo_timing(startup)
        minutes, seconds = map(int, limit.split(":"))
        seconds += 60 * minutes
        assert seconds - warn < 240 * step_s, (startup, limit, step_s)  # a run that starts at once
        assert seconds - warn - 2 * startup > 0  # room for a start twice as slow as measured
        assert warn >= 8 + (startup - 2) / 2  # and for saving and asking for the requeue as slowly
        two_runs = 2 * (seconds - warn - startup)  # two runs that start as fast as measured
        assert two_runs > 240 * step_s, (startup, limit, step_s)


def test_a_run_warned_before_training_is_requeued_once_more_not_twice(tmp_path: Path, monkeypatch):
    """One slow start earns one more run; two runs in a row warned before their first step do not
    requeue again (the time limit is too short for the start-up: requeueing would loop)."""
    from hpcnb.scripts.ckpt_train import stalled_twice

    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    assert not stalled_twice(str(tmp_path))  # run 1
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert stalled_twice(str(tmp_path))  # run 2, right after
    monkeypatch.setenv("SLURM_RESTART_COUNT", "3")
    assert not stalled_twice(str(tmp_path))  # run 4, after a run 3 that trained


class _GuardAtStep:
    """A SignalGuard stand-in whose signal is seen from the ``n``-th look on (one look at start-up,
    then one per step with --step-seconds 0)."""

    signal, should_requeue = "SIGUSR1", True

    def __init__(self, n: int) -> None:
        self.looks, self.n, self.finished = 0, n, False

    @property
    def triggered(self) -> bool:
        self.looks += 1
        return self.looks >= self.n

    def finish(self, requeue: bool = True) -> None:
        self.finished = True
        raise SystemExit(0)


def test_a_warning_at_the_last_step_finishes_instead_of_requeueing(tmp_path: Path, monkeypatch):
    """Lesson 12 at a busy CI machine: SIGUSR1 arrived after step 240 of 240; the run saved, asked for
    a requeue, and the next run found nothing to do: no result, no "finished" line."""
    from hpcnb.scripts.ckpt_train import train

    monkeypatch.chdir(tmp_path)
    args = ["--steps", "3", "--every", "5", "--step-seconds", "0", "--out", "done.json"]
    last = _GuardAtStep(1 + 3)
    assert train(last, args) == 0 and not last.finished
    assert json.loads((tmp_path / "done.json").read_text())["steps"] == 3
    earlier = _GuardAtStep(1 + 2)  # at step 2 of 3: save and requeue, as before
    with pytest.raises(SystemExit):
        train(earlier, [*args[:-1], "again.json", "--ckpt-dir", "ckpt2"])
    assert earlier.finished and not (tmp_path / "again.json").exists()
