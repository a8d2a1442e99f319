"""The local Slurm's commands. Each module has ``main(argv) -> int``; errors print like Slurm's."""
from __future__ import annotations

import importlib
import sys

from ..db import StateError

COMMANDS = ("sbatch", "srun", "salloc", "squeue", "sacct", "scancel", "scontrol", "sinfo")


def run(name: str, argv: list[str]) -> int:
    """Run one command; a damaged state file or an interrupt gives a clear message, never a traceback."""
    module = importlib.import_module(f"{__name__}.{name}")
    try:
        return module.main(argv)
    except StateError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1


def error(command: str, *lines: str) -> None:
    for line in lines:
        print(f"{command}: error: {line}", file=sys.stderr)
