"""JupyterHub config of the course's one-machine portal (``make portal``, ``ci/portal.sh``).

As HPC centres run it: JupyterHub + batchspawner's ``SlurmSpawner`` + configurable-http-proxy;
each user's notebook server is a Slurm job (``sbatch`` as that user), on the course's local Slurm
or on a real one (``HPCNB_SLURM``). ``ci/portal.sh run`` starts the hub with this file and the
``HPCNB_PORTAL_*`` settings below in its environment; nothing else of the caller's environment.
"""
import os
from pathlib import Path

import batchspawner  # noqa: F401  registers /hub/api/batchspawner, where a job reports its port

c = get_config()  # noqa: F821  (provided by JupyterHub)


def setting(name: str) -> str:
    value = os.environ.get(f"HPCNB_PORTAL_{name}", "")
    if not value:
        raise SystemExit(f"jupyterhub_config.py: HPCNB_PORTAL_{name} is not set (start the hub with ci/portal.sh run)")
    return value


state = Path(setting("STATE"))
venv = Path(setting("VENV"))
users = set(setting("USERS").split())
loopback = "127.0.0.1"  # every port on loopback only, away from the tests' ports

c.JupyterHub.bind_url = f"http://{loopback}:{setting('PORT')}"
# where the servers' nodes reach the hub's API: this machine's loopback where they share its network,
# the login node's address on the nodes' network where each node has its own (the real lane's nodes)
hub_address = os.environ.get("HPCNB_PORTAL_HUB_ADDRESS") or loopback
c.JupyterHub.hub_bind_url = c.JupyterHub.hub_connect_url = f"http://{hub_address}:{setting('HUB_PORT')}"
c.ConfigurableHTTPProxy.api_url = f"http://{loopback}:{setting('PROXY_API_PORT')}"
c.ConfigurableHTTPProxy.command = [setting("PROXY")]
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "cookie_secret")
c.JupyterHub.pid_file = str(state / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True  # stopping the hub cancels every server's job ...
c.JupyterHub.cleanup_proxy = True    # ... and stops the proxy it started

# A workshop's login page: the listed (Unix) users, one shared password.
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = Path(setting("PASSWORD_FILE")).read_text().strip()
c.Authenticator.allowed_users = users

# Each server is a Slurm job submitted as its user (ci/portal.sh runs the hub as root): runuser,
# with an absolute path, since Debian has no sudo (and sudo's secure_path would drop the local
# Slurm's folder from PATH).
c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"
c.SlurmSpawner.exec_prefix = "/usr/sbin/runuser -u {username} --"
# batchspawner runs sbatch with the spawner's environment but squeue and scancel with the hub's:
# both reach the chosen Slurm through these (the hub's own environment is made by ci/portal.sh).
c.Spawner.env_keep = ["PATH", "LANG", "HPCNB_SLURM", "HPCNB_BIN_DIR", "HPCNB_NODE_NETWORK"]
c.SlurmSpawner.req_runtime = setting("TIME")
c.SlurmSpawner.req_nprocs = "1"
# a server with a kernel or two peaks near 400 MB: one CPU's default (500 MB per CPU) is too tight
c.SlurmSpawner.req_memory = setting("MEM")
c.SlurmSpawner.batchspawner_singleuser_cmd = str(venv / "bin" / "batchspawner-singleuser")
c.Spawner.cmd = [str(venv / "bin" / "jupyterhub-singleuser")]
c.Spawner.notebook_dir = "~/" + setting("COURSE_DIR")
c.Spawner.default_url = "/lab"
# compute nodes have no internet: no JupyterLab news or update checks
c.Spawner.args = ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
# batchspawner makes the server listen on all interfaces of its node: on a machine reachable from
# outside, firewall the ports above 1024 or give the jobs' nodes private addresses. Where the nodes
# share this machine's network, every node is 127.0.0.1 (virtual node names resolve only inside
# jobs); where each has its own, the hub reaches a server by its node's name (squeue's %B).
if hub_address == loopback:
    c.SlurmSpawner.state_exechost_exp = loopback
# A loaded 2-core machine: slow starts are normal.
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 180
c.SlurmSpawner.startup_poll_interval = 1.0

c.JupyterHub.log_datefmt = "%H:%M:%S"
print("jupyterhub_config.py: users", " ".join(sorted(users)), "| servers are Slurm jobs on the",
      os.environ.get("HPCNB_SLURM", "auto"), "Slurm, submitted with", c.SlurmSpawner.exec_prefix, flush=True)
