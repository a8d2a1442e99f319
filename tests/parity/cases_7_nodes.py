"""Nodes that are apart: what a job's tasks see of the node they run on.

A 2-node job on a real cluster: each task's ``hostname``, ``socket.gethostname()`` and
``$SLURMD_NODENAME`` name its own node; a file the batch shell writes to ``/tmp`` (or ``/dev/shm``)
is on the first node only, a file a step writes there is seen by the later steps on that same node
only, and neither the login node nor the next job on that node sees them (each job has a ``/tmp``
and a ``/dev/shm`` of its own on each node, as ``job_container/tmpfs`` gives). Each node has its own
network: ``localhost`` on node2 is node2 (a server on node1's loopback is not reached there), both
nodes bind the same port at once, and a server on node1 is reached from node2 by node1's name. The
real lanes' two slurmd each have a hostname and a network of their own, and each job its ``/tmp``
and ``/dev/shm`` on each (ci/real-slurm.sh, ci/real-slurm/job_tmp.c); the local Slurm's nodes
theirs (hpcnb/localslurm/apart.py, network.py).
"""
from __future__ import annotations

import pytest

from .harness import STEP_RETRY, Side, compare, on_both

# the node-local folders of a job (job_container/tmpfs gives it both, private on each node)
NODE_LOCAL = pytest.mark.parametrize("folder", ["/tmp", "/dev/shm"])

# the batch shell leaves a file in its /tmp; step 0 leaves one per node; step 1 says which it sees
# (the same in /dev/shm: every "/tmp" replaced)
NODE_FACTS = r"""#!/bin/bash
mark=/tmp/hpcnb-parity-$SLURM_JOB_ID
echo batch > $mark.batch
srun bash -c 'echo $SLURMD_NODENAME > '$mark'.$SLURMD_NODENAME'
srun bash -c 'seen=$(cd /tmp && ls -d hpcnb-parity-'$SLURM_JOB_ID'.* | sed "s/.*\.//" | sort | tr "\n" " ")
  name=$(python3 -c "import socket; print(socket.gethostname())")
  echo "task $SLURM_PROCID: $SLURMD_NODENAME $(hostname) $name; sees in /tmp: $seen" > task.$SLURM_PROCID'
"""


@NODE_LOCAL
def test_nodes_hostname_and_tmp_of_each_node(sides, folder: str) -> None:
    def one(side: Side) -> dict:
        wd = side.workdir(f"nodes-hostname{folder.replace('/', '-')}")
        job = side.sbatch(["-N2", "--ntasks-per-node=1", "-o", "out.txt"], wd, NODE_FACTS.replace("/tmp", folder))
        side.wait_done(job, wd)
        tasks = "".join((wd / f"task.{i}").read_text() for i in range(2) if (wd / f"task.{i}").exists())
        left = side.run(f"ls -d {folder}/hpcnb-parity-{job}.* 2>/dev/null | wc -l", wd).stdout.strip()
        output = [line for line in (wd / "out.txt").read_text().splitlines() if not STEP_RETRY.search(line)]
        return {"tasks": tasks, "output": output, f"files in the login node's {folder}": left}

    got = on_both(sides, one)
    compare(f"nodes: hostname and {folder} of each node", got["local"], got["real"])
    assert got["real"]["tasks"] == (f"task 0: node1 node1 node1; sees in {folder}: batch node1 \n"
                                    f"task 1: node2 node2 node2; sees in {folder}: node2 \n"), got["real"]


# the first job leaves a file in node1's /tmp; the next job on node1 looks for it there (/dev/shm too)
LEAVES = "#!/bin/bash\necho left > /tmp/hpcnb-parity-own.$SLURM_JOB_ID\nls /tmp/hpcnb-parity-own.*\n"
LOOKS = r"""#!/bin/bash
for f in /tmp/hpcnb-parity-own.*; do [ -e "$f" ] && echo "job $SLURM_JOB_ID sees $f"; done
echo "job $SLURM_JOB_ID on $SLURMD_NODENAME: done looking"
"""


@NODE_LOCAL
def test_nodes_tmp_of_each_job(sides, folder: str) -> None:
    """A job's /tmp and /dev/shm are its own on each node (job_container/tmpfs): the next job on the
    same node does not see what the last one left there."""
    def one(side: Side) -> dict:
        wd = side.workdir(f"nodes-of-each-job{folder.replace('/', '-')}")
        first = side.sbatch(["-w", "node1", "-o", "first.txt"], wd, LEAVES.replace("/tmp", folder), name="leaves.sh")
        side.wait_done(first, wd)
        second = side.sbatch(["-w", "node1", "-o", "second.txt"], wd, LOOKS.replace("/tmp", folder), name="looks.sh")
        side.wait_done(second, wd)

        def numbered(text: str) -> str:
            return text.replace(str(first), "<J0>").replace(str(second), "<J1>")

        return {name: numbered((wd / f"{name}.txt").read_text()) for name in ("first", "second")}

    got = on_both(sides, one)
    compare(f"nodes: each job's own {folder}", got["local"], got["real"])
    assert got["real"] == {"first": f"{folder}/hpcnb-parity-own.<J0>\n",
                           "second": "job <J1> on node1: done looking\n"}, got["real"]


# one task per node: both bind the same port on every address, node1 also one on its loopback; once
# both are listening (files in the shared working folder), each tries its localhost and the other node
NETWORK = r"""import os, socket, sys, time
node = os.environ["SLURMD_NODENAME"]
other = "node2" if node == "node1" else "node1"
port = 20000 + int(os.environ["SLURM_JOB_ID"]) % 10000  # below the ephemeral ports (32768-): srun's own
servers = [socket.create_server(("0.0.0.0", port))]
if node == "node1":
    servers.append(socket.create_server(("127.0.0.1", port + 1)))


def barrier(name):
    open(f"{name}.{node}", "w").close()
    end = time.time() + 60
    while not os.path.exists(f"{name}.{other}"):
        if time.time() > end:
            sys.exit(f"{node}: {other} never reached {name}")
        time.sleep(0.05)


def answers(host, port):
    try:
        socket.create_connection((host, port), timeout=10).close()
        return "answers"
    except OSError as err:
        return type(err).__name__


barrier("listening")
print(f"{node}: bound 0.0.0.0:<P> as the other node did; localhost:<P+1> (node1's loopback server): "
      f"{answers('localhost', port + 1)}; {other}:<P>: {answers(other, port)}", flush=True)
barrier("done")
"""


def test_nodes_network_of_each_node(sides) -> None:
    def one(side: Side) -> str:
        wd = side.workdir("nodes-network")
        (wd / "net.py").write_text(NETWORK)
        job = side.sbatch(["-N2", "--ntasks-per-node=1", "-o", "out.txt"], wd,
                          "#!/bin/bash\nsrun python3 net.py\n")
        side.wait_done(job, wd)
        return "".join(sorted((wd / "out.txt").read_text().splitlines(keepends=True)))

    got = on_both(sides, one)
    compare("nodes: localhost, ports and names of each node", got["local"], got["real"])
    assert got["real"] == (
        "node1: bound 0.0.0.0:<P> as the other node did; localhost:<P+1> (node1's loopback server): answers; "
        "node2:<P>: answers\n"
        "node2: bound 0.0.0.0:<P> as the other node did; localhost:<P+1> (node1's loopback server): "
        "ConnectionRefusedError; node1:<P>: answers\n"), got["real"]
