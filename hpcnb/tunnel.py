"""SSH tunnels to JupyterLab on a compute node: laptop -> login node -> compute node.

JupyterLab runs inside a Slurm allocation on a compute node, bound to 127.0.0.1.
The student's laptop reaches it through a two-hop SSH tunnel. :class:`TunnelPlan`
takes plain values (user, login host, node, ports) and renders

* the ProxyJump one-liner ``ssh -N -L 127.0.0.1:L:localhost:R -J user@login user@node``
  (:meth:`TunnelPlan.jump_argv`), and the classic form through the login node
  (:meth:`TunnelPlan.classic_argv`); see :data:`JUMP_NOTE` and :data:`CLASSIC_NOTE`;
* a ``~/.ssh/config`` block (:meth:`TunnelPlan.ssh_config`);
* the command that starts JupyterLab on the node (:meth:`TunnelPlan.jupyter_argv`,
  :meth:`TunnelPlan.jupyter_script`); see :data:`TOKEN_NOTE`;
* the URL to open on the laptop (:meth:`TunnelPlan.local_url`).

Commands come as argv lists (for :mod:`subprocess`, no shell) and as
``shlex``-quoted display strings. Every local forward binds 127.0.0.1 only.

OpenSSH does not hand ``-i`` or ``-o`` to the ``-J`` jump host, only ``-F``. So when
the plan carries an identity file or extra options, :meth:`~TunnelPlan.jump_argv`
spells the jump out as ``-o ProxyCommand=ssh ... -W %h:%p user@login``, which does
reach the login hop; the ``~/.ssh/config`` block avoids the issue altogether.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import shlex
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import quote

from hpcnb.slurm_options import check_text

__all__ = [
    "TunnelPlan", "plan_for_job", "pick_remote_port", "free_local_port",
    "validate_host", "validate_user", "validate_port",
    "JUMP_NOTE", "CLASSIC_NOTE", "TOKEN_NOTE", "TOKEN_ENV", "REMOTE_PORT_RANGE",
]

#: Inclusive range :func:`pick_remote_port` draws from: above common services, and wide
#: enough that jobs sharing a node rarely collide by accident. On a collision Jupyter refuses
#: to start (``port_retries=0``). The port is predictable from the user name and job id
#: (both visible in ``squeue``), so another user on the node can take it first and receive
#: whatever the browser sends through the tunnel: check that your own server started.
REMOTE_PORT_RANGE = (20000, 59999)
#: JupyterLab reads its token from this variable, so it never appears in ``ps``.
TOKEN_ENV = "JUPYTER_TOKEN"
DEFAULT_TOKEN_FILE = "~/.jupyter/hpcnb_token"

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
    f"Token safety: start Jupyter with a token (or password) from ${TOKEN_ENV}, kept in "
    "a file only you can read (chmod 600). Never pass it on the command line (other "
    "users see it in ps), never print it into Slurm output files or shared logs, never "
    "disable authentication (--IdentityProvider.token=''), and never bind 0.0.0.0 on "
    "a shared node."
)

_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\Z")
_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
_TOKEN_FILE = re.compile(r"(~/)?[A-Za-z0-9_./-]+\Z")
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
        fix = "pick one with pick_remote_port()/free_local_port()" if low >= 1024 else "use the site's SSH port (usually 22)"
        raise ValueError(f"{name}={value!r} must be an integer port in {low}..65535: {fix}")
    return value


def _validate_text(value: str, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}={value!r} must be a non-empty single line of text")
    return check_text(value, name, where="an ssh config line")


def pick_remote_port(user: str, job_id: int | str) -> int:
    """Deterministic port in :data:`REMOTE_PORT_RANGE` from a SHA-256 of user and job id.

    The same job always gets the same port (the batch script and the laptop agree
    without talking), and different users/jobs sharing a node rarely clash by accident;
    anyone can compute it too (see :data:`REMOTE_PORT_RANGE`).
    """
    validate_user(user)
    job = str(job_id).strip()
    if not job or not job.replace("_", "").isalnum():
        raise ValueError(f"job_id={job_id!r} must be a Slurm job id like 123456 or '123456_7'")
    low, high = REMOTE_PORT_RANGE
    digest = hashlib.sha256(f"{user}:{job}".encode()).digest()
    return low + int.from_bytes(digest[:8], "big") % (high - low + 1)


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that the OS reports free right now (it may be taken later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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

    def jupyter_argv(self, ip: str = "127.0.0.1") -> list[str]:
        """Start JupyterLab on the node; the token comes from ``$JUPYTER_TOKEN``, never argv.

        Pass ``ip=node`` only for the classic tunnel; wildcard binds are refused.
        """
        if ip.strip() in _WILDCARD_BINDS:
            raise ValueError(
                f"ip={ip!r} would expose Jupyter to every host on the network: bind '127.0.0.1' "
                "(ProxyJump tunnel) or the node's own name (classic tunnel)"
            )
        validate_host(ip, "ip")
        return ["jupyter", "lab", "--no-browser", f"--ip={ip}", f"--port={self.remote_port}",
                "--ServerApp.port_retries=0"]

    def jupyter_script(self, token_file: str = DEFAULT_TOKEN_FILE, ip: str = "127.0.0.1") -> str:
        """Bash lines for the batch script: create/read a private token file, start Jupyter.

        The token is read into ``$JUPYTER_TOKEN`` and never echoed; Jupyter then masks it
        in its own log. Read it on your laptop with ``ssh <login> cat <token_file>``.
        """
        if not _TOKEN_FILE.match(token_file) or ".." in token_file.split("/"):
            raise ValueError(
                f"token_file={token_file!r} must be a plain path like '~/.jupyter/hpcnb_token' "
                "(letters, digits, '_', '.', '-', '/')"
            )
        path = '"$HOME/' + token_file[2:] + '"' if token_file.startswith("~/") else shlex.quote(token_file)
        gen = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        return "\n".join([
            f"( umask 077; mkdir -p \"$(dirname {path})\"; test -s {path} || {gen} > {path} )",
            f"export {TOKEN_ENV}=\"$(cat {path})\"",
            shlex.join(self.jupyter_argv(ip)),
        ])

    def local_url(self, token: str | None = None) -> str:
        """The URL to open on the laptop; with *token* it logs in directly (keep it private)."""
        url = f"http://127.0.0.1:{self.local_port}/lab"
        return f"{url}?token={quote(token, safe='')}" if token else url

    def render(self) -> str:
        """Human-readable steps for a notebook cell: Jupyter, tunnel, config, URL, notes."""
        return "\n\n".join([
            f"1. On the compute node {self.node}, inside your job:\n{self.jupyter_script()}",
            f"2. On your laptop (ProxyJump, recommended):\n{self.jump_command()}",
            f"   Alternative (classic, via the login node):\n{self.classic_command()}",
            f"3. Or add to ~/.ssh/config and run `{self.config_command()}`:\n{self.ssh_config()}",
            f"4. Open {self.local_url()} and paste the token from {DEFAULT_TOKEN_FILE}.",
            JUMP_NOTE, CLASSIC_NOTE, TOKEN_NOTE,
        ])


def plan_for_job(user: str, login_host: str, node: str, job_id: int | str, **kwargs: object) -> TunnelPlan:
    """A :class:`TunnelPlan` with ``pick_remote_port(user, job_id)`` and a free local port."""
    kwargs.setdefault("remote_port", pick_remote_port(user, job_id))
    kwargs.setdefault("local_port", free_local_port())
    return TunnelPlan(user=user, login_host=login_host, node=node, **kwargs)  # type: ignore[arg-type]
