"""Lesson 3b: a container run for real, with Charliecloud (``srun ch-run IMAGE -- CMD``).

The course's image is a Charliecloud directory image (Debian 12, python3, torch CPU) that
``ci/build-container.sh`` builds on this machine from ``debootstrap`` and local wheels, with no
registry. :func:`image` finds it, :func:`runtime` says which ``ch-run`` runs it, and
:func:`describe` says both in a line, or what is missing and how to get it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

IMAGE_ENV = "HPCNB_CONTAINER_IMAGE"
CACHED_IMAGE = Path("/var/cache/hpcnb/containers/torch-cpu")
DDP_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "container_ddp.py"
BUILD_HINT = "sudo ci/build-container.sh (from the course's repository: about a minute, 1.2 GB)"


def image() -> Path | None:
    """The course's image: ``$HPCNB_CONTAINER_IMAGE``, else the one ``ci/build-container.sh`` built."""
    path = Path(os.environ.get(IMAGE_ENV) or CACHED_IMAGE)
    return path.resolve() if (path / "usr" / "bin" / "python3").exists() else None


def runtime() -> str | None:
    """``ch-run``'s version line, or ``None`` where Charliecloud is not installed."""
    if not shutil.which("ch-run"):
        return None
    env = {**os.environ, "USER": os.environ.get("USER") or "nobody"}  # ch-run refuses to start without $USER
    done = subprocess.run(["ch-run", "--version"], capture_output=True, text=True, timeout=30, env=env)
    return (done.stdout or done.stderr).strip() or None


def os_release(root: Path) -> str:
    """The image's ``PRETTY_NAME`` (its ``/etc/os-release``)."""
    lines = (root / "etc" / "os-release").read_text().splitlines()
    fields = dict(line.split("=", 1) for line in lines if "=" in line)
    return fields.get("PRETTY_NAME", "?").strip('"')


def describe(root: Path | None = None) -> str:
    """One line: the image and the runtime that will run it, or what is missing and how to get it."""
    root = root or image()
    version = runtime()
    if version is None:
        return "no ch-run here (Charliecloud is not installed): use your site's runtime, as the scripts below"
    if root is None:
        return f"ch-run {version}, but no course image: build it with {BUILD_HINT}"
    stamp = root / ".hpcnb-image-versions"  # "TORCH NUMPY", written by ci/build-container.sh
    torch = f", torch {stamp.read_text().split()[0]}" if stamp.exists() else ""
    return f"image {root} ({os_release(root)}{torch}), run by ch-run {version}"
