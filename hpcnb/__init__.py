"""hpcnb: the helper package of the course "Deep learning on Slurm clusters".

`import hpcnb` stays light: heavy modules (torch, matplotlib, widgets) load only when used.
The public job API lives in :mod:`hpcnb.jobs`; the embedded local Slurm in :mod:`hpcnb.localslurm`;
what every lesson notebook shares in :mod:`hpcnb.lessons` (``hpcnb.setup()``, their first line).
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "submit": "hpcnb.jobs",
    "Job": "hpcnb.jobs",
    "JobScript": "hpcnb.jobscript",
    "lint": "hpcnb.lint",
    "load_profile": "hpcnb.sites",
    "which_slurm": "hpcnb.backend",
    "setup": "hpcnb.lessons",
    "work_folder": "hpcnb.lessons",
    "write_jobscript": "hpcnb.lessons.jobscripts",
    "processes_per_node": "hpcnb.lessons.jobscripts",
    "gpu_options": "hpcnb.lessons.jobscripts",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        return module if name == "lint" else getattr(module, name)
    raise AttributeError(f"module 'hpcnb' has no attribute {name!r}")
