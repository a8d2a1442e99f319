"""hpcnb.lessons.distributed's device and backend choice (on a CPU machine, CUDA faked) and its exit."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hpcnb.lessons import distributed

SCRIPTS = Path(distributed.__file__).parents[1] / "scripts"


class FakeCuda:
    """torch.cuda as a node with ``count`` visible GPUs would show it."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.current: torch.device | None = None

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: self.count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: self.count)
        monkeypatch.setattr(torch.cuda, "set_device", lambda device: setattr(self, "current", device))


@pytest.mark.parametrize(("visible", "local_rank", "index"), [
    (4, 0, 0), (4, 3, 3),  # every GPU of the node visible: task r takes GPU r
    (1, 0, 0), (1, 3, 0),  # --gpus-per-task=1 / --gpu-bind: each task sees its one GPU as cuda:0
    (2, 3, 1),  # two tasks' worth visible: wrap, never an index that does not exist
])
def test_pick_device_uses_the_gpus_this_task_sees(monkeypatch, visible, local_rank, index) -> None:
    cuda = FakeCuda(visible)
    cuda.install(monkeypatch)
    device = distributed.pick_device(local_rank)
    assert device == torch.device("cuda", index)
    assert cuda.current == device, "set_device must be called (NCCL uses the current device)"
    assert distributed.backend_for(device) == "nccl"


def test_pick_device_without_gpus_is_the_cpu_and_gloo(monkeypatch) -> None:
    FakeCuda(0).install(monkeypatch)
    device = distributed.pick_device(1)
    assert device == torch.device("cpu")
    assert distributed.backend_for(device) == "gloo"
    distributed.synchronize(device)  # a no-op on the CPU


def _calls(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


# Scripts run inside the course's container image, which has torch but not hpcnb (lesson 3b): instead of
# the helpers, their own name check (the same message), gloo by name, a timeout on the rendezvous, and
# their own leave (barrier, destroy, os._exit).
SELF_CONTAINED = {"container_ddp.py"}


def _init_keywords(tree: ast.AST) -> set[str]:
    return {k.arg for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "init_process_group" for k in n.keywords}


def test_self_contained_scripts_keep_the_rules_without_the_helpers() -> None:
    for script in sorted(SELF_CONTAINED):
        source = (SCRIPTS / script).read_text()
        tree = ast.parse(source)
        assert "hpcnb" not in {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                               for a in (n.names if isinstance(n, ast.Import) else [ast.alias(n.module or "")])}, script
        assert 'init_process_group("gloo"' in source and "timeout" in _init_keywords(tree), script
        assert {"barrier", "destroy_process_group", "_exit", "check_resolves"} <= _calls(tree), script


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")
                                          if p.name != "__init__.py" and p.name not in SELF_CONTAINED))
def test_no_job_script_can_pick_nccl_for_cpu_tensors(script: str) -> None:
    """A script that starts a process group takes its device from pick_device and its backend
    from that device (directly or through hpcnb.lessons.distributed.init_process_group), and leaves
    through hpcnb.lessons.distributed.leave (or Horovod's shutdown and os._exit); a Horovod script takes a GPU
    only when Horovod was built with NCCL."""
    source = (SCRIPTS / script).read_text()
    calls = _calls(ast.parse(source))
    assert '"nccl" if' not in source and "'nccl' if" not in source, "backend chosen apart from the device"
    if "import horovod" in source:  # a Horovod built without NCCL fails on CUDA tensors
        assert {"pick_device", "nccl_built"} <= calls, "Horovod: a GPU device only if it was built with NCCL"
    if "init_process_group" not in calls:
        return
    uses_helper = "from hpcnb.lessons.distributed import" in source and "init_process_group" in source.split(
        "from hpcnb.lessons.distributed import")[1].split("\n")[0]
    assert uses_helper or {"pick_device", "backend_for"} <= calls, "device and backend must come from one helper"
    assert "leave" in calls, "a process group must be left with hpcnb.lessons.distributed.leave()"


def test_leave_exits_with_the_code_after_flushing(tmp_path: Path) -> None:
    code = """
import os, sys, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
print("written before leaving", end="")  # no newline: only a flush gets it out
from hpcnb.lessons.distributed import leave
leave(3)
print("never")
"""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = subprocess.run([sys.executable, "-c", code, str(port)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "written before leaving"


UNRESOLVABLE = "hpcnb-no-such-node.invalid"  # .invalid never resolves (RFC 2606)
RENDEZVOUS_CALLS = {"init_process_group", "Trainer"}  # torch.distributed's, Lightning's (in fit)


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")
                                          if p.name != "__init__.py" and p.name not in SELF_CONTAINED))
def test_every_rendezvous_checks_the_name_first_and_binds_the_gpu(script: str) -> None:
    """A name c10d cannot resolve fails at once (check_resolves, itself or through the helper),
    and every init_process_group of torch gets the GPU as device_id (NCCL warns and guesses without)."""
    tree = ast.parse((SCRIPTS / script).read_text())
    calls = _calls(tree)
    if not calls & RENDEZVOUS_CALLS:
        return
    helper = {"init_process_group"} == calls & RENDEZVOUS_CALLS and not any(
        isinstance(n, ast.Attribute) and n.attr == "init_process_group" for n in ast.walk(tree))
    assert helper or "check_resolves" in calls, "check that the first node resolves before the rendezvous"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "init_process_group":
            assert "device_id" in {k.arg for k in node.keywords}, "init_process_group(..., device_id=device_id_for(device))"


@pytest.mark.parametrize(("visible", "device_id"), [(1, torch.device("cuda", 0)), (0, None)])
def test_the_helper_passes_the_gpu_as_device_id(monkeypatch, visible, device_id) -> None:
    FakeCuda(visible).install(monkeypatch)
    seen: dict = {}
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend, **kw: seen.update(kw, backend=backend))
    monkeypatch.setattr(distributed, "first_host", lambda nodelist: "localhost")
    for name, value in dict(SLURM_PROCID="0", SLURM_JOB_ID="7", SLURM_JOB_NODELIST="node1", SLURM_NTASKS="1").items():
        monkeypatch.setenv(name, value)
    for name in ("MASTER_ADDR", "MASTER_PORT"):  # the helper sets them: undone after the test, not left to others
        monkeypatch.setenv(name, "recorded")  # the value before the test (none) is what monkeypatch puts back
        monkeypatch.delenv(name)
    distributed.init_process_group()
    assert seen["device_id"] == device_id
    assert seen["backend"] == ("nccl" if visible else "gloo")


def test_the_helper_fails_at_once_where_the_first_node_does_not_resolve(monkeypatch) -> None:
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **kw: pytest.fail("rendezvous began"))
    monkeypatch.setattr(distributed, "first_host", lambda nodelist: UNRESOLVABLE)
    for name, value in dict(SLURM_PROCID="0", SLURM_JOB_ID="7", SLURM_JOB_NODELIST="node1").items():
        monkeypatch.setenv(name, value)
    with pytest.raises(distributed.SlurmContextError, match=f"'{UNRESOLVABLE}' does not resolve.*hpcnb check-names"):
        distributed.init_process_group()


@pytest.mark.parametrize(("script", "env"), [
    ("ddp_train", {"MASTER_ADDR": UNRESOLVABLE, "MASTER_PORT": "16007"}),
    ("lightning_train", {"SLURM_NODELIST": UNRESOLVABLE, "SLURM_JOB_NAME": "train", "SLURM_NTASKS_PER_NODE": "1"}),
    ("container_ddp", {"MASTER_ADDR": UNRESOLVABLE, "MASTER_PORT": "16007"}),  # self-contained: its own copy
])
def test_scripts_that_hung_on_an_unresolvable_node_now_fail_with_the_message(tmp_path: Path, script, env) -> None:
    """On the H200 (2026-11-27) these two sat in c10d's name-lookup retries until their timeout;
    the other scripts failed at once. Now every one says what is wrong and what to run."""
    slurm = dict(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_NTASKS="1", SLURM_NNODES="1",
                 SLURM_JOB_ID="7", SLURM_JOB_NODELIST=UNRESOLVABLE, CUDA_VISIBLE_DEVICES="")
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))} | slurm | env
    done = subprocess.run([sys.executable, "-m", f"hpcnb.scripts.{script}", "--epochs", "1", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=100, env=run_env, cwd=tmp_path)
    assert done.returncode != 0
    assert f"the first node '{UNRESOLVABLE}' does not resolve; on the local Slurm run `hpcnb check-names`" in done.stderr


def test_workers_wait_for_a_rendezvous_that_starts_late() -> None:
    """Horovod's own client gives up after 1.5 s; a rank 0 slow to start must not fail the others."""
    import socket
    import threading

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = socket.socket()
    late = threading.Timer(2.0, lambda: (server.bind(("127.0.0.1", port)), server.listen()))
    late.start()
    try:
        distributed.wait_for_server("127.0.0.1", port, timeout=30, what="the rendezvous")
    finally:
        late.join()
        server.close()
    with pytest.raises(distributed.SlurmContextError, match=rf"the rendezvous at 127.0.0.1:{port} did not answer in 1 s"):
        distributed.wait_for_server("127.0.0.1", port, timeout=1, what="the rendezvous")
