"""What this task may use: the device, the CPUs Slurm gave it (never ``os.cpu_count()``), threads
and DataLoader workers from them, the precisions the device offers."""
from __future__ import annotations

import os
from collections.abc import Mapping



def device() -> str:
    """``"cuda"`` when PyTorch can use a GPU here, otherwise ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def gpu_note(dev: str, env: Mapping[str, str] | None = None) -> str:
    """What the GPU Slurm gave is, in words: ``"GPU 0: NVIDIA H200"``; on a machine with no GPU
    (the local Slurm on a laptop) ``"GPU slot 0, no device: runs on the CPU"``; ``"no GPU"`` when the
    job asked for none. (``CUDA_VISIBLE_DEVICES=0`` is an index, not a count.)"""
    env = os.environ if env is None else env
    given = (env.get("CUDA_VISIBLE_DEVICES") or "").strip()
    if not given:
        return "no GPU"
    if dev == "cuda":
        import torch

        return f"GPU {given}: {torch.cuda.get_device_name(0)}"
    return f"GPU slot {given}, no device: runs on the CPU"


def cpus_for_job(env: Mapping[str, str] | None = None) -> int:
    """The CPUs this task may use: ``SLURM_CPUS_PER_TASK`` inside a job (what ``-c`` asked for).

    Outside a job (or when the job did not ask with ``--cpus-per-task``) it is the CPUs this
    process may run on (``os.sched_getaffinity``). Never ``os.cpu_count()``: on a compute node
    that counts every core of the node, including the ones other people's jobs are using.
    """
    env = os.environ if env is None else env
    value = (env.get("SLURM_CPUS_PER_TASK") or "").strip()
    if value:
        try:
            cpus = int(value)
        except ValueError:
            raise ValueError(f"SLURM_CPUS_PER_TASK={value!r} is not a whole number") from None
        if cpus > 0:
            return cpus
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)  # macOS/Windows have no affinity call


def dataloader_workers(env: Mapping[str, str] | None = None, reserve: int = 0) -> int:
    """DataLoader workers for this task: one per CPU Slurm gave it, minus ``reserve``.

    The Alliance guide's rule: as many workers as ``--cpus-per-task``. Pass ``reserve=1`` to
    keep a CPU for the training process itself (useful when it computes on the CPU).
    """
    return max(0, cpus_for_job(env) - reserve)


def set_threads(env: Mapping[str, str] | None = None) -> int:
    """Let PyTorch's intra-op thread pool use exactly the CPUs of this task; returns that count."""
    import torch

    cpus = cpus_for_job(env)
    torch.set_num_threads(cpus)
    return cpus


def precisions(dev: str | None = None) -> list[str]:
    """The precisions worth comparing on this device (bf16 only where it is supported)."""
    import torch

    dev = dev or device()
    if dev == "cuda":
        return ["fp32", "fp16"] + (["bf16"] if torch.cuda.is_bf16_supported() else [])
    return ["fp32", "bf16"]
