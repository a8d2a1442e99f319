"""The grader's side of the sandbox, in Jupyter's terms: :class:`SandboxKernelManager` starts a kernel in the
sandbox (``python -m hpcnb.course.sandbox run``) and reaches it over ipc sockets through ``/proc/PID/root``;
:class:`SandboxKernelClient` bounds what a flood of messages may cost; :class:`SandboxedExecute`, nbgrader's
Execute preprocessor, runs each cell with the limits and notes that :mod:`hpcnb.course.sandbox`'s docstring
describes (output budgets, time limits, processes left behind).

The classes are made on first use: importing this module stays light (no Jupyter imported).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpcnb.course import cgroup, outputs
from hpcnb.course.kernels import MAX_MESSAGE_BYTES, bounded_kernel_client
from hpcnb.course.sandbox import CONNECTION_FILE, INTERRUPT_AGAIN, INTERRUPT_GRACE, KERNEL_DIR, START_TIMEOUT, Limits


def _sandbox_pid(info_file: Path) -> int | None:
    try:
        return int(json.loads(info_file.read_text())["child-pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _ns_pid(pid: int) -> int | None:
    """A process's pid inside its own pid namespace."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


def _kernel_manager_class() -> type:
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import Dict

    class SandboxKernelManager(AsyncKernelManager):
        """A kernel started in the sandbox by ``python -m hpcnb.course.sandbox run``, over ipc sockets."""

        limits = Dict(config=True, help="Limits (hpcnb.course.sandbox.Limits fields) for the kernel's sandbox")
        sandbox_env = Dict(config=True, help="extra environment variables inside the sandbox")

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.client_factory = __getattr__("SandboxKernelClient")
            self.host_dir = Path(tempfile.mkdtemp(prefix="hpcnb-kernel-"))
            self.transport = "ipc"
            self.connection_file = str(self.host_dir / "connection.json")
            self.ip = f"{KERNEL_DIR}/ipc"
            self.sandbox_pid: int | None = None
            self.launcher_pid: int | None = None

        @property
        def info_file(self) -> Path:
            return self.host_dir / "bwrap-info.json"

        @property
        def test_connection_file(self) -> Path:
            """The test kernel's (:mod:`hpcnb.course.testkernel`), written before the sandbox starts."""
            return self.host_dir / "test-connection.json"

        @property
        def kernel_spec(self) -> KernelSpec:
            Limits.from_dict(self.limits)  # a bad limit fails here, clearly
            argv = [sys.executable, "-m", "hpcnb.course.sandbox", "run", "--connection-file", "{connection_file}",
                    "--info-file", str(self.info_file), "--limits", json.dumps(self.limits),
                    "--env", json.dumps(self.sandbox_env), "--discard-output",
                    "--test-connection-file", str(self.test_connection_file), "--",
                    sys.executable, "-m", "hpcnb.course.sandbox", "kernel", "-f", CONNECTION_FILE]
            return KernelSpec(argv=argv, interrupt_mode="message", language="python",
                              display_name="Python 3 (hpcnb sandbox)")

        async def _async_pre_start_kernel(self, **kw: Any) -> Any:
            from hpcnb.course.testkernel import write_connection_file

            self.ip = f"{KERNEL_DIR}/ipc"  # what the kernel binds, inside
            write_connection_file(self.test_connection_file)
            return await super()._async_pre_start_kernel(**kw)

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            kw["cwd"] = str(self.host_dir)
            await super()._async_launch_kernel(kernel_cmd, **kw)
            self.launcher_pid = getattr(self.provisioner, "pid", None)  # its cgroup's name
            deadline = time.monotonic() + START_TIMEOUT
            while (pid := _sandbox_pid(self.info_file)) is None:
                if not await self.is_alive():
                    raise RuntimeError("the kernel's sandbox did not start (see the log above)")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the kernel's sandbox did not start within {START_TIMEOUT:g} s")
                await asyncio.sleep(0.02)
            self.sandbox_pid = pid
            self.ip = f"/proc/{pid}/root{KERNEL_DIR}/ipc"  # the same sockets, from outside

        def _sandbox_processes(self) -> list[Any]:
            import psutil

            try:
                return psutil.Process(self.sandbox_pid).children(recursive=True) if self.sandbox_pid else []
            except psutil.Error:
                return []

        def kernel_process(self) -> Any:
            """The kernel's process (psutil), seen from outside: pid 2 of the sandbox (bwrap is 1)."""
            return next((p for p in self._sandbox_processes() if _ns_pid(p.pid) == 2), None)

        def processes_left(self) -> list[str]:
            """Command lines of the sandbox's processes other than the kernel and the local Slurm."""
            import psutil

            left = []
            for proc in self._sandbox_processes():
                try:
                    if _ns_pid(proc.pid) == 2:
                        continue
                    cmdline = " ".join(proc.cmdline()) or proc.name()
                    if "hpcnb.course.testkernel" in cmdline:  # the test kernel, the grader's
                        continue
                except psutil.Error:
                    continue
                if "hpcnb.localslurm" not in cmdline:
                    left.append(cmdline[:200])
            return left

        def stop_forks(self, within: float = 5.0) -> int:
            """SIGKILL the copies of the kernel that ``os.fork()`` made (a fork bomb's) while the
            kernel is stopped (SIGSTOP), so it cannot make more; then interrupt it (SIGINT, as an
            interrupt request does) before it runs on: it resumes with its process slots free and
            the interrupt pending. Returns how many copies were killed (0: nothing was done)."""
            import psutil

            kernel, stopped = self.kernel_process(), 0
            if kernel is None:
                return 0
            try:
                kernel.suspend()
            except psutil.Error:
                return 0
            try:
                stopped = self._kill_copies(kernel, time.monotonic() + within)
                if stopped:
                    kernel.send_signal(signal.SIGINT)
            except psutil.Error:
                pass
            finally:
                with contextlib.suppress(psutil.Error):
                    kernel.resume()
            return stopped

        def interrupt_again(self) -> None:
            """SIGINT the kernel once more. A fork bomb's kernel may lose an interrupt: the signal is
            handled in the first Python code that runs, and when that is an ``os.fork()`` hook (logging
            registers some), Python reports its KeyboardInterrupt as unraisable and the loop goes on."""
            import psutil

            kernel = self.kernel_process()
            if kernel is not None:
                with contextlib.suppress(psutil.Error):
                    kernel.send_signal(signal.SIGINT)

        @staticmethod
        def _kill_copies(kernel: Any, deadline: float) -> int:
            """SIGKILL every descendant of ``kernel`` that runs its command line; how many (the
            stopped kernel reaps none: each is a zombie until it runs on)."""
            import psutil

            def runs_it(proc: Any) -> bool:
                try:
                    return proc.cmdline() == cmdline
                except psutil.Error:  # gone, or a zombie
                    return False

            killed: set[int] = set()
            cmdline = kernel.cmdline()
            while time.monotonic() < deadline:
                copies = [p for p in kernel.children(recursive=True) if p.pid not in killed and runs_it(p)]
                if not copies:
                    break
                for proc in copies:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
                        killed.add(proc.pid)
            return len(killed)

        def cleanup_ipc_files(self) -> None:
            """The sockets live in the sandbox's tmpfs, gone with it."""

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            await super()._async_cleanup_resources(restart=restart)
            if self.launcher_pid is not None:
                await asyncio.to_thread(cgroup.remove, f"{cgroup.PREFIX}{self.launcher_pid}")
            if not restart:
                shutil.rmtree(self.host_dir, ignore_errors=True)

        cleanup_resources = _async_cleanup_resources

    return SandboxKernelManager


def __getattr__(name: str) -> Any:
    """The Jupyter classes are made on first use: importing hpcnb.course.sandbox stays light."""
    makers = {"SandboxKernelManager": _kernel_manager_class, "SandboxKernelClient": bounded_kernel_client,
              "SandboxedExecute": _execute_class}
    if name in makers:
        value = makers[name]()
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _note(text: str) -> Any:
    from nbformat.v4 import new_output

    return new_output("stream", name="stderr", text=f"\n[hpcnb grader: {text}]\n")


def _execute_class() -> type:
    from queue import Empty

    from jupyter_core.utils import ensure_async, run_sync
    from nbclient.exceptions import CellTimeoutError
    from nbgrader.preprocessors import Execute
    from traitlets import Integer

    from hpcnb.course import tamper, testkernel

    class SandboxedExecute(Execute):
        """nbgrader's Execute with the kernel in the sandbox and the output of each cell capped;
        the graded test cells run in the test kernel (:mod:`hpcnb.course.testkernel`)."""

        max_output_bytes = Integer(outputs.CELL_BYTES, help="output kept per cell; the rest is dropped with a note"
                                   ).tag(config=True)
        max_notebook_output_bytes = Integer(outputs.NOTEBOOK_BYTES, help="output kept per notebook, widget "
                                            "state included; the rest is dropped with a note").tag(config=True)

        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("kernel_manager_class", __getattr__("SandboxKernelManager"))
            super().__init__(**kwargs)
            self._budget = outputs.OutputBudget(self.max_output_bytes, self.max_notebook_output_bytes)
            self._idle_seen = False
            self._left: list[str] = []
            self._cell: Any = None
            self._cell_index = 0
            self._baseline: dict[str, str] | None = None
            self._tests: Any = None  # testkernel.TestKernel, once started
            self._setup: list[str] = []

        def preprocess(self, nb: Any, resources: Any = None, km: Any = None) -> Any:
            self._left, self._baseline = [], None
            self._budget = outputs.OutputBudget(self.max_output_bytes, self.max_notebook_output_bytes)
            self._setup = testkernel.setup_sources(testkernel.source_notebook(self.config, resources))
            try:
                nb, resources = super().preprocess(nb, resources, km)
            finally:
                if self._tests is not None:
                    self._tests.stop()
                self._tests = None
            if self._left:
                from nbformat.v4 import new_markdown_cell

                shown = "\n".join(f"- `{c}`" for c in self._left[:20])
                more = f"\n- ... and {len(self._left) - 20} more" if len(self._left) > 20 else ""
                nb.cells.append(new_markdown_cell(
                    f"**hpcnb grader:** {len(self._left)} process(es) were still running when the last "
                    f"cell finished; the sandbox stopped them:\n\n{shown}{more}"))
            if self._budget.cut_cells:
                from nbformat.v4 import new_markdown_cell

                nb.cells.append(new_markdown_cell(self._budget.summary()))
            return nb, resources

        def preprocess_cell(self, cell: Any, resources: Any, index: int) -> Any:
            result = super().preprocess_cell(cell, resources, index)
            if index == len(self.nb.cells) - 1 and hasattr(self.km, "processes_left"):
                self._left = self.km.processes_left()
            return result

        async def async_execute_cell(self, cell: Any, cell_index: int, *args: Any, **kwargs: Any) -> Any:
            # Output lost to a flood (a message over MAX_MESSAGE_BYTES is refused, and the kernel drops
            # what the grader cannot read fast enough) is noted, and the cell still counts.
            self.raise_on_iopub_timeout = False
            self._idle_seen = False
            if self._baseline is None:  # before any of the student's code ran
                self._baseline = tamper.parse_state(await self._ask(tamper.STATE_EXPRESSION)) or {}
                await self._start_tests()
            graded = cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade")
            reasons = await self._tampering() if graded else []
            if graded:
                result = await self._test(cell, cell_index, *args, **kwargs)
            else:
                result = await super().async_execute_cell(cell, cell_index, *args, **kwargs)
            if graded:
                reasons += [r for r in await self._tampering() if r not in reasons]
                if reasons:
                    cell.outputs.append(tamper.error_output(reasons))
            return result

        async def _start_tests(self) -> None:
            """T connected and set up; S answering T's questions (:mod:`hpcnb.course.testkernel`)."""
            self._tests = testkernel.TestKernel(self.km.test_connection_file, self.km.sandbox_pid)
            await self._ask(code=testkernel.SERVE)
            await self._tests.start(self._setup, self.startup_timeout, self.timeout or 60)

        async def _test(self, cell: Any, cell_index: int, *args: Any, **kwargs: Any) -> Any:
            """Run a graded cell in T, with the names it reads brought from S."""
            why = await self._tests.bring(cell.source, self._get_timeout(cell) or 60)
            if why is not None:
                cell.outputs = [testkernel.error_output(why)]
                return cell
            ours, self.kc = self.kc, self._tests.client
            try:
                return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
            finally:
                self.kc = ours

        async def _ask(self, expression: str | None = None, code: str = "") -> Any:
            """Run ``code`` (not in the notebook, not in the history), evaluating ``expression``
            after it; the execute_reply."""
            msg_id = self.kc.execute(code, silent=not code, store_history=False, allow_stdin=False,
                                     stop_on_error=False,
                                     user_expressions={"state": expression} if expression else None)
            return await self.async_wait_for_reply(msg_id)

        async def _tampering(self) -> list[str]:
            """Why the kernel can no longer be trusted to run tests (:mod:`hpcnb.course.tamper`)."""
            reasons = [] if tamper.canary_failed(await self._ask(code=tamper.canary())) else [
                "an assert that must fail passed (AST or input transformers, or a trace function)"]
            state = tamper.parse_state(await self._ask(tamper.STATE_EXPRESSION))
            if state is None:
                return [*reasons, "the kernel's state could not be read"]
            return reasons + (tamper.state_changes(self._baseline, state) if self._baseline else [])

        execute_cell = run_sync(async_execute_cell)

        async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
            """A cell past its time limit: interrupt the kernel (``stop_forks`` does it where the kernel
            forked copies of itself, whose process slots it may need to answer; else nbclient), and
            give up on the notebook (as nbgrader does) only if the kernel then never answers."""
            if self._tests is not None and self.kc is self._tests.client:  # a test, in T
                self._tests.interrupt()
                grace = max(INTERRUPT_GRACE, min(timeout, 60))
                if not await self._interrupted_kernel_answers(grace):
                    raise CellTimeoutError.error_from_timeout_and_cell(
                        "Timeout waiting for the test kernel to answer after the interrupt", grace, cell)
                return {"content": {**self.error_on_timeout, "status": "error"}} if self.error_on_timeout else None
            stopped = self.km.stop_forks() if hasattr(self.km, "stop_forks") else 0
            if stopped and cell is not None:
                cell.outputs.append(_note(f"the cell ran past its time limit: {stopped} forked copies "
                                          "of the kernel were stopped and the kernel interrupted"))
            if stopped and self.interrupt_on_timeout:
                # interrupted already (stop_forks): another at once could strike its reply, so one
                # more only after INTERRUPT_AGAIN s without it (interrupt_again says why); the rest is nbclient's
                reply = ({"content": {**self.error_on_timeout, "status": "error"}}
                         if self.error_on_timeout else None)
            else:
                reply = await super()._async_handle_timeout(timeout, cell)
            grace = max(INTERRUPT_GRACE, min(timeout, 60))
            again = self.km.interrupt_again if stopped else None
            if not await self._interrupted_kernel_answers(grace, again):
                raise CellTimeoutError.error_from_timeout_and_cell(
                    "Timeout waiting for the kernel to answer after the interrupt", grace, cell)
            return reply

        async def _interrupted_kernel_answers(self, within: float, again: Callable[[], None] | None = None) -> bool:
            """Did the interrupted cell's execute_reply come (nbclient uses its own error reply)?
            With ``again``, it is called after each INTERRUPT_AGAIN seconds without one."""
            deadline = time.monotonic() + within
            while (left := deadline - time.monotonic()) > 0:
                try:
                    msg = await ensure_async(self.kc.shell_channel.get_msg(
                        timeout=min(left, INTERRUPT_AGAIN) if again else left))
                except Empty:
                    if again and deadline - time.monotonic() > 0:
                        again()
                        continue
                    return False
                if msg.get("msg_type") == "execute_reply":
                    return True
            return False

        def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
            if msg.get("msg_type") == "status" and msg.get("content", {}).get("execution_state") == "idle":
                self._idle_seen = True
            self._cell, self._cell_index = cell, cell_index
            if not isinstance(msg.get("content", {}).get("execution_count", 0), (int, type(None))):
                del msg["content"]["execution_count"]  # a forged one: nbclient would copy it into the cell
            return super().process_message(msg, cell, cell_index)

        def _cut(self, outs: list[Any], cell_index: int, what: str = "output") -> None:
            """The cell lost some ``what``: say so there, once (:meth:`outputs.OutputBudget.cut`)."""
            said = self._budget.cut(cell_index, what)
            if said:
                outs.append(_note(said))

        def _update_display_id(self, display_id: str, msg: dict[str, Any]) -> None:
            """A display update replaces the data of every output shown with that id: the
            running cell pays for each copy, and an update over its budget is dropped."""
            copies = sum(len(ix) for ix in self._display_id_map.get(display_id, {}).values())
            if not copies:
                return
            if self._budget.spend(self._cell_index, outputs.size_of(outputs.kept_content(msg)) * copies):
                super()._update_display_id(display_id, msg)
            else:
                self._cut(self._cell.outputs, self._cell_index)

        def handle_comm_msg(self, outs: list[Any], msg: dict[str, Any], cell_index: int) -> None:
            """Widget state ends in the notebook's metadata: the running cell pays for it. A message
            nbclient cannot read (a widget without ``_model_module``...) is ignored."""
            data = msg.get("content", {}).get("data")
            size = outputs.size_of(data.get("state")) if isinstance(data, dict) else 0
            size += sum(len(buffer) for buffer in msg.get("buffers") or []) * 4 // 3  # kept in base64
            if not self._budget.spend(cell_index, size):
                self._cut(outs, cell_index, "widget state")
                return
            with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError, AssertionError, IndexError):
                super().handle_comm_msg(outs, msg, cell_index)

        def on_cell_executed(self, **kwargs: Any) -> None:
            reply = kwargs.get("execute_reply", {}).get("content", {})
            if reply.get("status") == "error":  # nbgrader adds it to the cell when no output showed it
                outputs.trim_error(reply, short=True)
            super().on_cell_executed(**kwargs)
            if not self._idle_seen:
                kwargs["cell"].outputs.append(_note(
                    "some output of this cell never reached the grader (a message over "
                    f"{MAX_MESSAGE_BYTES >> 20} MiB, or output faster than the grader could read it)"))

        def output(self, outs: list[Any], msg: dict[str, Any], display_id: str | None,
                   cell_index: int) -> Any:
            """Output kept within the budget (:mod:`hpcnb.course.outputs`); an error is always kept,
            trimmed (it decides the grade), one a cell past the budget; a stream is cut to fit."""
            is_error = msg.get("msg_type") == "error"
            if is_error:
                outputs.trim_error(msg["content"])
            kept = outputs.kept_content(msg)
            if not kept or self._budget.spend(cell_index, outputs.size_of(kept)):
                return super().output(outs, msg, display_id, cell_index)
            if msg.get("msg_type") == "stream" and isinstance(kept["text"], str):
                text = outputs.stream_start(kept["text"], self._budget.room(cell_index) - 64)
                if text and self._budget.spend(cell_index, outputs.size_of({**kept, "text": text})):
                    msg["content"]["text"] = text
                    super().output(outs, msg, display_id, cell_index)
            self._cut(outs, cell_index)
            if is_error and self._budget.keep_error(cell_index):
                outputs.trim_error(msg["content"], short=True)
                return super().output(outs, msg, display_id, cell_index)
            return None

    return SandboxedExecute
