"""The test kernel: graded test cells run where the student's code cannot reach them (issue 38).

The student's notebook runs in its kernel S (:mod:`hpcnb.course.sandbox`); its graded test cells
run in a second kernel T, in the same sandbox (the same files, local Slurm and network), which
never runs the student's code:

* S's kernel starts T (:func:`start_beside`) before the notebook's first cell; T makes itself
  non-dumpable at once (no ptrace, no ``/proc/T/mem``, ``/proc/T/fd`` or ``/proc/T/root`` for the
  student's code, which has no capability in the sandbox's user namespace) and reads its
  connection file (its HMAC key) from a descriptor that S passes on unread and closes;
* T runs the source notebook's setup cells (the code cells before the first exercise) itself;
* before each graded cell, T asks S (:func:`bring`, over a Unix socket in ``/run/kernel``; S's side
  is a thread the grader starts, :func:`serve`) for the names the cell reads that T's setup did not
  define. Plain data comes by value, in a tree of plain types that T decodes itself (no pickle
  of any class: :func:`decode`); modules, and the functions and classes of the course's packages
  (PACKAGES), are imported by name in T; anything else becomes a :class:`Proxy` whose calls,
  attributes, items and ``with`` run in S. Functions of T's that S's code calls back (a test's
  fake GPU) run in T. A test of what a function does to its process (torch's global settings)
  runs it in a fresh Python (:func:`source_of`, :func:`run_apart`).

Whatever S answers is the student's answer; the asserts, ``numpy.allclose`` and the helpers the
test imports are T's own. What S cannot steer: the truth of an assert (a proxy has no ``__eq__``
or ``__bool__`` of S's, and its ``__exit__`` never swallows an exception).
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import dataclasses
import datetime
import enum
import importlib
import inspect
import io
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path, PurePath
from typing import Any

SOCKET = "/run/kernel/names.sock"  # where S's side listens, inside the sandbox
IPC = "/run/kernel/test-ipc"  # T's ZeroMQ sockets, inside
FD_VARIABLE = "HPCNB_TEST_KERNEL_FD"  # S's kernel: the descriptor of T's connection file
PACKAGES = frozenset({"hpcnb", "torch", "numpy", "lightning", "lightning_fabric", "pytorch_lightning", "horovod"})
LIBRARIES = PACKAGES | sys.stdlib_module_names  # modules imported by name in T
# Functions and classes imported by name in T: the course's packages only, never the standard library's
# (a test that calls ``f(x)``, both the student's, must not run ``eval(x)`` in T), nor unpicklers.
UNSAFE = frozenset({"torch.load", "torch.serialization.load", "numpy.load", "torch.jit.load", "torch.hub.load"})
DATACLASS_PACKAGES = frozenset({"hpcnb"})  # whose dataclasses and enums come by value
MAX_FRAME = 256 << 20
MAX_DEPTH = 48
PLAIN = (type(None), bool, int, float, str, bytes)

__all__ = ["Proxy", "bring", "names_used", "run_apart", "serve", "source_of", "start_beside"]


class NotebookKernelError(RuntimeError):
    """S did not answer, or answered something T does not accept."""


# ------------------------------------------------------------------ the grader's view of a cell

def names_used(source: str) -> list[str]:
    """The names a test cell reads (in the functions and lambdas it defines too), builtins aside."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return sorted(found - set(dir(builtins)))


# ------------------------------------------------------------------ the wire

def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(struct.pack("!Q", len(data)) + data)


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(sock: socket.socket) -> bytes:
    (size,) = struct.unpack("!Q", _exactly(sock, 8))
    if size > MAX_FRAME:
        raise NotebookKernelError(f"a message of {size} bytes (more than {MAX_FRAME >> 20} MiB)")
    return _exactly(sock, size)


class _PlainUnpickler(pickle.Unpickler):
    """Loads plain types only (what :func:`encode` makes): no class, no function, no reduce."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not accepted from the notebook's kernel")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("no persistent ids from the notebook's kernel")


def _load_plain(data: bytes) -> Any:
    return _PlainUnpickler(io.BytesIO(data)).load()


# ------------------------------------------------------------------ values, S -> T

def _reference(obj: Any) -> list[str] | None:
    """["import", module, qualname] for a module, class or function that T can import itself."""
    if isinstance(obj, types.ModuleType):
        with contextlib.suppress(ImportError, NotebookKernelError):
            if _resolve(obj.__name__) is obj:
                return ["module", obj.__name__]
        return None
    if not isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        return None
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or "<" in qualname:
        return None
    try:
        found = _resolve(module, qualname)
    except (ImportError, AttributeError, NotebookKernelError):
        return None
    return ["import", module, qualname] if found is obj else None


def _resolve(module: str, qualname: str = "") -> Any:
    """A module of LIBRARIES, or a function or class of PACKAGES, imported in T by its name."""
    allowed = PACKAGES if qualname else LIBRARIES
    if module.partition(".")[0] not in allowed or f"{module}.{qualname}" in UNSAFE:
        raise NotebookKernelError(f"{module}.{qualname} is not something the tests may import")
    found: Any = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        found = getattr(found, part)
    if qualname and not isinstance(found, (type, types.FunctionType, types.BuiltinFunctionType)):
        raise NotebookKernelError(f"{module}.{qualname} is not a class or a function")
    return found


def _is_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def encode(obj: Any, handles: list[Any], depth: int = 0) -> Any:
    """(In S.) ``obj`` as a tree of plain types: data by value, the rest as references or handles."""
    if type(obj) in PLAIN:
        return obj
    if isinstance(obj, Callback):
        return ["callback", obj.ident]
    if depth > MAX_DEPTH:
        return _handle(obj, handles)
    down = (lambda items: [encode(x, handles, depth + 1) for x in items])
    kind = type(obj)
    if kind in (list, tuple, set, frozenset):
        return [kind.__name__, down(obj)]
    if isinstance(obj, dict) and kind.__module__ in ("builtins", "collections"):
        return ["dict", [[encode(k, handles, depth + 1), encode(v, handles, depth + 1)] for k, v in obj.items()]]
    if kind is complex:
        return ["complex", obj.real, obj.imag]
    if kind is range:
        return ["range", obj.start, obj.stop, obj.step]
    if isinstance(obj, PurePath):
        return ["path", str(obj)]
    if kind in (datetime.datetime, datetime.date, datetime.time):
        return [kind.__name__, *_moment(obj)]
    if kind is datetime.timedelta:
        return ["timedelta", obj.days, obj.seconds, obj.microseconds]
    value = _array(obj) or _record(obj, handles, depth) or _reference(obj)
    return value if value is not None else _handle(obj, handles)


def _moment(obj: datetime.date | datetime.time) -> list[Any]:
    """A date, time or datetime's fields, and its UTC offset in seconds (or None)."""
    names = {datetime.date: ("year", "month", "day"), datetime.time: ("hour", "minute", "second", "microsecond")}
    fields = names[datetime.date] + names[datetime.time] if type(obj) is datetime.datetime else names[type(obj)]
    offset = obj.utcoffset() if type(obj) is not datetime.date else None
    return [[getattr(obj, name) for name in fields], None if offset is None else offset.total_seconds()]


def _decode_moment(kind: type, rest: list[Any]) -> Any:
    fields, offset = [int(n) for n in rest[0]], rest[1]
    zone = None if offset is None else datetime.timezone(datetime.timedelta(seconds=float(offset)))
    return kind(*fields) if kind is datetime.date else kind(*fields, tzinfo=zone)


def _array(obj: Any) -> list[Any] | None:
    """A tensor or a numpy array or scalar of numbers, by value."""
    if _is_tensor(obj):
        flat = obj.detach().cpu().contiguous().reshape(-1)
        data = flat.view(__import__("torch").uint8).numpy().tobytes() if flat.numel() else b""
        return ["tensor", data, str(obj.dtype).removeprefix("torch."), list(obj.shape)]
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(obj, (numpy.ndarray, numpy.generic)) or obj.dtype.hasobject:
        return None
    shape = list(obj.shape) if isinstance(obj, numpy.ndarray) else None
    return ["ndarray", numpy.ascontiguousarray(obj).tobytes(), obj.dtype.str, shape]


def _record(obj: Any, handles: list[Any], depth: int) -> list[Any] | None:
    """A dataclass or an enum of the course's (hpcnb), by value."""
    kind = type(obj)
    if kind.__module__.partition(".")[0] not in DATACLASS_PACKAGES or _reference(kind) is None:
        return None
    if isinstance(obj, enum.Enum):
        return ["enum", kind.__module__, kind.__qualname__, encode(obj.value, handles, depth + 1)]
    if dataclasses.is_dataclass(obj):
        fields = [[f.name, encode(getattr(obj, f.name), handles, depth + 1)] for f in dataclasses.fields(obj)]
        return ["dataclass", kind.__module__, kind.__qualname__, fields]
    return None


def _handle(obj: Any, handles: list[Any]) -> list[Any]:
    handles.append(obj)
    return ["handle", len(handles) - 1, f"{type(obj).__name__}"]


def decode(node: Any, link: Link | None) -> Any:
    """(In T.) The value :func:`encode` described; only plain types and T's own imports are made."""
    if type(node) in PLAIN:
        return node
    if type(node) is not list or not node or not isinstance(node[0], str):
        raise NotebookKernelError(f"a value T does not understand: {type(node).__name__}")
    tag, rest = node[0], node[1:]
    maker = _DECODERS.get(tag)
    if maker is None:
        raise NotebookKernelError(f"a value T does not understand: {tag!r}")
    return maker(rest, link)


def _items(rest: list[Any], link: Link | None) -> list[Any]:
    return [decode(x, link) for x in rest[0]]


def _decode_tensor(rest: list[Any], _link: Link | None) -> Any:
    import torch

    data, dtype_name, shape = rest
    dtype = getattr(torch, str(dtype_name), None)
    if not isinstance(dtype, torch.dtype):
        raise NotebookKernelError(f"not a tensor type: {dtype_name!r}")
    if not data:
        return torch.empty([int(n) for n in shape], dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape([int(n) for n in shape])


def _decode_array(rest: list[Any], _link: Link | None) -> Any:
    import numpy

    data, dtype, shape = rest
    values = numpy.frombuffer(bytes(data), dtype=numpy.dtype(str(dtype))).copy()
    return values[0] if shape is None else values.reshape([int(n) for n in shape])


def _decode_record(rest: list[Any], link: Link | None, enum_value: bool) -> Any:
    module, qualname = str(rest[0]), str(rest[1])
    if module.partition(".")[0] not in DATACLASS_PACKAGES:
        raise NotebookKernelError(f"{module}.{qualname} is not a class of the course's")
    kind = _resolve(module, qualname)
    if enum_value:
        if not (isinstance(kind, type) and issubclass(kind, enum.Enum)):
            raise NotebookKernelError(f"{qualname} is not an enum")
        return kind(decode(rest[2], link))
    if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
        raise NotebookKernelError(f"{qualname} is not a dataclass")
    names = {f.name for f in dataclasses.fields(kind)}
    made = object.__new__(kind)
    for name, value in rest[2]:
        if name in names:
            object.__setattr__(made, name, decode(value, link))
    return made


def _decode_reference(rest: list[Any], _link: Link | None) -> Any:
    if not str(rest[1]):
        raise NotebookKernelError("a reference without a name")
    return _resolve(str(rest[0]), str(rest[1]))


def _decode_handle(rest: list[Any], link: Link | None) -> Proxy:
    if link is None:
        raise NotebookKernelError("a handle outside a conversation")
    return Proxy(link, int(rest[0]), str(rest[1]))


def _decode_callback(rest: list[Any], link: Link | None) -> Any:
    if link is None:
        raise NotebookKernelError("a callback outside a conversation")
    return link.callbacks[int(rest[0])]


_DECODERS = {
    "list": lambda rest, link: _items(rest, link),
    "tuple": lambda rest, link: tuple(_items(rest, link)),
    "set": lambda rest, link: set(_items(rest, link)),
    "frozenset": lambda rest, link: frozenset(_items(rest, link)),
    "dict": lambda rest, link: {decode(k, link): decode(v, link) for k, v in rest[0]},
    "complex": lambda rest, _link: complex(float(rest[0]), float(rest[1])),
    "range": lambda rest, _link: range(int(rest[0]), int(rest[1]), int(rest[2])),
    "path": lambda rest, _link: Path(str(rest[0])),
    "datetime": lambda rest, _link: _decode_moment(datetime.datetime, rest),
    "date": lambda rest, _link: _decode_moment(datetime.date, rest),
    "time": lambda rest, _link: _decode_moment(datetime.time, rest),
    "timedelta": lambda rest, _link: datetime.timedelta(int(rest[0]), int(rest[1]), int(rest[2])),
    "tensor": _decode_tensor,
    "ndarray": _decode_array,
    "dataclass": lambda rest, link: _decode_record(rest, link, enum_value=False),
    "enum": lambda rest, link: _decode_record(rest, link, enum_value=True),
    "import": _decode_reference,
    "module": lambda rest, _link: _resolve(str(rest[0])),
    "handle": _decode_handle,
    "callback": _decode_callback,
}


def _remote_error(module: str, qualname: str, message: str) -> BaseException:
    """The exception S's code raised, as T's own class where T knows it (ValueError ...)."""
    said = f"(in your code) {message}"
    try:
        kind = getattr(builtins, qualname) if module == "builtins" else _resolve(module, qualname)
        if isinstance(kind, type) and issubclass(kind, Exception):
            return kind(said)
    except Exception:  # noqa: BLE001 - an unknown or odd exception class: said as text
        pass
    return NotebookKernelError(f"{qualname}: {said}")


# ------------------------------------------------------------------ T's side

class Proxy:
    """(In T.) An object of the notebook's kernel: calls, attributes, items and ``with`` run there;
    comparisons and truth are T's (an object's identity), never S's."""

    __slots__ = ("_link", "_handle", "_kind")

    def __init__(self, link: Link, handle: int, kind: str) -> None:
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_kind", kind)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._link.request(["call", self._handle, args, kwargs])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._link.request(["getattr", self._handle, name])

    def __getitem__(self, key: Any) -> Any:
        return self._link.request(["getitem", self._handle, key])

    def __enter__(self) -> Any:
        return self._link.request(["enter", self._handle])

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        try:
            pickle.dumps((kind, value))
        except Exception:  # noqa: BLE001 - an exception S cannot load: S's __exit__ sees none
            kind = value = None
        self._link.request(["exit", self._handle, kind, value])
        return False  # S never decides that an exception (a failed assert) is swallowed

    def __repr__(self) -> str:
        return f"<{self._kind} of the notebook's kernel>"


class _ArgumentPickler(pickle.Pickler):
    """T's arguments for S: proxies go back as their handles, T's own functions as callbacks."""

    def __init__(self, file: io.BytesIO, link: Link) -> None:
        super().__init__(file, protocol=4)
        self.link = link

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is Proxy:
            return ("handle", object.__getattribute__(obj, "_handle"))
        if isinstance(obj, (types.FunctionType, types.MethodType)) and (
                obj.__module__ == "__main__" or "<" in obj.__qualname__):
            self.link.callbacks.append(obj)
            return ("callback", len(self.link.callbacks) - 1)
        return None


class Link:
    """(In T.) One conversation with S's side: T's requests, and S's calls of T's functions."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.callbacks: list[Any] = []

    def _pickle(self, message: Any) -> bytes:
        buffer = io.BytesIO()
        _ArgumentPickler(buffer, self).dump(message)
        return buffer.getvalue()

    def _receive(self) -> list[Any]:
        try:
            node = _load_plain(_receive(self.sock))
        except KeyboardInterrupt:  # the grader's interrupt, past the cell's time limit
            raise NotebookKernelError("the notebook's kernel, which runs your code, did not answer within "
                                      "the cell's time limit") from None
        except TimeoutError:
            raise NotebookKernelError(
                f"the notebook's kernel, which runs your code, did not answer within {self.sock.gettimeout():g} s"
            ) from None
        except (EOFError, ConnectionError):
            raise NotebookKernelError("the notebook's kernel, which runs your code, stopped during this test") from None
        if type(node) is not list or not node:
            raise NotebookKernelError("an answer T does not understand")
        return node

    def request(self, message: list[Any]) -> Any:
        """Send a request; serve S's callbacks until its answer; the answer, or S's exception."""
        _send(self.sock, self._pickle(message))
        while True:
            node = self._receive()
            if node[0] == "ok":
                return decode(node[1], self)
            if node[0] == "error":
                raise _remote_error(*(str(part) for part in node[1:4]))
            if node[0] == "callback":
                self._call_back(node)
            else:
                raise NotebookKernelError(f"an answer T does not understand: {node[0]!r}")

    def _call_back(self, node: list[Any]) -> None:
        function = self.callbacks[int(node[1])]
        try:
            answer = ["return", function(*decode(node[2], self), **decode(node[3], self))]
        except Exception as err:  # noqa: BLE001 - the test's function raised: S's code sees it raised
            answer = ["raise", err]
        try:
            data = self._pickle(answer)
        except Exception as err:  # noqa: BLE001
            data = self._pickle(["raise", RuntimeError(f"{type(answer[1]).__name__}: {err}")])
        _send(self.sock, data)


_link: Link | None = None
_setup_names: set[str] | None = None
_brought: set[str] = set()  # names T holds from S (one S no longer has goes; a test's own stay)


def _namespace() -> dict[str, Any]:
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__


def bring(names: list[str], timeout: float, path: str = SOCKET) -> None:
    """(In T, before a graded cell.) The notebook's ``names`` that T's setup did not define, from S
    (a name S lacks, or still the exercise's stub, stays undefined); T's folder becomes S's."""
    global _link, _setup_names
    namespace = _namespace()
    if _setup_names is None:
        _setup_names = set(namespace)
    if _link is not None:
        with contextlib.suppress(OSError):
            _link.sock.close()
    _link = None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError as err:
        sock.close()
        raise NotebookKernelError(
            f"the notebook's kernel, which runs your code, cannot be reached ({err.strerror})") from None
    _link = Link(sock)
    wanted = [n for n in names if n not in _setup_names]
    answer = _link.request(["get", wanted])
    for name in _brought.intersection(wanted).difference(answer["names"]):
        namespace.pop(name, None)
    namespace.update(answer["names"])
    _brought.update(answer["names"])
    with contextlib.suppress(OSError):
        os.chdir(answer["cwd"])


def source_of(function: Any) -> str:
    """``inspect.getsource`` of a function of the notebook's (a proxy's: asked of S), dedented."""
    if type(function) is Proxy:
        return object.__getattribute__(function, "_link").request(
            ["source", object.__getattribute__(function, "_handle")])
    return textwrap.dedent(inspect.getsource(function))


def run_apart(source: str, failed: str, timeout: float = 120) -> str:
    """Run ``source`` in a fresh Python, in the working folder (for a test of what a function does
    to a process's global state); its output. When it fails: an AssertionError with its failed
    assert's message, else ``failed`` and its last line on stderr."""
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise AssertionError(said.removeprefix("AssertionError: ") if said.startswith("AssertionError: ")
                             else f"{failed}: {said}")
    return done.stdout


# ------------------------------------------------------------------ S's side

class Callback:
    """(In S.) A function of T's that the student's code was given: calling it runs it in T."""

    def __init__(self, conversation: _Conversation, ident: int) -> None:
        self.conversation, self.ident = conversation, ident

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.conversation.call_back(self.ident, args, kwargs)


class _ArgumentUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, conversation: _Conversation) -> None:
        super().__init__(io.BytesIO(data))
        self.conversation = conversation

    def persistent_load(self, pid: Any) -> Any:
        kind, ident = pid
        return self.conversation.handles[ident] if kind == "handle" else Callback(self.conversation, ident)


class _Conversation:
    """(In S.) Answers one T connection: the notebook's names, and calls on what they hold."""

    def __init__(self, sock: socket.socket, namespace: dict[str, Any]) -> None:
        self.sock, self.namespace = sock, namespace
        self.handles: list[Any] = []

    def run(self) -> None:
        with contextlib.suppress(EOFError, OSError), self.sock:
            while True:
                self._answer(self._next())

    def _next(self) -> list[Any]:
        return _ArgumentUnpickler(_receive(self.sock), self).load()

    def _reply(self, node: list[Any]) -> None:
        buffer = io.BytesIO()
        pickle.Pickler(buffer, protocol=4).dump(node)
        _send(self.sock, buffer.getvalue())

    def _answer(self, request: list[Any]) -> None:
        try:
            node = ["ok", encode(self._do(request), self.handles)]
        except Exception as err:  # noqa: BLE001 - the student's code raised: T raises it in the test
            node = ["error", type(err).__module__, type(err).__qualname__, str(err)[:4000]]
        self._reply(node)

    def _do(self, request: list[Any]) -> Any:
        verb, *args = request
        if verb == "get":
            return {"cwd": os.getcwd(), "names": self._names(args[0])}
        target = self.handles[args[0]]
        actions = {
            "call": lambda: target(*args[1], **args[2]),
            "getattr": lambda: getattr(target, args[1]),
            "getitem": lambda: target[args[1]],
            "enter": target.__enter__ if hasattr(target, "__enter__") else None,
            "exit": lambda: target.__exit__(args[1], args[2], None) and None,
            "source": lambda: source_of(target),
        }
        action = actions.get(verb)
        if action is None:
            raise TypeError(f"{type(target).__name__} cannot do {verb}")
        return action()

    def _names(self, names: list[str]) -> dict[str, Any]:
        from hpcnb.course.checks import is_stub

        return {n: self.namespace[n] for n in names if n in self.namespace and not is_stub(self.namespace[n])}

    def call_back(self, ident: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._reply(["callback", ident, encode(args, self.handles), encode(kwargs, self.handles)])
        while True:
            message = self._next()
            if message[0] == "return":
                return message[1]
            if message[0] == "raise":
                raise message[1]
            self._answer(message)


def serve(path: str = SOCKET) -> None:
    """(In S, started by the grader before the notebook runs.) Answer T's questions about the
    notebook's names, each connection in a thread of its own (so that a call that never returns
    holds up only its test), or in the listening thread when no thread can be started."""
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)

    def accept() -> None:
        while True:
            sock, _ = server.accept()
            conversation = _Conversation(sock, namespace)
            try:
                threading.Thread(target=conversation.run, daemon=True, name="hpcnb-test-answers").start()
            except RuntimeError:  # no thread to be had (a fork bomb's zombies hold the processes): here
                conversation.run()

    threading.Thread(target=accept, daemon=True, name="hpcnb-test-names").start()


# ------------------------------------------------------------------ the grader's side

def setup_sources(notebook: Path) -> list[str]:
    """The source notebook's setup: its code cells before the first exercise (solution or test)."""
    import nbformat

    sources = []
    for cell in nbformat.read(os.fspath(notebook), as_version=4).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") or meta.get("grade"):
            break
        if cell.cell_type == "code" and cell.source.strip():
            sources.append(cell.source)
    return sources


def source_notebook(config: Any, resources: dict[str, Any] | None) -> Path:
    """The source notebook nbgrader grades against (its setup cells are the course's: a
    submission's copy is the student's to change)."""
    found = (resources or {}).get("nbgrader", {})
    root = config.CourseDirectory.root if "root" in config.CourseDirectory else os.getcwd()
    return Path(str(root)) / "source" / found["assignment"] / f"{found['notebook']}.ipynb"


def write_connection_file(path: Path) -> None:
    """T's connection file (ipc sockets in /run/kernel, a fresh key), for the sandbox to pass on."""
    import secrets

    from jupyter_client.connect import write_connection_file as write

    write(os.fspath(path), ip=IPC, transport="ipc", key=secrets.token_hex(32).encode(), shell_port=1,
          iopub_port=2, stdin_port=3, hb_port=4, control_port=5)


def error_output(text: str) -> Any:
    """The error output of a graded cell whose test could not run (it scores 0)."""
    from nbformat.v4 import new_output

    return new_output("error", ename="NotebookKernelError", evalue=text,
                      traceback=[f"NotebookKernelError: {text}: this test scores 0"])


class TestKernel:
    """(The grader.) T's client; its setup; the names a graded cell needs, brought from S."""

    __test__ = False  # not a pytest class

    def __init__(self, connection_file: Path, sandbox_pid: int) -> None:
        from hpcnb.course.kernels import bounded_kernel_client

        self.client = bounded_kernel_client()()
        self.client.load_connection_file(os.fspath(connection_file))
        self.client.ip = f"/proc/{sandbox_pid}/root{IPC}"

    async def start(self, setup: list[str], startup_timeout: float, timeout: float) -> None:
        """Connect, and run the setup cells in T (an error there is the course's: raised)."""
        self.client.start_channels()
        await self.client.wait_for_ready(timeout=startup_timeout)
        for source in setup:
            reply = await self.run(source, timeout)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"the test kernel's setup failed: {reply['content'].get('ename')}: "
                                   f"{reply['content'].get('evalue')}")

    async def run(self, code: str, timeout: float) -> dict[str, Any]:
        """Run ``code`` in T silently; its execute_reply."""
        import asyncio

        msg_id = self.client.execute(code, silent=True, store_history=False, allow_stdin=False)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            reply = await self.client.get_shell_msg(timeout=max(left, 0.001))
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return reply

    async def bring(self, source: str, timeout: float) -> str | None:
        """Give T the names the test cell ``source`` reads; why it could not be done, or None.
        A test whose call into S outlasts the cell's ``timeout`` is interrupted by the grader, as
        any cell is (T then says that S did not answer); T's own bound is a little longer."""
        from queue import Empty

        call = (f"__import__('hpcnb.course.testkernel', fromlist=['bring'])"
                f".bring({names_used(source)!r}, {timeout + 30!r})")
        try:
            reply = await self.run(call, timeout)
        except (Empty, TimeoutError):
            return f"the test kernel did not answer within {timeout:g} s"
        content = reply["content"]
        return None if content["status"] == "ok" else f"{content.get('evalue') or content.get('ename')}"

    def interrupt(self) -> None:
        """Interrupt the test running in T (an interrupt request on its control channel)."""
        self.client.control_channel.send(self.client.session.msg("interrupt_request", content={}))

    def stop(self) -> None:
        self.client.stop_channels()


SERVE = "__import__('hpcnb.course.testkernel', fromlist=['serve']).serve()"  # run in S before the notebook


# ------------------------------------------------------------------ starting T

def start_beside() -> None:
    """(In S's kernel process, before the kernel starts.) Start T with the descriptor the sandbox
    got for T's connection file, unread; the descriptor is closed here."""
    fd = os.environ.pop(FD_VARIABLE, None)
    if fd is None:
        return
    env = {**os.environ, "PYTHONNOUSERSITE": "1"}
    subprocess.Popen([sys.executable, "-P", "-m", "hpcnb.course.testkernel", fd], pass_fds=(int(fd),), env=env,
                     stdin=subprocess.DEVNULL, start_new_session=True)
    os.close(int(fd))


def _not_dumpable() -> None:
    import ctypes

    pr_set_dumpable = 4
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


def main(fd: int) -> None:
    """T: non-dumpable first; its connection file from ``fd`` into a memfd of its own; then the
    kernel, with no working-folder entry on ``sys.path`` (the student's files are not imported)."""
    _not_dumpable()
    with os.fdopen(fd, "rb") as source:
        info = json.loads(source.read())
    own = os.memfd_create("hpcnb-test-kernel")
    os.write(own, json.dumps(info).encode())
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(["-f", f"/proc/self/fd/{own}", "--HistoryManager.hist_file=:memory:"])
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
    app.start()


if __name__ == "__main__":
    main(int(sys.argv[1]))
