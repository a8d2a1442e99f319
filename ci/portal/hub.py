"""The workshop's hub as a process: ``ci/portal.sh run`` started on 127.0.0.1 and stopped.

Shared by tests/test_portal.py and benchmarks/portal_load.py (each adds this folder to sys.path).
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

PORTAL_SH = Path(__file__).resolve().parent.parent / "portal.sh"


class HubProcess:
    """``ci/portal.sh run`` for ``users`` on 127.0.0.1:``port``, its Slurm ``slurm`` (local or real),
    its state in ``state``, the installation under ``prefix``; its output in ``state``'s sibling hub.log."""

    def __init__(self, users: list[str], port: int, slurm: str, state: Path, prefix: Path) -> None:
        self.users, self.port, self.slurm, self.state, self.prefix = users, port, slurm, state, prefix
        self.url = f"http://127.0.0.1:{port}"
        self.password = secrets.token_urlsafe(12)
        self.log_path = state.parent / "hub.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, up_s: float) -> str | None:
        """Start the hub and wait until its API answers; None once it does, else why not."""
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
               "PORTAL_USERS": " ".join(self.users), "PORTAL_PASSWORD": self.password,
               "PORTAL_PORT": str(self.port), "PORTAL_SLURM": self.slurm, "PORTAL_STATE": str(self.state),
               "PORTAL_PREFIX": str(self.prefix)}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(["bash", str(PORTAL_SH), "run"], env=env, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + up_s
        while self.proc.poll() is None:
            try:
                urllib.request.urlopen(f"{self.url}/hub/api/", timeout=5).close()
                return None
            except OSError:
                if time.monotonic() > deadline:
                    return f"the hub did not answer on {self.url} in {up_s:g} s"
                time.sleep(0.5)
        return f"the hub exited with {self.proc.returncode} before answering"

    def stop(self) -> None:
        """SIGTERM (the hub cancels every server job and stops its proxy); SIGKILL after 90 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def tail(self, lines: int = 30) -> str:
        """The end of the hub's log."""
        if not self.log_path.exists():
            return "(no hub log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
