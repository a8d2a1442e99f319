"""The login side's way to the nodes (hpcnb/localslurm/gateway.py) on a machine shared with another
Unix user: a node's name leads to the user's own job's server or to nothing, whatever the other user
listens on, claims or floods (issue 40, items 1-2). Root is the victim (its local Slurm, its job),
a user made here the attacker (plain ``/usr/bin/python3`` scripts)."""
from __future__ import annotations

import errno
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from conftest import run

from hpcnb.localslurm import apart, network

SYSTEM_PYTHON = "/usr/bin/python3"
RUNUSER = shutil.which("runuser", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or "runuser"
# the attacker's listeners make every gateway of the machine withhold its names: not beside other tests
pytestmark = pytest.mark.another_user_listens
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("curl")
                                or not os.access(SYSTEM_PYTHON, os.X_OK), reason="needs root, useradd, curl")

# the attacker's listener: every byte it receives goes to its log, and it answers as a web server would
LISTENER = """import os, socket, sys, threading, time
log = open(sys.argv[1], "ab", buffering=0)
def serve(s):
    while True:
        c, _ = s.accept()
        c.settimeout(2)
        try:
            log.write(c.recv(65536) or b"")
            c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 8\\r\\n\\r\\nattacker")
        except OSError:
            pass
        c.close()
for address in sys.argv[3:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((address, int(sys.argv[2]))); s.listen()
    threading.Thread(target=serve, args=(s,), daemon=True).start()
open(sys.argv[1] + ".ready", "w").close()
time.sleep(120)
"""
# the attacker's flood: UDP at the last address of every block the gateway may take
FLOOD = """import os, resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
part = 0
for bit in (1, 2):  # four processes, a quarter each: a process may hold 20,000 files here
    if os.fork() == 0:
        part += bit
held = []
for b in range(32 * part, 32 * part + 32):
    for c in range(256):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((f"127.{64 + b}.{c}.255", 65535)); held.append(s)
        except OSError:
            s.close()
open(f"{sys.argv[1]}.{part}", "w").write(str(len(held)))
time.sleep(120)
"""


@pytest.fixture
def attacker() -> Iterator[str]:
    """A Unix user of this machine, removed afterwards with every process it left."""
    name = f"hpa{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", name], check=True)
    try:
        yield name
    finally:
        give_up = time.monotonic() + 10  # (userdel refuses a user whose processes are still ending)
        while subprocess.run(["pkill", "-KILL", "-u", name], check=False).returncode == 0 \
                and time.monotonic() < give_up:
            time.sleep(0.1)
        subprocess.run(["userdel", name], capture_output=True, check=False)


@pytest.fixture
def victim(tmp_path_factory: pytest.TempPathFactory, local_slurm: Path) -> Iterator[dict[str, str]]:
    """A local Slurm of its own whose nodes have their own network: its commands' environment."""
    if apart.mode() != "apart":
        pytest.skip(f"nodes not apart here: {apart.mode()}")
    state = tmp_path_factory.mktemp("gateway-victim")
    env = {**os.environ, "HPCNB_STATE_DIR": str(state), network.SETTING: "own",
           "HPCNB_FIRST_JOB_ID": str(int(os.environ.get("HPCNB_FIRST_JOB_ID", "1")) + 9500)}
    assert run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env=env).returncode == 0
    yield env
    run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env=env)


def _as_attacker(user: str, folder: Path, code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([RUNUSER, "-u", user, "--", SYSTEM_PYTHON, "-c", code, *args], cwd=folder,
                            env={"PATH": "/usr/bin:/bin"}, stdout=subprocess.DEVNULL, start_new_session=True,
                            stderr=open(folder / "stderr", "ab"))  # (the child holds its own copy)


def _stop(attack: subprocess.Popen) -> None:
    """End an attacker's program: runuser and its child, the program (a process group of their own)."""
    try:
        os.killpg(attack.pid, 9)
    except ProcessLookupError:
        pass
    attack.wait()


def _wait_for(path: Path, seconds: float = 30) -> None:
    give_up = time.monotonic() + seconds
    while not path.exists():
        said = (path.parent / "stderr").read_text() if (path.parent / "stderr").exists() else ""
        assert time.monotonic() < give_up, f"no {path.name} after {seconds} s: {said}"
        time.sleep(0.05)


def _login_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of the course kernel (``hpcnb.backend.login_env``) for this local Slurm."""
    code = "import json; from hpcnb.backend import login_env; print(json.dumps(login_env()))"
    made = run([sys.executable, "-c", code], env=env)
    assert made.returncode == 0, made.stderr
    return {**env, **json.loads(made.stdout)}


def _node_address(env: dict[str, str], node: str) -> str:
    """``node``'s address on the login side, once the gateway has written it."""
    give_up = time.monotonic() + 30
    while time.monotonic() < give_up:
        code = f"import socket; print(socket.gethostbyname({node!r}))"
        found = run([sys.executable, "-c", code], env=_login_env(env))
        if found.stdout.startswith("127."):  # (255.255.255.255 until the gateway runs: reached nowhere)
            return found.stdout.strip()
        time.sleep(0.1)
    raise AssertionError(f"{node} never resolved on the login side")


def _start_network(env: dict[str, str], workdir: Path) -> None:
    (workdir / "true.sh").write_text("#!/bin/bash\ntrue\n")
    done = run(["sbatch", "--wait", "-o", "/dev/null", "true.sh"], cwd=workdir, env=env)
    assert done.returncode == 0, done.stderr


def _serve_on_node1(env: dict[str, str], workdir: Path, port: int) -> str:
    """A job serving its folder over HTTP on node1 (every address): its id, once it listens."""
    (workdir / "victims-page.txt").write_text("the victim's own page\n")
    (workdir / "serve.sh").write_text(f"#!/bin/bash\n{sys.executable} -c 'import http.server, socketserver, sys\n"
                                      "s = socketserver.TCPServer((\"0.0.0.0\", int(sys.argv[1])), "
                                      "http.server.SimpleHTTPRequestHandler)\n"
                                      "open(\"listening\", \"w\").close(); s.serve_forever()' "
                                      f"{port}\n")
    job = run(["sbatch", "--parsable", "-w", "node1", "-t", "5", "-o", "serve.out", "serve.sh"], cwd=workdir,
              env=env).stdout.strip()
    give_up = time.monotonic() + 60
    while not (workdir / "listening").exists():
        out = (workdir / "serve.out").read_text() if (workdir / "serve.out").exists() else ""
        assert time.monotonic() < give_up, (job, out, run(["squeue"], env=env).stdout)
        time.sleep(0.05)
    time.sleep(0.5)  # the gateway looks every 0.1 s
    return job


def _curl(env: dict[str, str], url: str) -> subprocess.CompletedProcess[str]:
    return run(["curl", "-sS", "--noproxy", "*", "--max-time", "10", url], env=_login_env(env))


@needs_root
def test_another_users_listener_never_answers_for_a_node(victim, attacker: str, workdir: Path) -> None:
    """Item 1: the attacker listens first on 0.0.0.0:PORT and on node1's login-side address; the
    victim's ``curl http://node1:PORT/`` reaches the victim's job's server or fails, and the attacker
    receives no byte of the victim's request."""
    _start_network(victim, workdir)
    node1 = _node_address(victim, "node1")
    port = 20000 + os.getpid() % 9000 + 500
    spy = Path(tempfile.mkdtemp(prefix="attacker-"))
    shutil.chown(spy, attacker)
    listener = _as_attacker(attacker, spy, LISTENER, str(spy / "heard"), str(port), node1, "0.0.0.0")
    job = ""
    try:
        _wait_for(spy / "heard.ready")
        job = _serve_on_node1(victim, workdir, port)
        for _ in range(3):
            got = _curl(victim, f"http://node1:{port}/victims-page.txt")
            assert got.stdout in ("the victim's own page\n", ""), got
            assert got.returncode == 0 or got.stderr, got
            time.sleep(0.3)
        assert (spy / "heard").read_bytes() == b"", "the attacker read the victim's request"
        status = run([sys.executable, "-m", "hpcnb.cli", "slurm", "status"], env=victim).stdout
        if got.returncode:  # refused: then status says so, and why
            assert "reaches servers on the nodes by their names" not in status, status
            assert "another user" in status, status
            names = run([sys.executable, "-m", "hpcnb.cli", "check-names"], env=victim).stderr
            assert "on the login node, the node names lead nowhere" in names, names
        _stop(listener)  # the attacker gone, the way in comes back
        give_up = time.monotonic() + 20
        while (got := _curl(victim, f"http://node1:{port}/victims-page.txt")).stdout != "the victim's own page\n":
            assert time.monotonic() < give_up, got
            time.sleep(0.2)
    finally:
        _stop(listener)
        if job:
            run(["scancel", job], env=victim)
        shutil.rmtree(spy, ignore_errors=True)


@needs_root
def test_a_flood_of_claims_leaves_the_way_in_working_or_said(victim, attacker: str, workdir: Path) -> None:
    """Item 2: the attacker binds UDP <block>.255 of every candidate block before the victim's nodes
    start; the victim's gateway still serves node1's server, or ``hpcnb slurm status`` says it does not."""
    spy = Path(tempfile.mkdtemp(prefix="attacker-"))
    shutil.chown(spy, attacker)
    flood = _as_attacker(attacker, spy, FLOOD, str(spy / "held"))
    job = ""
    try:
        for part in range(4):
            _wait_for(spy / f"held.{part}", 60)
        held = sum(int((spy / f"held.{part}").read_text()) for part in range(4))
        assert held > 32000, f"the flood held only {held} blocks"
        _start_network(victim, workdir)
        port = 20000 + os.getpid() % 9000 + 600
        job = _serve_on_node1(victim, workdir, port)
        got = _curl(victim, f"http://node1:{port}/victims-page.txt")
        status = run([sys.executable, "-m", "hpcnb.cli", "slurm", "status"], env=victim).stdout
        if got.stdout != "the victim's own page\n":
            assert "reaches servers on the nodes by their names" not in status, (got, status)
    finally:
        _stop(flood)
        if job:
            run(["scancel", job], env=victim)
        shutil.rmtree(spy, ignore_errors=True)


# the attacker as a client of the victim's node: what a request to node1's login-side address gets
CLIENT = """import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    c.sendall(b"GET /victims-page.txt HTTP/1.0\\r\\n\\r\\n")
    got = b""
    while chunk := c.recv(65536):
        got += chunk
    said = repr(got)
except OSError as err:
    said = repr(err)
open("said", "w").write(said)
"""


@needs_root
def test_another_users_client_is_not_let_in(victim, attacker: str, workdir: Path) -> None:
    """The gateway passes on its own user's connections only: another user connecting to node1's
    login-side address, where the victim's job serves, gets nothing of it."""
    _start_network(victim, workdir)
    node1 = _node_address(victim, "node1")
    port = 20000 + os.getpid() % 9000 + 700
    job = _serve_on_node1(victim, workdir, port)
    try:
        own = _curl(victim, f"http://node1:{port}/victims-page.txt")
        assert own.stdout == "the victim's own page\n", own
        spy = Path(tempfile.mkdtemp(prefix="attacker-"))
        shutil.chown(spy, attacker)
        try:
            _as_attacker(attacker, spy, CLIENT, node1, str(port)).wait(timeout=30)
            said = (spy / "said").read_text()
        finally:
            shutil.rmtree(spy, ignore_errors=True)
        assert said == "b''" or said.startswith("ConnectionResetError"), said  # closed unanswered
    finally:
        run(["scancel", job], env=victim)


def test_the_kernel_tells_a_loopback_clients_uid_and_every_listeners() -> None:
    """What the gateway asks of sock_diag: the uid of a connection's client end, each listener's owner."""
    from hpcnb.localslurm import gateway

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=10) as client:
            accepted, peer = server.accept()
            with accepted, gateway._machine_diag() as diag:
                assert gateway.peer_uid(diag, peer, accepted.getsockname()) == os.getuid()
                assert gateway.peer_uid(diag, ("127.0.0.1", 1), accepted.getsockname()) is None
            with gateway._machine_diag() as diag:
                found = gateway.listeners(diag)
        assert (ipaddress.ip_address("127.0.0.1"), server.getsockname()[1], os.getuid()) in found


def test_a_withheld_name_leads_nowhere_at_once() -> None:
    """A name the gateway withholds is named at 255.255.255.255, where a TCP connection fails at once
    (left out, nss_wrapper would ask this machine's resolver, which may know the name elsewhere)."""
    text = network.login_hosts_text(["node1", "node2"], network.FIRST_BLOCK, frozenset({1}))
    assert text == f"127.64.0.1 node1\n{network.UNREACHED} node2\n"
    assert network.login_hosts_text(["node1"], None) == f"{network.UNREACHED} node1\n"
    started = time.monotonic()
    with pytest.raises(OSError) as refused:
        socket.create_connection((network.UNREACHED, 8888), timeout=10)
    assert refused.value.errno == errno.ENETUNREACH and time.monotonic() - started < 1, refused.value


def test_a_gateway_gone_is_said_and_its_names_lead_nowhere(victim, workdir: Path) -> None:
    """Killed, the gateway leaves no name at an address any user could take next: the holder names
    every node at 255.255.255.255, and ``hpcnb slurm status`` says the way in has stopped."""
    _start_network(victim, workdir)
    _node_address(victim, "node1")
    state = victim["HPCNB_STATE_DIR"]
    found = run(["pgrep", "-f", f"hpcnb.localslurm.gateway .* {state}$"]).stdout.split()
    assert len(found) == 1, found
    os.kill(int(found[0]), 9)
    give_up = time.monotonic() + 10 + network.POLL_S
    while time.monotonic() < give_up:
        status = run([sys.executable, "-m", "hpcnb.cli", "slurm", "status"], env=victim).stdout
        hosts = (Path(state) / "hosts").read_text()
        if "its gateway has stopped" in status and hosts == f"{network.UNREACHED} node1\n{network.UNREACHED} node2\n":
            break
        time.sleep(0.2)
    assert "does not reach servers on the nodes by their names: its gateway has stopped" in status, status
    assert hosts == f"{network.UNREACHED} node1\n{network.UNREACHED} node2\n", hosts
