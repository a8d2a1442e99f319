"""hpcnb: the helper package of the course "Deep learning on Slurm clusters".

`import hpcnb` stays light: heavy modules (torch, matplotlib, widgets) load only when used.
The public job API lives in :mod:`hpcnb.jobs`; the embedded local Slurm in :mod:`hpcnb.localslurm`;
Slurm's language in :mod:`hpcnb.slurm`; the lesson helpers in :mod:`hpcnb.lessons` (``hpcnb.setup()``,
every lesson's first line); grading and the course's kernel in :mod:`hpcnb.course` (ARCHITECTURE.md).
"""
from __future__ import annotations

import importlib
import sys
from importlib.machinery import ModuleSpec
from types import CodeType, ModuleType
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

# Modules that moved into their rooms keep their old names (``import hpcnb.tuning``, ``from hpcnb
# import grading``), for notebooks written before: the old name gives the same module object.
MOVED = {
    **{name: f"hpcnb.lessons.{name}" for name in (
        "checkpoint", "distributed", "precision", "scaling", "softenv", "storage", "stragglers",
        "training", "tuning", "tunnel")},
    **{name: f"hpcnb.course.{name}" for name in ("grading", "kernel", "sandbox")},
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        return module if name == "lint" else getattr(module, name)
    if name in MOVED:
        return importlib.import_module(MOVED[name])
    raise AttributeError(f"module 'hpcnb' has no attribute {name!r}")


class _OldNames:
    """``import hpcnb.<old name>``: the module at its new place, under both names (a meta path
    finder and its loader)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        old = fullname.removeprefix("hpcnb.")
        return ModuleSpec(fullname, self, origin=_new_spec(fullname).origin) if old in MOVED else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name.removeprefix("hpcnb.")])
        spec.loader_state = module.__spec__  # import sets __spec__ to the old name's: restored below
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, fullname: str) -> CodeType | None:
        """``python -m hpcnb.<old name>`` (a kernelspec or a script from before the move) runs the
        module at its new place."""
        new = _new_spec(fullname)
        return new.loader.get_code(new.name)


def _new_spec(old_fullname: str) -> ModuleSpec:
    """The spec of the module that ``hpcnb.<old name>`` moved to."""
    import importlib.util  # only for an old name: ``import hpcnb`` stays light

    return importlib.util.find_spec(MOVED[old_fullname.removeprefix("hpcnb.")])


if not any(isinstance(finder, _OldNames) for finder in sys.meta_path):
    sys.meta_path.append(_OldNames())
