"""Lesson 5: SSH tunnels to JupyterLab on a compute node: laptop -> login node -> compute node.

JupyterLab runs inside a Slurm job on a compute node, bound to 127.0.0.1. The server
picks its own port (``--port=0``: the kernel hands it a free one, so nobody can work it
out beforehand from ``squeue``) and reports port and token in a *server file* that only
you can read: Jupyter's ``jpserver-<pid>.json`` (mode 0600), written into the job's own
folder (``$JUPYTER_RUNTIME_DIR``, mode 0700). :func:`read_server_file` reads port and
token back and refuses a file that anyone else could read or that is not yours;
:func:`jupyter_script` writes the job's lines. :class:`TunnelPlan` then takes plain
values (user, login host, node, ports) and renders

* the ProxyJump one-liner ``ssh -N -L 127.0.0.1:L:localhost:R -J user@login user@node``
  (:meth:`TunnelPlan.jump_argv`), and the classic form through the login node
  (:meth:`TunnelPlan.classic_argv`); see :data:`JUMP_NOTE` and :data:`CLASSIC_NOTE`;
* a ``~/.ssh/config`` block (:meth:`TunnelPlan.ssh_config`);
* the URL to open on the laptop (:meth:`TunnelPlan.local_url`).

:func:`plan_for_server` builds the plan from a server file.

Commands come as argv lists (for :mod:`subprocess`, no shell) and as
``shlex``-quoted display strings. Every local forward binds 127.0.0.1 only.

OpenSSH does not hand ``-i`` or ``-o`` to the ``-J`` jump host, only ``-F``. So when
the plan carries an identity file or extra options, :meth:`~TunnelPlan.jump_argv`
spells the jump out as ``-o ProxyCommand=ssh ... -W %h:%p user@login``, which does
reach the login hop; the ``~/.ssh/config`` block avoids the issue altogether.
"""

from __future__ import annotations

import errno
import glob
import ipaddress
import json
import os
import re
import shlex
import socket
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from urllib.parse import quote

from hpcnb.slurm.options import check_text

__all__ = [
    "TunnelPlan", "ServerInfo", "UnsafeServerFile", "plan_for_server", "free_local_port",
    "read_server_file", "write_server_file", "wait_for_server_file", "jupyter_argv", "jupyter_script",
    "validate_host", "validate_port", "validate_user",
    "JUMP_NOTE", "CLASSIC_NOTE", "TOKEN_NOTE", "TOKEN_ENV", "RUNTIME_DIR_ENV", "DEFAULT_SERVER_FOLDER",
]

#: JupyterLab reads its token from this variable, so it never appears in ``ps``.
TOKEN_ENV = "JUPYTER_TOKEN"
#: Jupyter writes its server file (``jpserver-<pid>.json``) into this folder.
RUNTIME_DIR_ENV = "JUPYTER_RUNTIME_DIR"
#: Where :func:`jupyter_script` makes each job's own folder (``<folder>/<job id>``).
DEFAULT_SERVER_FOLDER = "~/.jupyter/hpcnb-jobs"
SERVER_FILE_GLOB = "jpserver-*.json"

JUMP_NOTE = (
    "ProxyJump (-J): the tunnel ends on the compute node itself, so Jupyter can listen "
    "on 127.0.0.1 there and nobody else on the cluster can reach it. Needs SSH access "
    "to nodes where you have a running job (allowed on most clusters, e.g. through "
    "pam_slurm_adopt). This is the form to use, and the only one that works when "
    "Jupyter is bound to 127.0.0.1."
)
CLASSIC_NOTE = (
    "Classic (-L via the login node): the login node opens the connection to "
    "<node>:<port>, so Jupyter must listen on the node's cluster address "
    "(--ip=<node>), where every user of the cluster can reach it and only the token "
    "protects it. Use it only where SSH to compute nodes is blocked."
)
TOKEN_NOTE = (
    f"Token safety: start Jupyter with a token from ${TOKEN_ENV} and read it back from "
    "the server file, which only you can read (mode 600, in a folder of mode 700). Never "
    "pass it on the command line (other users see it in ps), never print it into Slurm "
    "output files or shared logs, never disable authentication "
    "(--IdentityProvider.token=''), and never bind 0.0.0.0 on a shared node."
)

_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\Z")
_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
_PLAIN_PATH = re.compile(r"(~/)?[A-Za-z0-9_./-]+\Z")
_WILDCARD_BINDS = {"0.0.0.0", "::", "*", "[::]", ""}


def validate_host(value: str, name: str = "host") -> str:
    """Return *value* if it is a plain host name or IPv4 address, else raise ValueError."""
    hint = "use letters, digits, '-' and '.' only, like 'frontend1.hpc.sissa.it' or '127.0.0.1'"
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty host name: {hint}")
    check_text(value, name, where="an ssh command line")
    if len(value) > 253 or not all(_LABEL.match(label) for label in value.split(".")):
        raise ValueError(f"{name}={value!r} is not a valid host name: {hint}")
    return value


def validate_user(value: str, name: str = "user") -> str:
    """Return *value* if it is a plain login name, else raise ValueError."""
    if isinstance(value, str):
        check_text(value, name, where="an ssh command line")
    if not isinstance(value, str) or not _USER.match(value):
        raise ValueError(
            f"{name}={value!r} is not a valid login name: use your cluster user name "
            "(letters, digits, '_', '.', '-'; at most 32 characters, no '@' or spaces)"
        )
    return value


def validate_port(value: int, name: str = "port", low: int = 1024) -> int:
    """Return *value* if it is an int port in ``low..65535``, else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 65535:
        fix = ("take the remote port from the server file (read_server_file) and the local one from "
               "free_local_port()" if low >= 1024 else "use the site's SSH port (usually 22)")
        raise ValueError(f"{name}={value!r} must be an integer port in {low}..65535: {fix}")
    return value


def _validate_text(value: str, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}={value!r} must be a non-empty single line of text")
    return check_text(value, name, where="an ssh config line")


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that the OS reports free right now (it may be taken later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the server file: port and token, readable by you alone ----------------------------------

class UnsafeServerFile(PermissionError):
    """A server file that others may read or change, or that is not yours: not trusted."""


@dataclass(frozen=True)
class ServerInfo:
    """What a server file says: where the server listens, and its token (kept out of ``repr``)."""

    path: Path
    port: int
    token: str = field(repr=False)
    hostname: str = "127.0.0.1"
    pid: int | None = None


def _expand(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.expanduser(os.fspath(path)))


def _server_file_in(folder: Path) -> Path:
    found = sorted(glob.glob(glob.escape(str(folder)) + "/" + SERVER_FILE_GLOB))
    if not found:
        raise FileNotFoundError(f"no server file ({SERVER_FILE_GLOB}) in {folder} yet: has the server started?")
    if len(found) > 1:
        names = ", ".join(Path(f).name for f in found)
        raise ValueError(f"{folder} holds {len(found)} server files ({names}): give read_server_file one of "
                         "them (one server per job folder)")
    return Path(found[0])


def _check_private(file: Path, info: os.stat_result) -> None:
    """Raise :class:`UnsafeServerFile` unless ``info`` is a regular file of ours that only we can use."""
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeServerFile(f"{file} is not a regular file: refusing to read a token from it")
    me = os.geteuid()
    if info.st_uid != me:
        raise UnsafeServerFile(
            f"{file} belongs to uid {info.st_uid}, not to you (uid {me}): its port and token may lead "
            "to someone else's server; refusing it"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise UnsafeServerFile(
            f"{file} has mode {mode:04o}: group or others may read or change the token in it, so it is "
            "refused. Treat the token as leaked: cancel the job and start the server again with umask 077 "
            "(jupyter_script does), which creates the file with mode 0600"
        )


def read_server_file(path: str | os.PathLike[str]) -> ServerInfo:
    """Port and token from a server file, or from the one ``jpserver-*.json`` in folder ``path``.

    Reads Jupyter's own ``jpserver-<pid>.json`` (and what :func:`write_server_file` writes).
    Refuses (:class:`UnsafeServerFile`) a symbolic link, a file that is not yours, and a file
    with any permission for group or others; the checks apply to the file as opened, so it
    cannot be swapped in between. ValueError for a file without an integer ``port`` and a
    ``token`` (or one still being written); FileNotFoundError while there is none.
    """
    file = _expand(path)
    if file.is_dir():
        file = _server_file_in(file)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeServerFile(f"{file} is a symbolic link: refusing to read a token through it") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        _check_private(file, os.fstat(handle.fileno()))
        raw = handle.read(1 << 16)
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{file} is not a complete JSON server file (still being written?)") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file} is not a server file: it holds no JSON object")
    port, token = data.get("port"), data.get("token")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{file}: port={port!r} is not a TCP port a server listens on")
    if not isinstance(token, str) or not token:
        raise ValueError(f"{file} holds no token: start the server with ${TOKEN_ENV} set (jupyter_script does)")
    check_text(token, f"the token in {file}", where="an HTTP header")
    hostname = data.get("hostname") or "127.0.0.1"
    pid = data.get("pid") if isinstance(data.get("pid"), int) else None
    return ServerInfo(file, port, token, str(hostname), pid)


def write_server_file(folder: str | os.PathLike[str], port: int, token: str, hostname: str = "127.0.0.1") -> Path:
    """Write ``<folder>/jpserver-<pid>.json`` as Jupyter does, created 0600 and never over another file.

    For a server that holds its port already (a stand-in for Jupyter). ``folder`` is made
    (mode 0700) if it is missing. The file is written under a temporary name opened with
    ``O_CREAT | O_EXCL`` and mode 0600, then hard-linked to its final name: a reader never sees
    it half written, and an existing file or symbolic link of that name is never written through
    (FileExistsError).
    """
    where = _expand(folder)
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    validate_port(port, "port", low=1)
    check_text(token, "token", where="an HTTP header")
    pid = os.getpid()
    final, partial = where / f"jpserver-{pid}.json", where / f".jpserver-{pid}.json.partial"
    info = {"hostname": hostname, "port": port, "token": token, "pid": pid, "url": f"http://{hostname}:{port}/"}
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(info, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.link(partial, final)
    finally:
        partial.unlink(missing_ok=True)
    return final


_STARTING = ("PENDING", "CONFIGURING", "RUNNING")


def wait_for_server_file(folder: str | os.PathLike[str], *, timeout: float = 120.0,
                         job_state: Callable[[], str] | None = None, poll: float = 0.2) -> ServerInfo:
    """:func:`read_server_file` once the server has written its file; never waits past ``timeout`` s.

    ``job_state`` (e.g. the job's state from ``squeue``) is asked between tries: anything but
    PENDING, CONFIGURING or RUNNING ends the wait (RuntimeError); so does a refused file
    (:class:`UnsafeServerFile`) at once. TimeoutError says what was last seen.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return read_server_file(folder)
        except (FileNotFoundError, ValueError) as err:
            seen = str(err)
        state = job_state() if job_state else "RUNNING"
        if state not in _STARTING:
            raise RuntimeError(f"the server's job is {state or 'gone'}, and it left no usable server file: {seen}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no usable server file in {_expand(folder)} after {timeout:g} s "
                               f"(job {state}): {seen}")
        time.sleep(poll)


def jupyter_argv(ip: str = "127.0.0.1") -> list[str]:
    """Start JupyterLab on the node on a port it picks; the token comes from ``$JUPYTER_TOKEN``, never argv.

    With ``--port=0`` Jupyter asks the kernel for a free port, closes that probe, writes its
    server file and starts listening on the port a moment later. Should another process take
    the port in that moment, Jupyter cannot listen and stops, and its server file may stay
    behind: trust a server file only while its job runs. ``--ServerApp.port_retries=0``: one
    try, no fallback to other ports. Pass ``ip=node`` only for the classic tunnel; wildcard
    binds are refused.
    """
    if ip.strip() in _WILDCARD_BINDS:
        raise ValueError(
            f"ip={ip!r} would expose Jupyter to every host on the network: bind '127.0.0.1' "
            "(ProxyJump tunnel) or the node's own name (classic tunnel)"
        )
    validate_host(ip, "ip")
    return ["jupyter", "lab", "--no-browser", f"--ip={ip}", "--port=0", "--ServerApp.port_retries=0"]


def jupyter_script(folder: str = DEFAULT_SERVER_FOLDER, ip: str = "127.0.0.1") -> str:
    """Bash lines for the batch script: the job's own private folder, a fresh token, JupyterLab.

    ``umask 077`` makes all the job creates yours alone; ``<folder>/$SLURM_JOB_ID`` is made
    fresh (mode 0700; the job stops if it exists already) and becomes ``$JUPYTER_RUNTIME_DIR``,
    where Jupyter writes its server file ``jpserver-<pid>.json`` (mode 0600: port and token)
    and removes it when it shuts down cleanly. The token is made in a command substitution and
    handed over in ``$JUPYTER_TOKEN``: never on a command line, never echoed (Jupyter masks a
    token from the environment in its log). :func:`read_server_file` on ``<folder>/<job id>``
    reads port and token back.
    """
    if not _PLAIN_PATH.match(folder) or ".." in folder.split("/"):
        raise ValueError(
            f"folder={folder!r} must be a plain path like '~/.jupyter/hpcnb-jobs' "
            "(letters, digits, '_', '.', '-', '/')"
        )
    base = "$HOME/" + folder[2:] if folder.startswith("~/") else folder
    gen = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
    return "\n".join([
        "umask 077  # all that the job creates below: yours alone",
        f'mkdir -p "{base}"',
        f'export {RUNTIME_DIR_ENV}="{base}/${{SLURM_JOB_ID:?not inside a Slurm job}}"',
        f'mkdir "${RUNTIME_DIR_ENV}" || exit 1  # the job\'s own folder, mode 0700',
        f'export {TOKEN_ENV}="$({gen})"',
        shlex.join(jupyter_argv(ip)),
    ])


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def _config_value(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value


@dataclass(frozen=True)
class TunnelPlan:
    """Everything needed to reach JupyterLab on ``node`` (port ``remote_port``) from the laptop.

    ``ssh_options`` (e.g. ``{"UserKnownHostsFile": "/tmp/kh"}``) and ``identity_file``
    apply to both hops; ``config_file`` becomes ``ssh -F``. ``node_ssh_port`` is the
    node's sshd port (22 on real clusters).
    """

    user: str
    login_host: str
    node: str
    remote_port: int
    local_port: int
    login_port: int = 22
    node_ssh_port: int = 22
    identity_file: str | None = None
    ssh_options: Mapping[str, str] = field(default_factory=dict)
    config_file: str | None = None
    login_alias: str | None = None
    node_pattern: str | None = None

    def __post_init__(self) -> None:
        validate_user(self.user)
        validate_host(self.login_host, "login_host")
        validate_host(self.node, "node")
        validate_port(self.remote_port, "remote_port")
        validate_port(self.local_port, "local_port")
        validate_port(self.login_port, "login_port", low=1)
        validate_port(self.node_ssh_port, "node_ssh_port", low=1)
        if self.identity_file is not None:
            _validate_text(self.identity_file, "identity_file")
            if "%" in self.identity_file:
                raise ValueError(
                    f"identity_file={self.identity_file!r}: ssh expands '%' tokens in key paths; "
                    "rename the key file without '%'"
                )
        if self.config_file is not None:
            _validate_text(self.config_file, "config_file")
        if self.login_alias is not None:
            validate_host(self.login_alias, "login_alias")
        if self.node_pattern is not None and not re.fullmatch(r"[A-Za-z0-9.*?-]+", self.node_pattern):
            raise ValueError(
                f"node_pattern={self.node_pattern!r} must be an ssh Host pattern like 'cn*' "
                "(letters, digits, '-', '.', '*', '?')"
            )
        options = dict(self.ssh_options)
        for key, value in options.items():
            if not isinstance(key, str) or not _OPTION.match(key):
                raise ValueError(f"ssh_options key {key!r} must be an ssh option name like 'UserKnownHostsFile'")
            _validate_text(value, f"ssh_options[{key!r}]")
        object.__setattr__(self, "ssh_options", MappingProxyType(options))

    # -- pieces --------------------------------------------------------------------
    @property
    def login(self) -> str:
        """``user@login_host``."""
        return f"{self.user}@{self.login_host}"

    @property
    def target(self) -> str:
        """``user@node``."""
        return f"{self.user}@{self.node}"

    @property
    def alias(self) -> str:
        """The ``Host`` name of the login node in the ssh config block."""
        if self.login_alias:
            return self.login_alias
        return "login" if _is_ipv4(self.login_host) else self.login_host.split(".")[0]

    @property
    def pattern(self) -> str:
        """``Host`` pattern for compute nodes: digit runs of ``node`` become ``*`` (cn042 -> cn*)."""
        if self.node_pattern:
            return self.node_pattern
        if _is_ipv4(self.node):
            return self.node
        pattern = re.sub(r"\*+", "*", re.sub(r"[0-9]+", "*", self.node.split(".")[0]))
        return self.node if pattern.strip("*.-") == "" else pattern

    def _common_options(self) -> list[str]:
        """``-F``, ``-i`` and ``-o`` options that every hop needs."""
        argv: list[str] = []
        if self.config_file:
            argv += ["-F", self.config_file]
        if self.identity_file:
            argv += ["-i", self.identity_file]
        for key, value in self.ssh_options.items():
            argv += ["-o", f"{key}={value}"]
        return argv

    def _jump(self) -> list[str]:
        """``-J user@login[:port]``, or a ProxyCommand when per-hop options must reach the login node."""
        if not self.identity_file and not self.ssh_options:
            port = "" if self.login_port == 22 else f":{self.login_port}"
            return ["-J", f"{self.login}{port}"]
        # ssh expands %-tokens in ProxyCommand: escape ours, keep %h:%p for the node.
        inner = [shlex.quote(a).replace("%", "%%") for a in ["ssh", *self._common_options()]]
        inner += ["-p", str(self.login_port), "-W", "%h:%p", self.login]
        return ["-o", "ProxyCommand=" + " ".join(inner)]

    # -- commands ------------------------------------------------------------------
    def jump_argv(self) -> list[str]:
        """``ssh -N -L 127.0.0.1:L:localhost:R -J user@login user@node`` as an argv list."""
        argv = ["ssh", "-N", "-L", f"127.0.0.1:{self.local_port}:localhost:{self.remote_port}"]
        argv += self._common_options() + self._jump()
        if self.node_ssh_port != 22:
            argv += ["-p", str(self.node_ssh_port)]
        return argv + [self.target]

    def classic_argv(self) -> list[str]:
        """``ssh -N -L 127.0.0.1:L:node:R user@login``: the login node connects to the node."""
        argv = ["ssh", "-N", "-L", f"127.0.0.1:{self.local_port}:{self.node}:{self.remote_port}"]
        argv += self._common_options()
        if self.login_port != 22:
            argv += ["-p", str(self.login_port)]
        return argv + [self.login]

    def config_argv(self) -> list[str]:
        """``ssh -N -L 127.0.0.1:L:localhost:R node``, relying on :meth:`ssh_config`."""
        argv = ["ssh", "-N", "-L", f"127.0.0.1:{self.local_port}:localhost:{self.remote_port}"]
        if self.config_file:
            argv += ["-F", self.config_file]
        return argv + [self.node]

    def jump_command(self) -> str:
        """Display string of :meth:`jump_argv`."""
        return shlex.join(self.jump_argv())

    def classic_command(self) -> str:
        """Display string of :meth:`classic_argv`."""
        return shlex.join(self.classic_argv())

    def config_command(self) -> str:
        """Display string of :meth:`config_argv`."""
        return shlex.join(self.config_argv())

    def ssh_config(self) -> str:
        """A ``~/.ssh/config`` block: the login node, plus a wildcard block for compute nodes.

        The login block comes first with ``ProxyJump none`` (ssh keeps the first value
        it reads), so a node pattern that also matches the login alias cannot loop.
        """
        common = [("User", self.user)]
        if self.identity_file:
            common.append(("IdentityFile", self.identity_file))
        common += list(self.ssh_options.items())
        login = [("HostName", self.login_host), ("Port", str(self.login_port)), *common, ("ProxyJump", "none")]
        node = [("Port", str(self.node_ssh_port)), *common, ("ProxyJump", self.alias)]
        lines = [f"# hpcnb: login node, then any compute node through it (ssh {self.node})"]
        for host, options in ((self.alias, login), (self.pattern, node)):
            lines.append(f"Host {host}")
            lines += [f"    {key} {_config_value(value)}" for key, value in options]
            lines.append("")
        return "\n".join(lines)

    def local_url(self, token: str | None = None) -> str:
        """The URL to open on the laptop; with *token* it logs in directly (keep it private)."""
        url = f"http://127.0.0.1:{self.local_port}/lab"
        return f"{url}?token={quote(token, safe='')}" if token else url

    def render(self) -> str:
        """Human-readable steps for a notebook cell: Jupyter, tunnel, config, URL, notes."""
        return "\n\n".join([
            f"1. In your batch job on a compute node (the server picks its port):\n{jupyter_script()}",
            f"2. On your laptop (ProxyJump, recommended):\n{self.jump_command()}",
            f"   Alternative (classic, via the login node):\n{self.classic_command()}",
            f"3. Or add to ~/.ssh/config and run `{self.config_command()}`:\n{self.ssh_config()}",
            f"4. Open {self.local_url()} and paste the token from the server file in "
            f"{DEFAULT_SERVER_FOLDER}/<job id>/ (read_server_file reads it).",
            JUMP_NOTE, CLASSIC_NOTE, TOKEN_NOTE,
        ])


def plan_for_server(user: str, login_host: str, node: str, server: ServerInfo | str | os.PathLike[str],
                    **kwargs: object) -> TunnelPlan:
    """A :class:`TunnelPlan` to the port in ``server`` (a :class:`ServerInfo`, or a server file or
    job folder for :func:`read_server_file`), with a free local port unless ``local_port`` is given."""
    info = server if isinstance(server, ServerInfo) else read_server_file(server)
    kwargs.setdefault("local_port", free_local_port())
    return TunnelPlan(user=user, login_host=login_host, node=node, remote_port=info.port, **kwargs)  # type: ignore[arg-type]
