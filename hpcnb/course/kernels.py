"""Jupyter kernels over ipc (Unix) sockets in a private directory, for runs that start many kernels.

Over TCP, jupyter_client picks a kernel's five ports by binding port 0 and letting go; until the kernel
binds them, any process's outgoing connection may take one, and the kernel dies at start ("Address
already in use", then "Kernel died before replying to kernel_info"). With many kernels and jobs at
once (the test lanes, the mutants) that happens. A socket file in a directory of its own cannot be
taken. The graded kernels use ipc too, inside their sandbox (hpcnb.course.sandbox).
"""
from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any


class IpcSockets:
    """Mixin for a jupyter_client KernelManager class: ipc sockets in a fresh directory, removed at shutdown."""

    def __init__(self, **kwargs: Any) -> None:
        self.socket_dir = Path(tempfile.mkdtemp(prefix="hpcnb-ipc-"))
        kwargs.setdefault("transport", "ipc")
        kwargs.setdefault("ip", str(self.socket_dir / "kernel"))
        super().__init__(**kwargs)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)  # type: ignore[misc]
        if not restart:
            shutil.rmtree(self.socket_dir, ignore_errors=True)


@functools.cache
def ipc_kernel_manager(asynchronous: bool = True) -> type:
    """jupyter_client's (Async)KernelManager over ipc: nbclient's ``kernel_manager_class``, or nbval's."""
    from jupyter_client.manager import AsyncKernelManager, KernelManager

    base = AsyncKernelManager if asynchronous else KernelManager
    return type(f"Ipc{base.__name__}", (IpcSockets, base), {})
