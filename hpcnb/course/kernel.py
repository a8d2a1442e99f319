"""The course's Jupyter kernel: an ipykernel whose PATH finds the chosen Slurm first.

``hpcnb kernel install`` registers it; the kernel then runs ``python -m hpcnb.course.kernel -f <file>``,
which picks local or real Slurm (HPCNB_SLURM) and execs the ordinary ipykernel, on the local Slurm with
the node names resolving as on a login node (:func:`hpcnb.backend.login_env`).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

KERNEL_NAME = "hpcnb"


def install(user: bool = False, prefix: str | None = None) -> str:
    from jupyter_client.kernelspec import KernelSpecManager

    spec = {
        "argv": [sys.executable, "-m", "hpcnb.course.kernel", "-f", "{connection_file}"],
        "display_name": "Python 3 (hpcnb: Slurm course)",
        "language": "python",
        "metadata": {"debugger": True},
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / KERNEL_NAME
        folder.mkdir()
        (folder / "kernel.json").write_text(json.dumps(spec, indent=1))
        return KernelSpecManager().install_kernel_spec(
            str(folder), KERNEL_NAME, user=user, prefix=prefix or (None if user else sys.prefix)
        )


def main(argv: list[str]) -> None:
    from hpcnb.backend import login_env

    env = login_env()  # (its node names resolve in the kernel itself: nss_wrapper is preloaded at start)
    os.execve(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv], env)


if __name__ == "__main__":
    main(sys.argv[1:])
