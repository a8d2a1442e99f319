"""GPU requests as Slurm's options write them: ``--gres=gpu[:type][:N]`` and ``--gpus*=[type:]N``."""
from __future__ import annotations

__all__ = ["NotAGpu", "parse_gpus"]


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
