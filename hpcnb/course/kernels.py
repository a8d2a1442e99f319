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

MAX_MESSAGE_BYTES = 4 << 20  # a kernel message (each of its parts) larger than this is dropped by ZeroMQ
MAX_QUEUED_MESSAGES = 8  # the grader's receive queue per socket (the kernel's queue holds the rest)


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


@functools.cache
def bounded_kernel_client() -> type:
    """jupyter_client's AsyncKernelClient whose sockets refuse messages over MAX_MESSAGE_BYTES and
    queue at most MAX_QUEUED_MESSAGES: what a flood of a graded kernel's output may cost the grader's
    memory is bounded (the grader's clients of both of a sandbox's kernels)."""
    import zmq.asyncio
    from jupyter_client.asynchronous import AsyncKernelClient
    from traitlets import default

    class SandboxKernelClient(AsyncKernelClient):
        """A kernel client with bounded sockets (:func:`bounded_kernel_client`)."""

        @default("context")
        def _context_default(self) -> zmq.asyncio.Context:
            self._created_context = True
            context = zmq.asyncio.Context()
            context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
            context.setsockopt(zmq.RCVHWM, MAX_QUEUED_MESSAGES)
            return context

    return SandboxKernelClient
