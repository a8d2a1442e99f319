"""hpcnb.lessons.distributed's device and backend choice (on a CPU machine, CUDA faked) and its exit."""
from __future__ import annotations

import ast
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


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py") if p.name != "__init__.py"))
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
