"""hpcnb.lessons.training and the job-side scripts of lessons 8-10 (hpcnb.scripts).

* the helpers: deterministic data and model, the thread count per process, results and weight
  comparisons, and that ``import hpcnb.lessons.training`` stays free of torch;
* DDP correctness with the lesson's own script, without Slurm: 2 processes (torchrun's
  variables set by hand) end with the weights of 1 process with the same global batch;
* the scripts as the lessons run them, as real jobs on the local Slurm: ``srun`` on 2 nodes,
  ``torchrun`` with one launcher per node, Lightning's ``Trainer(num_nodes=2, devices=2)``, and
  Horovod under ``horovodrun --gloo`` (skipped when Horovod is not installed) — all with the
  same final weights as the single-process run.
"""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, run

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed (extra [dl])")
needs_lightning = pytest.mark.skipif(importlib.util.find_spec("pytorch_lightning") is None,
                                     reason="pytorch-lightning not installed (extra [dl])")


def _horovod_ok() -> bool:
    try:
        import horovod.torch  # noqa: F401
    except ImportError:
        return False
    return True


TOLERANCE = 1e-5  # float32 sums taken in a different order; the weights are of order 0.1


def test_import_stays_light() -> None:
    code = "import sys, hpcnb.lessons.training, hpcnb.scripts; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_threads_for_process() -> None:
    from hpcnb.lessons.training import threads_for_process

    assert threads_for_process({}) == 1
    assert threads_for_process({"SLURM_CPUS_PER_TASK": "4"}) == 4
    assert threads_for_process({"SLURM_CPUS_PER_TASK": "4", "LOCAL_WORLD_SIZE": "2"}) == 2  # torchrun's workers
    assert threads_for_process({"SLURM_CPUS_PER_TASK": "2", "LOCAL_WORLD_SIZE": "4"}) == 1


@needs_torch
def test_data_and_model_are_deterministic() -> None:
    import torch

    from hpcnb.lessons import training

    a, b = training.make_dataset(samples=64), training.make_dataset(samples=64)
    assert all(torch.equal(x, y) for x, y in zip(a.tensors, b.tensors))
    assert not torch.equal(a.tensors[0], training.make_dataset(samples=64, seed=1).tensors[0])
    state = torch.random.get_rng_state()
    m1, m2 = training.make_model(hidden=8), training.make_model(hidden=8)
    assert torch.equal(state, torch.random.get_rng_state()), "make_model must not disturb the global RNG"
    assert training.max_weight_difference(m1, m2) == 0.0
    assert training.max_weight_difference(m1, training.make_model(hidden=8, seed=1)) > 0.01
    with pytest.raises(ValueError):
        training.max_weight_difference(m1, training.make_model(hidden=9))


@needs_torch
def test_train_epoch_lowers_the_loss_and_results_round_trip(tmp_path: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    from hpcnb.lessons import training

    data = training.make_dataset(samples=512)
    model = training.make_model(hidden=64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = training.full_loss(model, data)
    mean = training.train_epoch(model, DataLoader(data, batch_size=32, shuffle=True), optimizer)
    after = training.full_loss(model, data)
    assert after < before and mean > 0
    out = training.save_result(tmp_path / "sub" / "r", model, world_size=1, losses=[after])
    assert out.name == "r.json" and (tmp_path / "sub" / "r.pt").is_file()
    assert training.load_result(tmp_path / "sub" / "r") == {"world_size": 1, "losses": [after]}
    assert training.max_weight_difference(model, tmp_path / "sub" / "r") == 0.0
    wrapped = torch.nn.Module()
    wrapped.module = model  # looks like a DDP wrapper: compared through .module
    assert training.max_weight_difference(wrapped, str(tmp_path / "sub" / "r")) == 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ddp_by_hand(tmp_path: Path, world_size: int, out: str) -> None:
    """Start world_size processes of hpcnb.scripts.ddp_train with torchrun's variables, no Slurm."""
    port = str(_free_port())
    procs = []
    for rank in range(world_size):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "hpcnb.scripts.ddp_train", "--epochs", "1", "--batch", "64", "--out", out],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)


@needs_torch
def test_ddp_two_ranks_equal_one_rank_with_the_global_batch(tmp_path: Path) -> None:
    from hpcnb.lessons import training

    _run_ddp_by_hand(tmp_path, 1, "one")
    _run_ddp_by_hand(tmp_path, 2, "two")
    one, two = training.load_result(tmp_path / "one"), training.load_result(tmp_path / "two")
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert training.max_weight_difference(tmp_path / "one", tmp_path / "two") < TOLERANCE
    assert abs(one["losses"][-1] - two["losses"][-1]) < 1e-6
    # and training did something: the weights moved away from the initial ones
    assert training.max_weight_difference(training.make_model(), tmp_path / "one") > 1e-3


def _job(args: list[str], workdir: Path, timeout: float = 300) -> str:
    done = run(["sbatch", "--wait", "--time=5:00", "-o", "job-%j.out", *args], timeout=timeout)
    out = "\n".join(p.read_text() for p in sorted(workdir.glob("job-*.out")))
    assert done.returncode == 0, out
    for p in workdir.glob("job-*.out"):
        p.unlink()
    return out


@needs_torch
@pytest.mark.slow
def test_ddp_script_srun_and_torchrun_on_two_nodes(workdir: Path) -> None:
    from hpcnb.lessons import training

    py = sys.executable
    bin_dir = Path(py).parent
    env_path = f"export PATH={bin_dir}:$PATH; "
    _job(["-N1", "--ntasks-per-node=1", "--wrap", f"srun {py} -m hpcnb.scripts.ddp_train --out one"], workdir)
    out = _job(["-N2", "--ntasks-per-node=2", "--wrap",
                f"srun {py} -m hpcnb.scripts.ddp_train --out four --tensorboard runs"], workdir)
    four = training.load_result(workdir / "four")
    assert four["world_size"] == 4 and four["nodes"] == ["node1", "node2"] and four["launcher"] == "srun", out
    if importlib.util.find_spec("tensorboard"):  # rank 0 alone wrote: one event file, every step's loss
        from hpcnb.lessons import tensorboard

        assert tensorboard.event_files(workdir / "runs") == {"four": 1}
        curves = tensorboard.read_scalars(workdir / "runs")["four"]
        assert [v for _, v in curves["epoch/loss"]] == pytest.approx(four["losses"], rel=1e-5)
        assert [s for s, _ in curves["train/batch_loss"]] == list(range(len(curves["train/batch_loss"])))
        steps = len(curves["train/batch_loss"])
        assert steps >= 3 and steps % 3 == 0, "as many steps in each of the 3 epochs"
    assert len(four["epoch_seconds"]) == four["epochs"] == 3 and sum(four["epoch_seconds"]) <= four["seconds"]
    assert out.count("trained in") == 1, "only rank 0 reports"
    script = (
        env_path
        + 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1); '
        + "export MASTER_PORT=$(( 16000 + SLURM_JOB_ID % 16000 )); "
        + "srun --ntasks-per-node=1 --cpus-per-task=$SLURM_CPUS_PER_TASK torchrun --nnodes=$SLURM_NNODES "
        + "--nproc-per-node=2 --rdzv-id=$SLURM_JOB_ID --rdzv-backend=c10d "
        + "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT -m hpcnb.scripts.ddp_train --out tr"
    )
    out = _job(["-N2", "--ntasks-per-node=1", "--cpus-per-task=2", "--wrap", script], workdir)
    tr = training.load_result(workdir / "tr")
    assert tr["world_size"] == 4 and tr["launcher"] == "torchrun" and tr["nodes"] == ["node1", "node2"], out
    for other in ("four", "tr"):
        assert training.max_weight_difference(workdir / "one", workdir / other) < TOLERANCE, other


@needs_torch
@pytest.mark.slow
def test_ddp_node_and_single_scripts(workdir: Path) -> None:
    from hpcnb.lessons import training

    py = sys.executable
    _job(["-N1", "--ntasks-per-node=2", "--wrap", f"srun {py} -m hpcnb.scripts.ddp_node_train --out node"], workdir)
    _job(["-N1", "--ntasks-per-node=1", "--wrap", f"srun {py} -m hpcnb.scripts.ddp_node_train --out one"], workdir)
    _job(["-N1", "--ntasks-per-node=1", "--wrap", f"srun {py} -m hpcnb.scripts.single_train --out single"], workdir)
    assert training.load_result(workdir / "node")["world_size"] == 2
    assert training.max_weight_difference(workdir / "one", workdir / "node") < TOLERANCE
    single = training.load_result(workdir / "single")
    # the single-process script shuffles differently (a plain DataLoader): same model, similar loss
    assert single["world_size"] == 1 and len(single["losses"]) == 3
    assert single["losses"][-1] < 2 * training.load_result(workdir / "one")["losses"][-1]


@needs_lightning
@pytest.mark.slow
def test_lightning_on_two_nodes_matches_ddp_and_sees_slurm(workdir: Path) -> None:
    from hpcnb.lessons import training

    py = sys.executable
    out = _job(["-N2", "--ntasks-per-node=2", "--wrap",
                f"srun {py} -m hpcnb.scripts.lightning_train --devices 2 --out light"], workdir)
    processes = sorted(line for line in out.splitlines() if line.startswith("process "))
    assert len(processes) == 4 and all("SLURMEnvironment" in p for p in processes), out
    assert {p.split("global rank ")[1].split()[0] for p in processes} == {"0", "1", "2", "3"}
    _job(["-N1", "--ntasks-per-node=1", "--wrap", f"srun {py} -m hpcnb.scripts.ddp_train --out ddp"], workdir)
    assert training.max_weight_difference(workdir / "ddp", workdir / "light") < TOLERANCE


@needs_lightning
@pytest.mark.slow
def test_lightning_interactive_name_and_mismatch(workdir: Path) -> None:
    py = sys.executable
    out = _job(["-J", "interactive", "-N1", "--ntasks-per-node=2", "--wrap",
                f"srun {py} -m hpcnb.scripts.lightning_train --devices 2 --inspect"], workdir)
    processes = [line for line in out.splitlines() if line.startswith("process ")]
    assert len(processes) == 2 and all("LightningEnvironment, global rank 0 of 2" in p for p in processes), out
    done = run(["sbatch", "--wait", "--time=5:00", "-o", "bad-%j.out", "-N1", "--ntasks-per-node=1", "--wrap",
                f"srun {py} -m hpcnb.scripts.lightning_train --devices 2 --epochs 1"], timeout=300)
    assert done.returncode != 0
    text = next(workdir.glob("bad-*.out")).read_text()
    assert "ValueError: You set `devices=2` in Lightning" in text, text


@needs_lightning
@pytest.mark.slow
def test_lightning_requeue_on_sigusr1_resumes(workdir: Path) -> None:
    """The lesson's requeue demonstration: SIGUSR1 -> hpc checkpoint + scontrol requeue -> resumed run."""
    from hpcnb.lessons import training
    from hpcnb.jobs import submit

    job = submit(wrap=f"srun {sys.executable} -m hpcnb.scripts.lightning_train --devices 2 --epochs 3 --requeue "
                      "--root ckpt --step-seconds 0.1 --out rq",
                 nodes=1, ntasks_per_node=2, time="10:00", signal="SIGUSR1@90", requeue=True,
                 open_mode="append", output="rq-%j.out")
    deadline = time.monotonic() + 240
    log = workdir / f"rq-{job.id}.out"
    while not (log.exists() and "epoch 1 starts" in log.read_text()):
        assert not job.done, job.tail()
        assert time.monotonic() < deadline, job.tail()
        time.sleep(0.2)
    assert run(["scancel", "--signal=USR1", job.id]).returncode == 0
    assert job.wait(timeout=240, quiet=True) == "COMPLETED", job.tail(100)
    result = training.load_result(workdir / "rq")
    assert result["restarts"] == 1 and result["resumed_from"] == "hpc_ckpt_1.ckpt", result
    text = log.read_text()
    assert "Handling auto-requeue signal" in text and "Restoring states" in text, text


@needs_lightning
def test_lightning_requeue_survives_a_signal_during_its_imports(tmp_path: Path) -> None:
    """A requeued job's warning can come while torch still imports (CI, real 22.05: "tasks 0-1:
    User defined signal 1"); with --requeue the script records it from its first lines."""
    slurm = {"SLURM_JOB_ID": "1", "SLURM_JOB_NAME": "rq", "SLURM_NODELIST": "localhost", "SLURM_NTASKS": "1",
             "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
    env = dict(os.environ, PYTHONPATH=str(ROOT), **slurm)
    proc = subprocess.Popen([sys.executable, "-m", "hpcnb.scripts.lightning_train", "--requeue", "--inspect"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    usr1 = 1 << (signal.SIGUSR1 - 1)
    deadline = time.monotonic() + 60
    while not int(_proc_status(proc.pid).get("SigCgt", "0"), 16) & usr1:
        assert proc.poll() is None and time.monotonic() < deadline, "the script never handled SIGUSR1"
        time.sleep(0.01)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "SLURMEnvironment, global rank 0 of 1" in out, out


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


@needs_torch
@pytest.mark.slow
@pytest.mark.skipif(not _horovod_ok(), reason="Horovod not installed (bash ci/build-horovod.sh .venv)")
def test_horovod_gloo_matches_ddp(workdir: Path) -> None:
    """horovodrun on one node (lesson 10's exercises) trains as DDP does; across nodes it needs ssh,
    which the nodes of their own network do not have (as on many clusters): it stops at its check."""
    from hpcnb.lessons import training
    from hpcnb.localslurm import network

    py = sys.executable
    hosts = 'H=""; for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do H="$H$n:$SLURM_NTASKS_PER_NODE,"; done; '
    script = (f"export PATH={Path(py).parent}:$PATH; {hosts}"
              f"horovodrun --gloo -np $SLURM_NTASKS -H ${{H%,}} {py} -m hpcnb.scripts.horovod_train "
              "--batch-per-worker 32 --base-lr 0.025 --out hvd")
    out = _job(["-N1", "--ntasks-per-node=2", "--mem=2G", "--wrap", script], workdir)
    hvd = training.load_result(workdir / "hvd")
    assert hvd["world_size"] == 2 and hvd["lr"] == pytest.approx(0.05) and hvd["batch"] == 64, out
    assert hvd["hosts"] == ["node1", "node1"], out
    assert len(hvd["epoch_seconds"]) == hvd["epochs"] and min(hvd["epoch_seconds"]) > 0
    _job(["-N1", "--ntasks-per-node=1", "--wrap",
          f"srun {py} -m hpcnb.scripts.ddp_train --batch 64 --lr 0.05 --out ddp"], workdir)
    assert training.max_weight_difference(workdir / "ddp", workdir / "hvd") < TOLERANCE
    if network.running():
        done = run(["sbatch", "--wait", "--time=5:00", "-o", "two.out", "-N2", "--ntasks-per-node=1",
                    "--wrap", script.replace("--out hvd", "--out hvd2")], timeout=300)
        out = (workdir / "two.out").read_text()
        assert done.returncode != 0 and "ssh: connect to host node2 port 22: Connection refused" in out, out
        assert "could not connect to some hosts via ssh" in out and not (workdir / "hvd2.json").exists(), out


@needs_torch
@pytest.mark.slow
@pytest.mark.skipif(not _horovod_ok(), reason="Horovod not installed (bash ci/build-horovod.sh .venv)")
def test_horovod_under_srun_runs_a_slurm_task_per_worker(workdir: Path) -> None:
    """srun starts the workers (no horovodrun): each on the node Slurm placed it, as a task of step 0."""
    from hpcnb.lessons import training
    from hpcnb.localslurm import apart

    done = run(["sbatch", "--parsable", "--wait", "--time=5:00", "-o", "job-%j.out", "-N2", "--ntasks-per-node=2",
                "--wrap", f"srun -l {sys.executable} -m hpcnb.scripts.horovod_train --epochs 1 --out hvd"], timeout=300)
    job_id = done.stdout.strip().split(";")[0]
    out = (workdir / f"job-{job_id}.out").read_text()
    assert done.returncode == 0, out
    hvd = training.load_result(workdir / "hvd")
    assert hvd["world_size"] == 4 and hvd["launcher"] == "srun" and hvd["lr"] == pytest.approx(0.1), out
    if apart.mode() == "apart":
        assert hvd["hosts"] == ["node1", "node1", "node2", "node2"], out
    for rank in range(4):
        assert re.search(rf"(?m)^{rank}: rank {rank}/4 \(local rank {rank % 2}\) on \S+$", out), out
    steps = run(["sacct", "-j", job_id, "-n", "-P", "-o", "JobID,NTasks,NNodes,State"]).stdout
    assert f"{job_id}.0|4|2|COMPLETED" in steps.splitlines(), steps


@pytest.mark.skipif(not _horovod_ok(), reason="Horovod not installed (bash ci/build-horovod.sh .venv)")
def test_horovod_under_srun_needs_ranks_node_by_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Horovod numbers ranks node by node; a cyclic srun (rank 1 on node2) must fail, not train wrong."""
    from hpcnb.lessons import distributed

    monkeypatch.setattr(distributed, "hostnames", lambda nodelist: ["node1", "node2"])
    monkeypatch.delenv("HOROVOD_RANK", raising=False)
    for name, value in dict(SLURM_JOB_ID="7", SLURM_JOB_NODELIST="node[1-2]", SLURM_STEP_NODELIST="node[1-2]",
                            SLURM_PROCID="1", SLURM_LOCALID="0", SLURM_NODEID="1", SLURM_NTASKS="4",
                            SLURM_NNODES="2", SLURM_STEP_TASKS_PER_NODE="2(x2)").items():
        monkeypatch.setenv(name, value)
    with pytest.raises(distributed.SlurmContextError, match="rank 1 is task 0 of node2, where Horovod counts "
                                                            "ranks node by node: .*--distribution=block"):
        distributed.horovod_from_slurm()


def test_horovod_script_says_how_to_install_when_missing(tmp_path: Path) -> None:
    """Without Horovod, the script exits with the build command, not a bare ImportError."""
    fake = tmp_path / "horovod"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no horovod here')\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    done = subprocess.run([sys.executable, "-m", "hpcnb.scripts.horovod_train"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert done.returncode != 0
    assert "bash ci/build-horovod.sh .venv" in done.stderr, done.stderr


def test_a_ratio_comes_with_its_range_and_a_verdict_only_outside_it() -> None:
    from hpcnb.lessons.spread import ratio_range, verdict

    one, four = [0.9, 1.0, 1.2], [1.8, 2.0, 2.4]  # seconds per epoch: four processes are slower
    speedup, low, high = ratio_range(one, four)
    assert speedup == 0.5 and low == 0.9 / 2.4 and high == 1.2 / 1.8
    assert verdict(low, high, "faster", "slower") == "slower"
    assert verdict(*ratio_range(four, one)[1:], "faster", "slower") == "faster"
    assert "no conclusion" in verdict(*ratio_range([1.0, 1.3], [1.1, 1.2])[1:], "faster", "slower")
    with pytest.raises(ValueError):
        ratio_range([], four)
