"""Each virtual node's own network (hpcnb/localslurm/network.py; the default, ``HPCNB_NODE_NETWORK=own``):
``localhost`` on node2 is node2, a server on node1 is reached from node2 by node1's name, the same
port is free on every node, and a job's own ``srun`` places tasks on the other nodes. Run by jobs on
a local Slurm of its own (the controller reads the setting), and once as an ordinary user, whose
fabric lives in a user namespace."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run

from hpcnb.localslurm import apart, network

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"


def _can_build_a_fabric() -> str:
    """Why this machine cannot give nodes networks of their own ('' when it can)."""
    if not shutil.which("ip", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
        return "no ip (iproute2)"
    if not shutil.which("nsenter", path=os.environ.get("PATH", "") + ":/usr/bin"):
        return "no nsenter (util-linux)"
    probe = subprocess.run(["unshare", "--user", "--map-current-user", "--net", "true"] if os.getuid()
                           else ["unshare", "--net", "true"], capture_output=True, text=True, timeout=30)
    return "" if probe.returncode == 0 else f"no network namespaces: {probe.stderr.strip()}"


@pytest.fixture(scope="module")
def own_network(tmp_path_factory: pytest.TempPathFactory, local_slurm: Path):
    """A local Slurm of its own whose nodes have networks of their own: the environment for its commands."""
    if why := _can_build_a_fabric():
        pytest.skip(why)
    if apart.mode() != "apart":
        pytest.skip(f"nodes not apart here: {apart.mode()}")
    state = tmp_path_factory.mktemp("net-state")
    env = {**os.environ, "HPCNB_STATE_DIR": str(state), network.SETTING: "own",
           "HPCNB_FIRST_JOB_ID": str(int(os.environ.get("HPCNB_FIRST_JOB_ID", "1")) + 9000)}
    made = run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset", "--slurm-version", "22.05"], env=env)
    assert made.returncode == 0, made.stderr
    yield env
    run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env=env)
    record = state / network.RECORD
    assert not record.exists(), "reset left the nodes' network running"


def sbatch(workdir: Path, env: dict[str, str], script: str, *options: str) -> str:
    (workdir / "job.sh").write_text("#!/bin/bash\n" + script)
    done = run(["sbatch", "--wait", "-o", "out.txt", *options, "job.sh"], cwd=workdir, env=env)
    out = (workdir / "out.txt").read_text() if (workdir / "out.txt").exists() else ""
    assert done.returncode == 0, done.stderr + out
    return out


SERVER = ("import socket, sys, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen()\n"
          "open(sys.argv[2], 'w').close()\n"
          "c, _ = s.accept(); c.sendall(b'hello from ' + socket.gethostname().encode()); c.close()\n")
CLIENT = ("import socket, sys\n"
          "port = int(sys.argv[1])\n"
          "try:\n"
          "    socket.create_connection(('localhost', port), timeout=5); print('localhost: reached')\n"
          "except OSError as err: print('localhost:', err.strerror)\n"
          "print('node1:', socket.create_connection(('node1', port), timeout=10).recv(100).decode())\n"
          "s = socket.socket(); s.bind(('0.0.0.0', port)); print('bound', port, 'on', socket.gethostname())\n")


def test_localhost_is_each_nodes_own_and_node1_is_reached_by_name(own_network, workdir: Path) -> None:
    """Exercise 8.3's mistake (a rendezvous at ``localhost`` on two nodes) fails here as on a cluster."""
    (workdir / "server.py").write_text(SERVER)
    (workdir / "client.py").write_text(CLIENT)
    out = sbatch(workdir, own_network, textwrap.dedent("""\
        port=$(( 20000 + SLURM_JOB_ID % 10000 ))
        srun -N1 -n1 -w node1 python3 server.py $port ready-$SLURM_JOB_ID &
        for i in $(seq 200); do [ -e ready-$SLURM_JOB_ID ] && break; sleep 0.1; done
        srun -N1 -n1 -w node2 python3 client.py $port
        wait
        """), "-N2", "-n2")
    assert "localhost: Connection refused" in out, out
    assert "node1: hello from node1" in out, out
    assert "bound" in out and "on node2" in out, out  # the port node1 uses is free on node2


def test_each_node_has_its_own_address_and_every_name_resolves(own_network, workdir: Path) -> None:
    out = sbatch(workdir, own_network,
                 "srun -N2 -n2 -l python3 -c 'import socket; n = socket.gethostname(); "
                 "print(n, socket.gethostbyname(n), socket.gethostbyname(\"node1\"), "
                 "socket.gethostbyname(\"localhost\"))'\n", "-N2", "-n2")
    lines = sorted(line for line in out.splitlines() if line[:1].isdigit())
    assert lines == ["0: node1 10.77.0.1 10.77.0.1 127.0.0.1", "1: node2 10.77.0.2 10.77.0.1 127.0.0.1"], out


def test_slurm_shows_the_nodes_addresses(own_network, workdir: Path) -> None:
    """sinfo's %o, scontrol's NodeAddr, and a step's launcher address (srun in the batch shell on node1;
    a stand-alone srun on the login node, which has no address among the nodes: 127.0.0.1)."""
    out = sbatch(workdir, own_network, "srun -l bash -c 'echo $SLURM_LAUNCH_NODE_IPADDR $SLURM_SRUN_COMM_HOST'\n",
                 "-N2", "-n2")
    assert sorted(line for line in out.splitlines() if line[:1].isdigit()) == [
        "0: 10.77.0.1 10.77.0.1", "1: 10.77.0.1 10.77.0.1"], out
    # one line per address, as Slurm's sinfo matches lines on the fields it shows
    assert run(["sinfo", "-h", "-p", "debug", "-o", "%N %o"], env=own_network).stdout == \
        "node1 10.77.0.1\nnode2 10.77.0.2\n"
    node2 = run(["scontrol", "show", "node", "node2"], env=own_network).stdout
    assert "   NodeAddr=10.77.0.2 NodeHostName=localhost " in node2, node2
    login = run(["srun", "-n1", "bash", "-c", "echo $SLURM_LAUNCH_NODE_IPADDR"], cwd=workdir, env=own_network)
    assert login.stdout == "127.0.0.1\n", login


def test_a_server_binds_to_its_nodes_name(own_network, workdir: Path) -> None:
    """``jupyter lab --ip=$(hostname)``, as OnDemand's app does: every address of the name binds (the
    IPv4-mapped form, kept for torch's reverse lookups, is under a name of its own)."""
    out = sbatch(workdir, own_network, f"{sys.executable} -c 'import socket; from tornado.netutil import bind_sockets; "
                 "print(len(bind_sockets(0, socket.gethostname())), \"bound\"); "
                 "print(socket.getnameinfo((\"::ffff:10.77.0.1\", 0), socket.NI_NAMEREQD)[0])'\n", "-w", "node1")
    assert out == "2 bound\nnode1.ipv4-mapped\n", out


def test_ddp_across_nodes_meets_at_the_first_nodes_name(own_network, workdir: Path) -> None:
    """torch's gloo over the nodes' own addresses, as lesson 8 runs it."""
    out = sbatch(workdir, own_network,
                 f"srun --kill-on-bad-exit=1 {sys.executable} -m hpcnb.scripts.ddp_train --epochs 1 --out net\n",
                 "-N2", "--ntasks-per-node=1", "-t", "5")
    assert "rank 1/2 (local rank 0) on node2, rank 0 at node1:" in out, out


NODE_SERVER = """import socket, sys, threading, time
def serve(s):
    while True:
        c, peer = s.accept(); c.sendall(f"hello from {socket.gethostname()} to {peer[0]}".encode()); c.close()
for port in sys.argv[1:]:  # lo:PORT: on the node's loopback only
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1" if port.startswith("lo:") else "0.0.0.0", int(port.removeprefix("lo:")))); s.listen()
    threading.Thread(target=serve, args=(s,), daemon=True).start()
open(f"ready-{socket.gethostname()}", "w").close()
time.sleep(300)
"""
LOGIN_CLIENT = """import socket, sys, time
for target in sys.argv[1:]:
    node, port = target.split(":")
    give_up, said = time.monotonic() + 20, None  # the gateway looks every 0.1 s
    while time.monotonic() < give_up:
        try:
            said = socket.create_connection((node, int(port)), timeout=10).recv(100).decode()
            break
        except OSError as err:
            said = err.strerror
            time.sleep(0.1)
    print(f"{target}: {said}")
"""


def _login_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of the course kernel (``hpcnb.backend.login_env``) for this local Slurm."""
    code = "import json; from hpcnb.backend import login_env; print(json.dumps(login_env()))"
    made = run([sys.executable, "-c", code], env=env)
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout)


def _from_login(login: dict[str, str], state: Path, client: str, *targets: str, timeout: float = 120) -> str:
    """What ``client`` prints from the login side. While another user of this machine listens on every
    address (CI's real-course lane: lesson 8's ``torch.distributed.run --standalone`` on the login
    node) the gateway withholds the names, as designed (tests/test_gateway_users.py): ask again then."""
    deadline = time.monotonic() + timeout
    while True:
        got = run([sys.executable, "-c", client, *targets], env=login).stdout
        said = (state / network.LOG).read_text(errors="replace") if (state / network.LOG).exists() else ""
        if "Network is unreachable" not in got or "another user (uid" not in said or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_the_login_node_reaches_a_jobs_server_by_its_nodes_name(own_network, workdir: Path) -> None:
    """As from a cluster's login node: node1 and node2 are reached by name, each on its own server
    at the same port; a server on node1's loopback is not reached (lesson 5's point)."""
    login = _login_env(own_network)
    assert "libnss_wrapper" in login.get("LD_PRELOAD", ""), login
    port = 20000 + os.getpid() % 10000  # and port + 1: below the ephemeral ports (32768-)
    loopback = port + 1
    (workdir / "server.py").write_text(NODE_SERVER)
    (workdir / "job.sh").write_text(f"#!/bin/bash\nsrun python3 server.py {port} lo:{loopback}\n")
    job = run(["sbatch", "--parsable", "-N2", "-n2", "-t", "5", "-o", "out.txt", "job.sh"], cwd=workdir,
              env=own_network).stdout.strip()
    try:
        give_up = time.monotonic() + 60
        while not all((workdir / f"ready-{n}").exists() for n in ("node1", "node2")) and time.monotonic() < give_up:
            time.sleep(0.1)
        targets = [f"node1:{port}", f"node2:{port}", f"node1:{loopback}"]
        got = _from_login(login, Path(own_network["HPCNB_STATE_DIR"]), LOGIN_CLIENT, *targets[:2])
        assert got.splitlines() == [f"node1:{port}: hello from node1 to {network.FABRIC_V4}",
                                    f"node2:{port}: hello from node2 to {network.FABRIC_V4}"], got
        refused = _from_login(login, Path(own_network["HPCNB_STATE_DIR"]), LOGIN_CLIENT.replace("+ 20", "+ 1"),
                              targets[2])
        assert refused == f"node1:{loopback}: Connection refused\n", refused
        hosts = Path(login["NSS_WRAPPER_HOSTS"]).read_text().split()
        assert hosts[1::2] == ["node1", "node2"] and all(a.startswith("127.") for a in hosts[::2]), hosts
    finally:
        run(["scancel", job], env=own_network)


def test_tasks_start_while_the_login_names_are_rewritten(own_network, workdir: Path) -> None:
    """A task's mount of the nodes' hosts file over the login side's is not undone by the gateway
    rewriting that file (a rename, as when it withholds a name): mount(2) then fails ENOENT on the
    file just replaced, and the task did not start ("cannot start the task on node1: mount ...")."""
    import threading

    state = Path(own_network["HPCNB_STATE_DIR"])
    sbatch(workdir, own_network, "true\n")  # the fabric is up
    hosts, text, stop = state / "hosts", (state / network.HOSTS).read_text(), threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            network.paths.write_private(hosts, text)

    rewriter = threading.Thread(target=rewrite)
    rewriter.start()
    try:
        out = sbatch(workdir, own_network, "for i in $(seq 20); do srun -N2 -n2 -l hostname || exit 1; done\n",
                     "-N2", "-n2")
    finally:
        stop.set()
        rewriter.join()
    assert out.count("node1") == out.count("node2") == 20, out


def test_shared_network_on_request(tmp_path_factory: pytest.TempPathFactory, workdir: Path) -> None:
    """With ``HPCNB_NODE_NETWORK=shared`` (read by the controller) the nodes share this machine's network."""
    env = {**os.environ, network.SETTING: "shared"}
    env["HPCNB_STATE_DIR"] = str(tmp_path_factory.mktemp("shared-net-state"))
    (workdir / "job.sh").write_text("#!/bin/bash\nsrun -N2 -n2 -l python3 -c "
                                    "'import socket; print(socket.gethostbyname(\"node1\"))'\n")
    try:
        done = run(["sbatch", "--wait", "-o", "out.txt", "-N2", "-n2", "job.sh"], cwd=workdir, env=env)
        assert done.returncode == 0, done.stderr
        assert "10.77." not in (workdir / "out.txt").read_text()
        assert not (Path(env["HPCNB_STATE_DIR"]) / network.RECORD).exists()
        status = run([sys.executable, "-m", "hpcnb.cli", "slurm", "status"], env=env).stdout
        assert f"the network is shared: {network.SETTING}=shared" in status, status
    finally:
        run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env=env)


UNPRIVILEGED = '''
import os, socket, subprocess, sys, time
from hpcnb.localslurm import apart, network

def start(node, argv):
    pid = os.fork()
    if pid == 0:
        try:
            apart.enter(apart.NodeView(node, os.environ["NODE_TMP"], (os.environ["KEEP"],), network.node_net(node)))
            os.execv(sys.executable, [sys.executable, *argv])
        except BaseException as err:
            os.write(2, f"{node}: {err}\\n".encode())
        os._exit(1)
    return pid

import fcntl
lock = os.open(os.path.join(os.environ["HPCNB_STATE_DIR"], "controller.lock"), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(lock, fcntl.LOCK_EX)  # as a controller holds it: a fabric runs only beside one
network.ensure(["node1", "node2"])
try:
    server = start("node1", ["-c", SERVER, "5555", os.environ["READY"]])
    give_up = time.monotonic() + 20
    while not os.path.exists(os.environ["READY"]) and time.monotonic() < give_up:
        time.sleep(0.05)
    # on node2, a program that (as srun inside a job) starts a task on node1 itself
    client = start("node2", ["-c", CLIENT + NESTED, "5555"])
    for pid in (server, client):
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    # the login node (this process) reaches a server on node1 through the gateway
    server = start("node1", ["-c", SERVER, "5556", os.environ["READY"] + "2"])
    give_up = time.monotonic() + 20
    while time.monotonic() < give_up:
        try:
            hosts = dict(reversed(line.split()) for line in open(network.paths.hosts_path()))
            print("login:", socket.create_connection((hosts["node1"], 5556), timeout=10).recv(100).decode())
            break
        except (OSError, KeyError):
            time.sleep(0.1)
    os.waitpid(server, 0)
finally:
    network.stop()
'''
NESTED = '''
import os, sys
from hpcnb.localslurm import apart, network
print("uid", os.getuid())
pid = os.fork()
if pid == 0:
    apart.enter(apart.NodeView("node1", os.environ["NODE_TMP"], (os.environ["KEEP"],), network.node_net("node1")))
    os.execvp("hostname", ["hostname"])
os.waitpid(pid, 0)
'''


def test_an_ordinary_users_fabric_lives_in_a_user_namespace(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Without root: the fabric in a user namespace of its own; a task keeps its uid; a task's own
    child is placed on another node (as a job's srun does)."""
    if os.getuid() != 0 and (why := _can_build_a_fabric()):
        pytest.skip(why)
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"no {SYSTEM_PYTHON}")
    uid = os.getuid() or 54321
    top = Path(tempfile.mkdtemp(prefix="fabric-user-", dir="/tmp"))
    try:
        package = top / "lib" / "hpcnb"
        shutil.copytree(ROOT / "hpcnb", package, ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
        for folder in ("state", "node-tmp"):
            (top / folder).mkdir()
        subprocess.run(["chown", "-R", f"{uid}:{uid}", str(top)], check=True)
        os.chmod(top, 0o755)
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PYTHONPATH": str(top / "lib"),
               "HPCNB_STATE_DIR": str(top / "state"), "NODE_TMP": str(top / "node-tmp"),
               "READY": str(top / "state" / "ready"), "KEEP": str(top)}
        code = f"SERVER = {SERVER!r}\nCLIENT = {CLIENT!r}\nNESTED = {NESTED!r}\n" + UNPRIVILEGED
        as_user = [] if os.getuid() else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        done = subprocess.run([*as_user, SYSTEM_PYTHON, "-c", code], env=env, cwd=top, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "localhost: Connection refused" in done.stdout, done.stdout + done.stderr
        assert "node1: hello from node1" in done.stdout and "on node2" in done.stdout, done.stdout
        lines = done.stdout.splitlines()
        assert f"uid {uid}" in lines and "node1" in lines, done.stdout  # the nested task ran on node1
        assert "login: hello from node1" in lines, done.stdout + done.stderr
        give_up = time.monotonic() + 10 + network.POLL_S  # the holder sees its record gone on its next look
        while _holders_of(top) and time.monotonic() < give_up:
            time.sleep(0.1)
        assert not _holders_of(top), "the fabric outlived its record"
    finally:
        subprocess.run(["pkill", "-KILL", "-f", f"hpcnb.localslurm.(network|gateway) .* {top}/state"], check=False)
        shutil.rmtree(top, ignore_errors=True)


def _holders_of(top: Path) -> list[str]:
    """The fabric's holder and gateway for the state folder under ``top``."""
    found = subprocess.run(["pgrep", "-f", f"hpcnb.localslurm.(network|gateway) .* {top}/state"],
                           capture_output=True, text=True)
    return found.stdout.split()


def test_status_says_the_nodes_have_their_own_network(own_network) -> None:
    status = run([sys.executable, "-m", "hpcnb.cli", "slurm", "status"], env=own_network)
    said = ("each node its own hostname, /tmp, /dev/shm and network; no ssh between nodes; the login node "
            "reaches servers on the nodes by their names, the nodes do not reach the login node")
    assert said in status.stdout, status.stdout


def test_the_nodes_own_network_is_the_default(own_network, tmp_path_factory: pytest.TempPathFactory,
                                              workdir: Path) -> None:
    """Without the setting, the controller of a new local Slurm starts it (``own_network``: only its checks)."""
    env = {k: v for k, v in own_network.items() if k != network.SETTING}
    env["HPCNB_STATE_DIR"] = str(tmp_path_factory.mktemp("default-net-state"))
    try:
        out = sbatch(workdir, env, "srun -N2 -n2 -l python3 -c "
                                   "'import socket; print(socket.gethostbyname(\"node2\"))'\n", "-N2", "-n2")
        assert sorted(line for line in out.splitlines() if line[:1].isdigit()) == ["0: 10.77.0.2", "1: 10.77.0.2"], out
        assert (Path(env["HPCNB_STATE_DIR"]) / network.RECORD).exists()
    finally:
        run([sys.executable, "-m", "hpcnb.cli", "slurm", "reset"], env=env)


def test_a_network_that_cannot_start_is_remembered_and_said(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from hpcnb.localslurm import admin

    monkeypatch.setenv("HPCNB_STATE_DIR", str(tmp_path))
    monkeypatch.delenv(network.SETTING, raising=False)

    def refuse(state: Path, nodes: list[str]) -> dict:
        raise OSError("ip is not installed (Debian: iproute2, util-linux)")

    monkeypatch.setattr(network, "_start", refuse)
    monkeypatch.setattr(apart, "mode", lambda: "apart")
    with pytest.raises(OSError):
        network.ensure(["node1", "node2"])
    assert network.failure() == "ip is not installed (Debian: iproute2, util-linux)"
    assert admin._nodes_line() == ("apart (each node its own hostname, /tmp and /dev/shm; the network is shared: "
                                   "its own did not start: ip is not installed (Debian: iproute2, util-linux))")
