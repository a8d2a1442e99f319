"""Tests for hpcnb.tunnel: rendering and validation, then real tunnels through a throwaway sshd.

The ``ssh`` tests start ``/usr/sbin/sshd`` on 127.0.0.1 (two ports: one plays the login
node, the other the compute node), start a small HTTP server on 127.0.0.1 as a stand-in
for JupyterLab, run the generated ``ssh`` commands and fetch a random marker through them.
"""

from __future__ import annotations

import http.client
import http.server
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcnb.tunnel import (
    REMOTE_PORT_RANGE, TunnelPlan, free_local_port, pick_remote_port, plan_for_job,
    validate_host, validate_port, validate_user,
)

SSHD = "/usr/sbin/sshd"
INSTALL_HINT = "apt-get install -y openssh-server openssh-client"


def sissa(**kw: object) -> TunnelPlan:
    values: dict[str, object] = dict(user="alice", login_host="frontend1.hpc.sissa.it", node="cn042",
                                     remote_port=34567, local_port=8888)
    values.update(kw)
    return TunnelPlan(**values)  # type: ignore[arg-type]


# ---------------------------------------------------------------- rendering (no server)

def test_jump_command_is_the_lesson_one_liner_and_binds_loopback() -> None:
    plan = sissa()
    assert plan.jump_argv() == ["ssh", "-N", "-L", "127.0.0.1:8888:localhost:34567",
                                "-J", "alice@frontend1.hpc.sissa.it", "alice@cn042"]
    assert plan.jump_command() == ("ssh -N -L 127.0.0.1:8888:localhost:34567 "
                                   "-J alice@frontend1.hpc.sissa.it alice@cn042")
    for argv in (plan.jump_argv(), plan.classic_argv(), plan.config_argv()):
        forward = argv[argv.index("-L") + 1]
        assert forward.startswith("127.0.0.1:"), forward
        assert "0.0.0.0" not in " ".join(argv) and "*:" not in forward


def test_classic_command_forwards_to_the_node_via_login() -> None:
    plan = sissa()
    assert plan.classic_command() == "ssh -N -L 127.0.0.1:8888:cn042:34567 alice@frontend1.hpc.sissa.it"


def test_non_default_ssh_ports() -> None:
    plan = sissa(login_port=2222, node_ssh_port=2200)
    assert plan.jump_argv()[-5:] == ["-J", "alice@frontend1.hpc.sissa.it:2222", "-p", "2200", "alice@cn042"]
    assert plan.classic_argv()[-3:] == ["-p", "2222", "alice@frontend1.hpc.sissa.it"]


def test_identity_and_options_reach_the_login_hop_via_proxycommand() -> None:
    # ssh does not pass -i/-o to a -J jump host, so the plan spells the jump out.
    plan = sissa(identity_file="~/.ssh/id hpc", ssh_options={"ControlPath": "~/.ssh/cm-%C"})
    argv = plan.jump_argv()
    assert "-J" not in argv
    proxy = next(a for a in argv if a.startswith("ProxyCommand="))
    assert proxy == ("ProxyCommand=ssh -i '~/.ssh/id hpc' -o 'ControlPath=~/.ssh/cm-%%C' "
                     "-p 22 -W %h:%p alice@frontend1.hpc.sissa.it")
    assert argv[-1] == "alice@cn042" and argv[argv.index("-i") + 1] == "~/.ssh/id hpc"
    assert "'~/.ssh/id hpc'" in plan.jump_command()  # display string is shell-quoted


def test_ssh_config_block_renders_login_and_wildcard_node() -> None:
    text = sissa(identity_file="~/.ssh/id_ed25519").ssh_config()
    blocks = _parse_config(text)
    assert list(blocks) == ["frontend1", "cn*"]  # login first: ssh keeps the first value
    assert blocks["frontend1"] == {"HostName": "frontend1.hpc.sissa.it", "Port": "22", "User": "alice",
                                   "IdentityFile": "~/.ssh/id_ed25519", "ProxyJump": "none"}
    assert blocks["cn*"] == {"Port": "22", "User": "alice", "IdentityFile": "~/.ssh/id_ed25519",
                             "ProxyJump": "frontend1"}


@pytest.mark.parametrize(("login", "node", "alias", "pattern"), [
    ("frontend1.hpc.sissa.it", "cn042", "frontend1", "cn*"),
    ("narval.alliancecan.ca", "nc30328", "narval", "nc*"),
    ("alvis1.c3se.chalmers.se", "alvis1-04", "alvis1", "alvis*-*"),
    ("kebnekaise.hpc2n.umu.se", "b-cn0101.hpc2n.umu.se", "kebnekaise", "b-cn*"),
])
def test_ssh_config_is_understood_by_real_ssh(tmp_path: Path, login: str, node: str,
                                              alias: str, pattern: str) -> None:
    """``ssh -G`` (no connection) resolves the block exactly as a laptop would."""
    _require_binary("ssh")
    plan = TunnelPlan(user="alice", login_host=login, node=node, remote_port=30000, local_port=8888)
    assert (plan.alias, plan.pattern) == (alias, pattern)
    cfg = tmp_path / "config"
    cfg.write_text(plan.ssh_config())
    to_node = _ssh_g(cfg, node)
    assert to_node["hostname"] == node and to_node["user"] == "alice"
    assert to_node["proxyjump"] == alias
    to_login = _ssh_g(cfg, alias)  # alvis*-* must not make the login node jump to itself
    assert to_login["hostname"] == login and "proxyjump" not in to_login


def test_jupyter_command_binds_loopback_without_token_in_argv() -> None:
    plan = sissa()
    argv = plan.jupyter_argv()
    assert argv == ["jupyter", "lab", "--no-browser", "--ip=127.0.0.1", "--port=34567",
                    "--ServerApp.port_retries=0"]
    assert not any("token" in a.lower() for a in argv)
    assert plan.jupyter_argv(ip="cn042")[3] == "--ip=cn042"
    for bad in ("0.0.0.0", "::", "*", ""):
        with pytest.raises(ValueError, match="127.0.0.1"):
            plan.jupyter_argv(ip=bad)


def test_jupyter_script_keeps_token_private(tmp_path: Path) -> None:
    script = sissa().jupyter_script()
    assert script.splitlines()[-1] == "jupyter lab --no-browser --ip=127.0.0.1 --port=34567 --ServerApp.port_retries=0"
    setup = "\n".join(script.splitlines()[:-1])  # everything but starting Jupyter
    run = subprocess.run(["bash", "-euc", setup + '\nprintf %s "$JUPYTER_TOKEN" > "$HOME/seen"'],
                         env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]},
                         capture_output=True, text=True, timeout=30, check=True)
    token_file = tmp_path / ".jupyter" / "hpcnb_token"
    token = token_file.read_text().strip()
    assert len(token) >= 32 and (tmp_path / "seen").read_text() == token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token not in run.stdout + run.stderr  # never printed into the job's log
    with pytest.raises(ValueError, match="token_file"):
        sissa().jupyter_script(token_file="~/x; rm -rf ~")


def test_local_url() -> None:
    assert sissa().local_url() == "http://127.0.0.1:8888/lab"
    assert sissa().local_url("a/b+c") == "http://127.0.0.1:8888/lab?token=a%2Fb%2Bc"


def test_render_mentions_every_piece() -> None:
    text = sissa().render()
    for piece in ("-J alice@frontend1.hpc.sissa.it", "127.0.0.1:8888:cn042:34567", "ProxyJump frontend1",
                  "export JUPYTER_TOKEN=", "http://127.0.0.1:8888/lab", "0.0.0.0", "pam_slurm_adopt"):
        assert piece in text


def test_remote_port_is_deterministic_and_in_range() -> None:
    low, high = REMOTE_PORT_RANGE
    assert pick_remote_port("alice", 123456) == pick_remote_port("alice", "123456")
    # Stable across interpreters (no reliance on Python's randomized hash()).
    other = subprocess.run([sys.executable, "-c", "from hpcnb.tunnel import pick_remote_port as p;"
                            "print(p('alice', 123456))"], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "random",
                                "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert int(other.stdout) == pick_remote_port("alice", 123456)
    ports = [pick_remote_port(user, job) for user in ("alice", "bob", "carol", "dave")
             for job in range(1_000_000, 1_000_100)]
    assert all(low <= p <= high for p in ports)
    assert len(set(ports)) > 0.98 * len(ports)  # 400 jobs on one node: a few clashes at most
    assert pick_remote_port("alice", 7) != pick_remote_port("bob", 7)
    assert pick_remote_port("alice", "123_4") != pick_remote_port("alice", 1234)


def test_free_local_port_is_bindable_on_loopback() -> None:
    port = free_local_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_plan_for_job_uses_derived_ports() -> None:
    plan = plan_for_job("alice", "narval.alliancecan.ca", "nc30328", 42)
    assert plan.remote_port == pick_remote_port("alice", 42) and 1024 <= plan.local_port <= 65535


@pytest.mark.parametrize("host", ["a;b", "host name", "$(reboot)", "`id`", "-oProxyCommand=x", "a..b",
                                  "", "x" * 300, "h|cat", "user@host", "host:22", "::1", "a-.b"])
def test_invalid_hosts_are_rejected_naming_the_field(host: str) -> None:
    with pytest.raises(ValueError, match="login_host"):
        sissa(login_host=host)
    with pytest.raises(ValueError, match="node"):
        sissa(node=host)


@pytest.mark.parametrize("port", [0, 22, 80, 1023, 65536, 70000, "8888", 8888.0, True, None])
def test_invalid_tunnel_ports_are_rejected(port: object) -> None:
    with pytest.raises(ValueError, match="remote_port"):
        sissa(remote_port=port)
    with pytest.raises(ValueError, match="local_port.*1024..65535"):
        sissa(local_port=port)


def test_other_validation() -> None:
    assert sissa(login_port=22).login_port == 22  # ssh ports may be privileged
    for bad in ("a@b", "a b", "-x", "", "x;y"):
        with pytest.raises(ValueError, match="user"):
            sissa(user=bad)
    with pytest.raises(ValueError, match="login_port"):
        sissa(login_port=0)
    with pytest.raises(ValueError, match="ssh_options key"):
        sissa(ssh_options={"Bad Key": "x"})
    with pytest.raises(ValueError, match="UserKnownHostsFile"):
        sissa(ssh_options={"UserKnownHostsFile": "a\nProxyCommand evil"})
    with pytest.raises(ValueError, match="identity_file"):
        sissa(identity_file="~/.ssh/key%h")
    with pytest.raises(ValueError, match="job_id"):
        pick_remote_port("alice", "1; rm")
    assert validate_host("127.0.0.1") == "127.0.0.1" and validate_user("root") == "root"
    assert validate_port(22, low=1) == 22


# ---------------------------------------------------------------- real sshd + tunnels

@dataclass(frozen=True)
class SshServer:
    """A throwaway sshd on 127.0.0.1: ``login_port`` plays the login node, ``node_port`` the node."""

    user: str
    login_port: int
    node_port: int
    key: Path
    known_hosts: Path
    log: Path

    def options(self) -> dict[str, str]:
        return {"UserKnownHostsFile": str(self.known_hosts), "GlobalKnownHostsFile": os.devnull,
                "StrictHostKeyChecking": "accept-new", "IdentitiesOnly": "yes", "BatchMode": "yes",
                "ExitOnForwardFailure": "yes", "ConnectTimeout": "10"}


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    if not os.access(SSHD, os.X_OK):
        _missing(SSHD)
    for binary in ("ssh", "ssh-keygen"):
        _require_binary(binary)
    tmp = tmp_path_factory.mktemp("sshd")
    user = pwd.getpwuid(os.geteuid()).pw_name
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hpcnb-test-{name}",
                        "-f", str(tmp / name)], check=True, timeout=30)
    shutil.copy(tmp / "user_key.pub", tmp / "authorized_keys")
    login_port = free_local_port()
    node_port = free_local_port()
    while node_port == login_port:
        node_port = free_local_port()
    (tmp / "sshd_config").write_text(f"""\
Port {login_port}
Port {node_port}
ListenAddress 127.0.0.1
HostKey {tmp / 'host_key'}
AuthorizedKeysFile {tmp / 'authorized_keys'}
AllowUsers {user}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
AllowTcpForwarding local
AllowAgentForwarding no
X11Forwarding no
PrintMotd no
LogLevel VERBOSE
""")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
    log = tmp / "sshd.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(tmp / "sshd_config")],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        for port in (login_port, node_port):
            _wait_for_ssh_banner(port, proc, log)
        yield SshServer(user, login_port, node_port, tmp / "user_key", tmp / "known_hosts", log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture()
def jupyter_standin() -> Iterator[tuple[int, str]]:
    """An HTTP server on 127.0.0.1 serving a random marker: (port, marker)."""
    marker = f"hpcnb-marker-{secrets.token_hex(16)}"
    body = f"<html><body>{marker}</body></html>".encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], marker
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _test_plan(server: SshServer, remote_port: int, **kw: object) -> TunnelPlan:
    values: dict[str, object] = dict(
        user=server.user, login_host="127.0.0.1", login_port=server.login_port,
        node="127.0.0.1", node_ssh_port=server.node_port, remote_port=remote_port,
        local_port=free_local_port(), identity_file=str(server.key), ssh_options=server.options(),
        config_file=os.devnull)
    values.update(kw)
    return TunnelPlan(**values)  # type: ignore[arg-type]


@pytest.mark.ssh
def test_jump_tunnel_with_options_reaches_jupyter(sshd: SshServer, jupyter_standin: tuple[int, str]) -> None:
    port, marker = jupyter_standin
    plan = _test_plan(sshd, port)
    argv = plan.jump_argv()
    assert any(a.startswith("ProxyCommand=") for a in argv)
    before = _connections(sshd)
    with _tunnel(argv, plan.local_port):
        assert marker in _fetch(plan.local_port)
    _assert_hops(sshd, before, login=True, node=True)


@pytest.mark.ssh
def test_plain_dash_j_tunnel_with_config_file(sshd: SshServer, jupyter_standin: tuple[int, str],
                                              tmp_path: Path) -> None:
    port, marker = jupyter_standin
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host *\n" + "".join(f"    {k} {v}\n" for k, v in
                                        {"IdentityFile": sshd.key, **sshd.options()}.items()))
    plan = _test_plan(sshd, port, identity_file=None, ssh_options={}, config_file=str(cfg))
    argv = plan.jump_argv()
    assert argv[argv.index("-J") + 1] == f"{sshd.user}@127.0.0.1:{sshd.login_port}"
    before = _connections(sshd)
    with _tunnel(argv, plan.local_port):
        assert marker in _fetch(plan.local_port)
    _assert_hops(sshd, before, login=True, node=True)


@pytest.mark.ssh
def test_classic_tunnel_via_login(sshd: SshServer, jupyter_standin: tuple[int, str]) -> None:
    port, marker = jupyter_standin
    plan = _test_plan(sshd, port)
    before = _connections(sshd)
    with _tunnel(plan.classic_argv(), plan.local_port):
        assert marker in _fetch(plan.local_port)
    _assert_hops(sshd, before, login=True, node=False)  # the login node connects on its own


@pytest.mark.ssh
def test_rendered_ssh_config_block_tunnel(sshd: SshServer, jupyter_standin: tuple[int, str],
                                          tmp_path: Path) -> None:
    port, marker = jupyter_standin
    cfg = tmp_path / "config"
    plan = _test_plan(sshd, port, config_file=str(cfg), login_alias="hpcnb-login")
    cfg.write_text(plan.ssh_config())
    assert plan.config_argv()[-1] == "127.0.0.1"
    before = _connections(sshd)
    with _tunnel(plan.config_argv(), plan.local_port):
        assert marker in _fetch(plan.local_port)
    _assert_hops(sshd, before, login=True, node=True)


@pytest.mark.ssh
def test_broken_tunnel_yields_no_marker(sshd: SshServer, jupyter_standin: tuple[int, str]) -> None:
    """Wrong remote port: ssh comes up, but nothing answers behind it, so the check fails."""
    _, marker = jupyter_standin
    plan = _test_plan(sshd, free_local_port())  # nothing listens there
    with _tunnel(plan.jump_argv(), plan.local_port):
        with pytest.raises((OSError, http.client.HTTPException)):
            _fetch(plan.local_port, timeout=5)


@pytest.mark.ssh
def test_unauthorized_key_fails_with_sshs_reason(sshd: SshServer, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=30)
    plan = _test_plan(sshd, 30000, identity_file=str(stranger))
    with pytest.raises(RuntimeError, match="Permission denied"):
        with _tunnel(plan.jump_argv(), plan.local_port):
            pass


# ---------------------------------------------------------------- helpers

def _missing(what: str) -> None:
    if os.geteuid() == 0:
        pytest.fail(f"{what} is missing: install it with `{INSTALL_HINT}` (CI does this)")
    pytest.skip(f"{what} is missing and we are not root to install it: run `sudo {INSTALL_HINT}`")


def _require_binary(name: str) -> None:
    if shutil.which(name) is None:
        _missing(name)


def _parse_config(text: str) -> dict[str, dict[str, str]]:
    blocks: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, value = line.split(None, 1)
        if key == "Host":
            current = blocks.setdefault(value, {})
        else:
            current[key] = value
    return blocks


def _ssh_g(cfg: Path, host: str) -> dict[str, str]:
    out = subprocess.run(["ssh", "-G", "-F", str(cfg), host], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def _wait_for_ssh_banner(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"sshd exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"sshd did not answer on 127.0.0.1:{port} within {timeout}s:\n{log.read_text(errors='replace')}")


@contextmanager
def _tunnel(argv: Sequence[str], local_port: int, timeout: float = 20) -> Iterator[subprocess.Popen[bytes]]:
    """Run an ``ssh -N -L`` argv until its local port accepts; RuntimeError with ssh's stderr if not."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)  # no tty: no prompts
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"ssh exited with {proc.returncode} before the tunnel was up:\n{err}")
            try:
                socket.create_connection(("127.0.0.1", local_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tunnel port 127.0.0.1:{local_port} not open after {timeout}s") from None
                time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # ssh and its ProxyCommand child
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.stderr:
            proc.stderr.close()


def _fetch(local_port: int, timeout: float = 10) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    with opener.open(f"http://127.0.0.1:{local_port}/", timeout=timeout) as response:
        return response.read().decode()


def _connections(server: SshServer) -> tuple[int, int]:
    """SSH connections the sshd log shows so far on (login_port, node_port)."""
    log = server.log.read_text(errors="replace")
    return tuple(log.count(f"on 127.0.0.1 port {port} ") for port in (server.login_port, server.node_port))  # type: ignore[return-value]


def _assert_hops(server: SshServer, before: tuple[int, int], *, login: bool, node: bool) -> None:
    """The tunnel went through the login sshd and (ProxyJump) on to the node sshd, or not."""
    after = _connections(server)
    assert (after[0] > before[0], after[1] > before[1]) == (login, node), (before, after)
