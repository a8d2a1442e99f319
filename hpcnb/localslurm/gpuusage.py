"""Each step's GPU use, read from NVML (``nvidia-ml-py``, the library ``nvidia-smi`` uses), as a
Slurm 24.11 with ``AccountingStorageTRES=gres/gpumem,gres/gpuutil`` records it: the utilisation of
the GPUs its processes use (mean and peak) and their memory (mean and peak), which sacct prints in
TRESUsageInAve/TRESUsageInMax.

The supervisor samples only where NVML loads, the job has GPUs and NVML sees them;
:meth:`GpuSampler.open` says why not otherwise (a CPU machine: no NVIDIA driver).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from hpcnb.slurm.record import Record


class StepGpuUse(Record):
    """One step's samples: utilisation in % (the mean over its GPUs), memory in bytes (summed over them)."""

    samples: int = 0
    util_total: float = 0.0
    util_max: float = 0.0
    mem_total: int = 0
    mem_max: int = 0

    def add(self, util: float, mem: int) -> None:
        self.samples += 1
        self.util_total += util
        self.util_max = max(self.util_max, util)
        self.mem_total += mem
        self.mem_max = max(self.mem_max, mem)

    @property
    def util_ave(self) -> float:
        return self.util_total / self.samples if self.samples else 0.0

    @property
    def mem_ave(self) -> int:
        return self.mem_total // self.samples if self.samples else 0


def load_nvml() -> tuple[Any | None, str]:
    """The ``pynvml`` module with NVML started, or None and why not."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return None, f"NVML does not start ({err}): no NVIDIA driver here"
    return pynvml, "NVML started"


class GpuSampler:
    """Samples the job's GPUs; :attr:`steps` holds what each step used."""

    def __init__(self, nvml: Any, indices: Iterable[int]) -> None:
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.steps: dict[str, StepGpuUse] = {}

    @classmethod
    def open(cls, gpu_indices: Iterable[int]) -> tuple[GpuSampler | None, str]:
        """A sampler of those of ``gpu_indices`` that NVML sees, or None and why not."""
        wanted = sorted(set(gpu_indices))
        if not wanted:
            return None, "the job has no GPUs"
        nvml, why = load_nvml()
        if nvml is None:
            return None, why
        try:
            count = nvml.nvmlDeviceGetCount()
            seen = [i for i in wanted if i < count]
            if seen:
                return cls(nvml, seen), f"sampling GPU(s) {','.join(map(str, seen))} with NVML"
            why = f"NVML sees {count} GPU(s), none of the job's ({','.join(map(str, wanted))})"
        except nvml.NVMLError as err:
            why = f"NVML cannot read the GPUs ({err})"
        nvml.nvmlShutdown()
        return None, why

    def sample(self, step_of: Callable[[int], str | None]) -> None:
        """One sample of every GPU: a step with a process on a GPU gets that GPU's utilisation and
        its processes' memory there (NVML's ``usedGpuMemory``). ``step_of(pid)`` is asked after NVML
        lists the process, so it is judged as it is then (not as it was before it exec'd)."""
        utils: dict[str, list[float]] = {}
        mems: dict[str, int] = {}
        for handle in self.handles:
            try:
                util = float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                running = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except self.nvml.NVMLError:
                continue  # a GPU that fell off the bus: the others still count
            on_this: set[str] = set()
            for proc in running:
                step = step_of(proc.pid)
                if step is not None:
                    on_this.add(step)
                    mems[step] = mems.get(step, 0) + (proc.usedGpuMemory or 0)
            for step in on_this:
                utils.setdefault(step, []).append(util)
        for step, values in utils.items():
            self.steps.setdefault(step, StepGpuUse()).add(sum(values) / len(values), mems[step])

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
