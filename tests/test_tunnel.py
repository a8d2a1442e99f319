"""Tests for hpcnb.lessons.tunnel: rendering and validation, the private server file, then real tunnels
through a throwaway sshd.

The ``ssh`` tests start ``/usr/sbin/sshd`` on 127.0.0.1 (two ports: one plays the login
node, the other the compute node), start a small HTTP server on 127.0.0.1 as a stand-in
for JupyterLab, run the generated ``ssh`` commands and fetch a random marker through them;
two of them start the real JupyterLab from :func:`jupyter_script` (about 5 s each).
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
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
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcnb.lessons.tunnel import (
    ServerInfo, TunnelPlan, UnsafeServerFile, free_local_port, jupyter_argv, jupyter_script, plan_for_server,
    read_server_file, validate_host, validate_port, validate_user, wait_for_server_file, write_server_file,
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


def test_jupyter_command_binds_loopback_on_a_port_of_its_own_without_token_in_argv() -> None:
    argv = jupyter_argv()
    assert argv == ["jupyter", "lab", "--no-browser", "--ip=127.0.0.1", "--port=0", "--ServerApp.port_retries=0"]
    assert not any("token" in a.lower() for a in argv)
    assert jupyter_argv(ip="cn042")[3] == "--ip=cn042"
    for bad in ("0.0.0.0", "::", "*", ""):
        with pytest.raises(ValueError, match="127.0.0.1"):
            jupyter_argv(ip=bad)


def _fake_jupyter(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``jupyter`` records its argv, runtime folder and token, then exits."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "jupyter"
    fake.write_text('#!/bin/bash\nprintf "%s\\n" "$*" "$JUPYTER_RUNTIME_DIR" "$JUPYTER_TOKEN" "$(umask)" > "$HOME/seen"\n')
    fake.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}


def test_jupyter_script_makes_a_private_folder_and_keeps_the_token_out_of_sight(tmp_path: Path) -> None:
    env = _fake_jupyter(tmp_path)
    run = subprocess.run(["bash", "-c", jupyter_script()], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    argv, runtime, token, umask = (Path(env["HOME"]) / "seen").read_text().splitlines()
    folder = Path(env["HOME"]) / ".jupyter" / "hpcnb-jobs" / "4242"
    assert argv == "lab --no-browser --ip=127.0.0.1 --port=0 --ServerApp.port_retries=0"
    assert runtime == str(folder) and umask == "0077"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
    assert len(token) >= 32 and token not in run.stdout + run.stderr + argv  # never printed, never in argv
    again = subprocess.run(["bash", "-c", jupyter_script()], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "File exists" in again.stderr  # a job folder is never reused
    outside = subprocess.run(["bash", "-c", jupyter_script("scratch/jobs")], capture_output=True, text=True,
                             timeout=60, env={**env, "SLURM_JOB_ID": ""}, cwd=tmp_path)
    assert outside.returncode != 0 and "not inside a Slurm job" in outside.stderr
    for bad in ("~/x; rm -rf ~", "~/../x", "a b", "$HOME/x"):
        with pytest.raises(ValueError, match="folder"):
            jupyter_script(bad)


def test_local_url() -> None:
    assert sissa().local_url() == "http://127.0.0.1:8888/lab"
    assert sissa().local_url("a/b+c") == "http://127.0.0.1:8888/lab?token=a%2Fb%2Bc"


def test_render_mentions_every_piece() -> None:
    text = sissa().render()
    for piece in ("-J alice@frontend1.hpc.sissa.it", "127.0.0.1:8888:cn042:34567", "ProxyJump frontend1",
                  "--port=0", "umask 077", "http://127.0.0.1:8888/lab", "0.0.0.0", "pam_slurm_adopt",
                  "~/.jupyter/hpcnb-jobs/<job id>"):
        assert piece in text


def test_free_local_port_is_bindable_on_loopback() -> None:
    port = free_local_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


# ---------------------------------------------------------------- the server file

def test_server_file_is_created_0600_in_a_0700_folder_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)  # the most permissive umask: the modes must not depend on it
    try:
        path = write_server_file(tmp_path / "job-7", 45678, "s3cret-token")
    finally:
        os.umask(old)
    assert path == tmp_path / "job-7" / f"jpserver-{os.getpid()}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left
    info = read_server_file(path.parent)  # the folder: its one server file
    assert (info.port, info.token, info.hostname, info.pid, info.path) == (45678, "s3cret-token", "127.0.0.1",
                                                                           os.getpid(), path)
    assert "s3cret-token" not in repr(info)


def test_server_file_never_replaces_or_writes_through_an_existing_name(tmp_path: Path) -> None:
    first = write_server_file(tmp_path, 45678, "mine")
    with pytest.raises(FileExistsError):
        write_server_file(tmp_path, 45679, "again")
    assert read_server_file(first).port == 45678
    first.unlink()
    target = tmp_path / "elsewhere.json"
    first.symlink_to(target)  # a link planted where the file goes
    with pytest.raises(FileExistsError):
        write_server_file(tmp_path, 45680, "mine")
    assert not target.exists()


def test_server_file_reads_jupyters_own_format(tmp_path: Path) -> None:
    path = tmp_path / "jpserver-31337.json"
    path.touch(mode=0o600)
    path.write_text(json.dumps({"base_url": "/", "hostname": "127.0.0.1", "password": False, "pid": 31337,
                                "port": 40001, "root_dir": "/home/alice", "secure": False, "sock": "",
                                "token": "abc123", "url": "http://127.0.0.1:40001/", "version": "2.21.1"}))
    assert read_server_file(tmp_path) == ServerInfo(path, 40001, "abc123", "127.0.0.1", 31337)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o620, 0o602, 0o660, 0o666, 0o610])
def test_server_file_readable_or_writable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = write_server_file(tmp_path, 45678, "token")
    path.chmod(mode)
    with pytest.raises(UnsafeServerFile, match=f"mode {mode:04o}: group or others.*leaked.*umask 077"):
        read_server_file(path)
    with pytest.raises(UnsafeServerFile):  # and waiting does not wait for it to become safe
        wait_for_server_file(tmp_path, timeout=30)


def test_server_file_of_another_user_or_through_a_link_is_refused(tmp_path: Path) -> None:
    path = write_server_file(tmp_path / "job", 45678, "token")
    link = tmp_path / "jpserver-1.json"
    link.symlink_to(path)
    with pytest.raises(UnsafeServerFile, match="symbolic link"):
        read_server_file(link)
    if os.geteuid() != 0:
        pytest.skip("making a file another user owns needs root (CI runs as root)")
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(path, nobody, -1)
    with pytest.raises(UnsafeServerFile, match=f"belongs to uid {nobody}, not to you"):
        read_server_file(path)


def test_server_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no server file"):
        read_server_file(tmp_path)
    for text, why in (('{"port": 4', "not a complete JSON"), ("[]", "no JSON object"),
                      ('{"port": "x", "token": "t"}', "port='x'"), ('{"port": 40000}', "no token"),
                      ('{"port": 40000, "token": "a\\nb"}', "token")):
        path = tmp_path / "jpserver-1.json"
        path.unlink(missing_ok=True)
        path.touch(mode=0o600)
        path.write_text(text)
        with pytest.raises(ValueError, match=why):
            read_server_file(path)
    write_server_file(tmp_path, 45678, "token")
    with pytest.raises(ValueError, match="2 server files"):
        read_server_file(tmp_path)


def test_waiting_for_the_server_file_ends_with_what_it_saw(tmp_path: Path) -> None:
    with pytest.raises(TimeoutError, match=r"after 0.3 s \(job RUNNING\): .*no server file"):
        wait_for_server_file(tmp_path, timeout=0.3, poll=0.05)
    with pytest.raises(RuntimeError, match="job is FAILED"):
        wait_for_server_file(tmp_path / "never", timeout=30, job_state=lambda: "FAILED")
    threading.Timer(0.3, write_server_file, (tmp_path, 45678, "late")).start()
    assert wait_for_server_file(tmp_path, timeout=30, poll=0.05).token == "late"


def test_plan_for_server_takes_the_port_from_the_file(tmp_path: Path) -> None:
    write_server_file(tmp_path, 45678, "token")
    plan = plan_for_server("alice", "narval.alliancecan.ca", "nc30328", tmp_path)
    assert plan.remote_port == 45678 and 1024 <= plan.local_port <= 65535
    info = read_server_file(tmp_path)
    assert plan_for_server("alice", "narval.alliancecan.ca", "nc30328", info, local_port=9999).local_port == 9999
    (tmp_path / f"jpserver-{os.getpid()}.json").chmod(0o644)
    with pytest.raises(UnsafeServerFile):
        plan_for_server("alice", "narval.alliancecan.ca", "nc30328", tmp_path)


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


class _QuietHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """An HTTP server with ``handler`` on 127.0.0.1 (a port of its own), for the ``with`` block: its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture()
def jupyter_standin() -> Iterator[tuple[int, str]]:
    """An HTTP server on 127.0.0.1 serving a random marker: (port, marker)."""
    marker = f"hpcnb-marker-{secrets.token_hex(16)}"
    body = f"<html><body>{marker}</body></html>".encode()

    class Handler(_QuietHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with _serving(Handler) as port:
        yield port, marker


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


@pytest.fixture()
def squatter() -> Iterator[tuple[int, list[str]]]:
    """Another process holding a port on the node: (its port, the Authorization headers sent to it)."""
    knocks: list[str] = []

    class Handler(_QuietHandler):
        def do_GET(self) -> None:  # noqa: N802
            knocks.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    with _serving(Handler) as port:
        yield port, knocks


@contextmanager
def _job(script: str, home: Path, job_id: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """Run job-script lines as the batch shell would (``$SLURM_JOB_ID`` set, output to a log)."""
    config = home / "jupyter-config"
    config.mkdir(exist_ok=True)  # as root (CI), Jupyter wants allow_root; a job runs as its user
    (config / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"allow_root": True}}))
    env = {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "LANG": "C.UTF-8",
           "SLURM_JOB_ID": job_id, "JUPYTER_CONFIG_DIR": str(config)}
    log = home / f"slurm-{job_id}.out"
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", "-c", script], cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc, log
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group of ``proc`` (started with a session of its own), as scancel signals
    a job's processes, then wait until all of them have ended, as a job ends; SIGKILL after 30 s.
    (The script's shell dies at once; JupyterLab removes its server file on its way out.)"""
    deadline = time.monotonic() + 30
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
        while time.monotonic() < deadline:
            proc.poll()  # reaps the shell: a zombie would keep the group alive
            os.killpg(proc.pid, 0)
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _state(proc: subprocess.Popen[bytes]) -> str:
    return "RUNNING" if proc.poll() is None else f"ended with exit code {proc.returncode}"


@pytest.mark.ssh
def test_jupyter_from_the_job_script_through_the_tunnel(sshd: SshServer, squatter: tuple[int, list[str]],
                                                        tmp_path: Path) -> None:
    """The real JupyterLab of jupyter_script(): a port of its own, port and token in a 0600 file that
    plan_for_server reads, reached through the tunnel; the process on another port gets nothing."""
    taken, knocks = squatter
    folder = tmp_path / ".jupyter" / "hpcnb-jobs" / "4242"
    with _job(jupyter_script(), tmp_path, "4242") as (proc, log):
        server = wait_for_server_file(folder, timeout=120, job_state=lambda: _state(proc))
        assert server.port != taken and server.pid is not None
        assert stat.S_IMODE(server.path.stat().st_mode) == 0o600 and server.path.stat().st_uid == os.geteuid()
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        plan = plan_for_server(sshd.user, "127.0.0.1", "127.0.0.1", folder, login_port=sshd.login_port,
                               node_ssh_port=sshd.node_port, identity_file=str(sshd.key),
                               ssh_options=sshd.options(), config_file=os.devnull)
        assert plan.remote_port == server.port
        with _tunnel(plan.jump_argv(), plan.local_port):
            status, body = _api_status(plan.local_port, server.token)
            assert status == 200 and "started" in json.loads(body), body
            assert _api_status(plan.local_port, None)[0] == 403
        _stop(proc)  # a clean shutdown takes the server file away
        assert not list(folder.glob("jpserver-*.json"))
        assert server.token not in log.read_text(errors="replace")
    assert knocks == []


def test_jupyter_on_a_port_taken_by_another_process_stops_and_reports_nothing(
        squatter: tuple[int, list[str]], tmp_path: Path) -> None:
    """Told a fixed port that another process holds, JupyterLab exits instead of serving elsewhere,
    and the wait for its server file ends with the job's state (a predicted port fails like this)."""
    taken, knocks = squatter
    script = jupyter_script().replace("--port=0", f"--port={taken}")
    folder = tmp_path / ".jupyter" / "hpcnb-jobs" / "4243"
    with _job(script, tmp_path, "4243") as (proc, log):
        with pytest.raises(RuntimeError, match="job is ended with exit code 1"):
            wait_for_server_file(folder, timeout=120, job_state=lambda: _state(proc))
        assert f"The port {taken} is already in use" in log.read_text(errors="replace")
    assert not list(folder.glob("jpserver-*.json")) and knocks == []


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
        _stop(proc)  # ssh and its ProxyCommand child
        if proc.stderr:
            proc.stderr.close()


def _fetch(local_port: int, timeout: float = 10) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    with opener.open(f"http://127.0.0.1:{local_port}/", timeout=timeout) as response:
        return response.read().decode()


def _api_status(local_port: int, token: str | None, timeout: float = 60) -> tuple[int, str]:
    """GET /api/status through the tunnel, with ``Authorization: token ...`` if given: (status, body).

    Jupyter writes its server file just before it starts listening: retried until it answers.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"http://127.0.0.1:{local_port}/api/status",
                                     headers={"Authorization": f"token {token}"} if token else {})
    deadline = time.monotonic() + timeout
    while True:
        try:
            with opener.open(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except (OSError, http.client.HTTPException):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _connections(server: SshServer) -> tuple[int, int]:
    """SSH connections the sshd log shows so far on (login_port, node_port)."""
    log = server.log.read_text(errors="replace")
    return tuple(log.count(f"on 127.0.0.1 port {port} ") for port in (server.login_port, server.node_port))  # type: ignore[return-value]


def _assert_hops(server: SshServer, before: tuple[int, int], *, login: bool, node: bool) -> None:
    """The tunnel went through the login sshd and (ProxyJump) on to the node sshd, or not."""
    after = _connections(server)
    assert (after[0] > before[0], after[1] > before[1]) == (login, node), (before, after)
