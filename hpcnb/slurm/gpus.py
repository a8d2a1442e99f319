"""GPU requests as Slurm's options write them: ``--gres=gpu[:type][:N]`` and ``--gpus*=[type:]N``;
GPU use as sacct prints it in TRESUsageInAve/TRESUsageInMax (``gres/gpumem=1340M,gres/gpuutil=87``,
recorded where ``AccountingStorageTRES=gres/gpumem,gres/gpuutil``)."""
from __future__ import annotations

from .sizes import format_size, parse_printed_size

__all__ = ["NotAGpu", "format_gpu_usage", "parse_gpu_usage", "parse_gpus", "parse_tres"]


class NotAGpu(ValueError):
    """``--gres`` names another resource (Slurm: ``Invalid generic resource (gres) specification``)."""


def parse_gpus(value: str, option: str) -> tuple[int, str | None]:
    """(count, type) of one ``--gres=gpu[:type][:N]`` item (N is 1 when left out) or of
    ``--gpus-per-node=[type:]N`` (``--gpus``, ``--gpus-per-task`` alike); a negative count counts 1,
    as with Slurm 22.05. Raises :class:`NotAGpu` for another gres, ValueError for a count that is
    no number or a field too many (Slurm 22.05's controller refuses such a job: captured)."""
    parts = value.split(":")
    if option == "--gres":
        if parts[0] != "gpu":
            raise NotAGpu(f"{option}={value}: not a GPU request")
        parts = parts[1:] or ["1"]
    try:
        count = int(parts[-1])
    except ValueError:
        raise ValueError(f"{option}={value}: the GPU count is not a whole number") from None
    if len(parts) > 2:
        raise ValueError(f"{option}={value}: more fields than [type:]count")
    return max(count, 1) if count < 0 else count, parts[0] if len(parts) == 2 else None


def format_gpu_usage(mem_bytes: int, util_percent: float) -> str:
    """The GPU part of a step's TRES usage as sacct 24.11 prints it: ``gres/gpumem=1340M,gres/gpuutil=87``."""
    return f"gres/gpumem={format_size(mem_bytes)},gres/gpuutil={round(util_percent)}"


def parse_gpu_usage(tres: str) -> tuple[int | None, float | None]:
    """(memory in bytes, utilisation in %) from a TRES usage string (``cpu=00:00:02,gres/gpumem=1340M,
    gres/gpuutil=87,mem=952K``); None for each that it does not name."""
    fields = parse_tres(tres)
    util = fields.get("gres/gpuutil", "")
    return parse_printed_size(fields.get("gres/gpumem", "")), float(util) if util.replace(".", "", 1).isdigit() else None


def parse_tres(tres: str) -> dict[str, str]:
    """A TRES string (``billing=2,cpu=2,gres/gpu=1,mem=6G,node=1``) as a dict of its fields."""
    return dict(item.split("=", 1) for item in tres.split(",") if "=" in item)
