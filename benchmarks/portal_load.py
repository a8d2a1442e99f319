"""How many students one portal machine holds: N users at once through the workshop's hub.

    .venv/bin/python benchmarks/portal_load.py              # as root: 10 users, lesson 3 (about 5 min)
    .venv/bin/python benchmarks/portal_load.py --users 5 --lesson notebooks/01-cluster-anatomy.ipynb

As root (the hub runs each user's server as that user). It installs the portal (``ci/portal.sh
install``) for the users ``hpcnb-load1`` .. ``hpcnb-loadN`` under its own prefix, starts the hub
(``ci/portal.sh run``: JupyterHub + batchspawner's SlurmSpawner + configurable-http-proxy) on
127.0.0.1, and then, as a browser would:

1. **solo**: one user logs in through the hub's login form, gets a server (a Slurm job on their
   local Slurm), opens the lesson's kernel through the server and runs every code cell in order;
2. **N at once**: every user does the same at the same moment.

Each user's lesson starts from its committed cells with the outputs cleared. It reports, per user,
the server's start (spawn request → ready), the lesson's run (first cell sent → last cell's reply)
and the peak memory of everything that user runs (server, kernel, the lesson's jobs, their local
Slurm; summed RSS, sampled each second), and the ratio of each lesson run to the solo one, with
the machine's size. It does not fail on a slow figure: it reports. A cell that errs is reported
and makes the exit status 1.
"""
from __future__ import annotations

import argparse
import asyncio
import http.cookiejar
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci" / "portal"))
from hub import HubProcess  # noqa: E402

PREFIX = Path("/opt/hpcnb-portal-load")  # away from make test-portal's /opt/hpcnb-portal
COURSE_DIR = "hpcnb-course"
HUB_UP_S = 120
SPAWN_S = 600
CELL_S = 600


@dataclass
class Run:
    """One user's visit: what it took and what went wrong."""
    user: str
    spawn_s: float = 0.0
    lesson_s: float = 0.0
    peak_mb: float = 0.0
    cells: int = 0  # code cells that ran without an error
    errors: list[str] = field(default_factory=list)


class Hub(HubProcess):
    """``ci/portal.sh run`` for the benchmark's users, on 127.0.0.1:port."""

    def __init__(self, users: list[str], port: int, state: Path) -> None:
        super().__init__(users, port, "local", state, PREFIX)

    def start(self) -> None:
        failed = super().start(HUB_UP_S)
        if failed:
            raise SystemExit(f"{failed}; its log:\n{self.tail()}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the login's redirect would start the server itself
        return None


class Student:
    """One user in front of the hub: the login form, a token, their server and a kernel in it."""

    def __init__(self, hub: Hub, user: str) -> None:
        self.hub, self.user = hub, user
        self.cookies = http.cookiejar.CookieJar()
        self.browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies), _NoRedirect)
        self.token = ""

    def _call(self, method: str, path: str, body: dict | None = None, timeout: float = 30) -> dict:
        headers = {"Authorization": f"token {self.token}"} if self.token else {"X-XSRFToken": self._cookie("_xsrf")}
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(self.hub.url + path, data=data, method=method,
                                         headers={**headers, "Content-Type": "application/json"})
        with self.browser.open(request, timeout=timeout) as answer:
            text = answer.read()
        return json.loads(text) if text else {}

    def _cookie(self, name: str) -> str:
        return next((c.value for c in self.cookies if c.name == name), "")

    def log_in(self) -> None:
        """The hub's login form, as a browser fills it in (its XSRF cookie first)."""
        self.browser.open(f"{self.hub.url}/hub/login", timeout=30).close()
        form = urllib.parse.urlencode({"username": self.user, "password": self.hub.password,
                                       "_xsrf": self._cookie("_xsrf")}).encode()
        try:
            self.browser.open(f"{self.hub.url}/hub/login", data=form, timeout=30).close()
        except urllib.error.HTTPError as err:
            if err.code != 302:
                raise RuntimeError(f"{self.user}: the login form answered HTTP {err.code}") from None
        self.token = self._call("POST", f"/hub/api/users/{self.user}/tokens",
                                {"note": "portal_load", "expires_in": 3600})["token"]

    def spawn(self) -> None:
        """Ask for the server and wait until the hub says it is ready (its Slurm job runs it)."""
        self._call("POST", f"/hub/api/users/{self.user}/server")
        deadline = time.monotonic() + SPAWN_S
        while time.monotonic() < deadline:
            server = self._call("GET", f"/hub/api/users/{self.user}")["servers"].get("", {})
            if server.get("ready"):
                return
            if not server.get("pending") and not server.get("ready"):
                raise RuntimeError(f"{self.user}: the server stopped while starting:\n{self.hub.tail()}")
            time.sleep(1)
        raise RuntimeError(f"{self.user}: no server in {SPAWN_S} s:\n{self.hub.tail()}")

    def stop_server(self) -> None:
        try:
            self._call("DELETE", f"/hub/api/users/{self.user}/server", timeout=120)
        except OSError:
            pass  # the hub's shutdown cancels it anyway

    def run_lesson(self, lesson: str, run: Run) -> None:
        """Every code cell of the lesson in a kernel of the user's server (a session on the lesson's path)."""
        session = self._call("POST", f"/user/{self.user}/api/sessions",
                             {"path": lesson, "type": "notebook", "name": Path(lesson).name,
                              "kernel": {"name": "python3"}}, timeout=120)
        cells = [c.source for c in nbformat.read(ROOT / lesson, as_version=4).cells if c.cell_type == "code"]
        url = (f"ws://127.0.0.1:{self.hub.port}/user/{self.user}/api/kernels/{session['kernel']['id']}/channels"
               f"?session_id={uuid.uuid4().hex}")
        asyncio.run(_execute(HTTPRequest(url, headers={"Authorization": f"token {self.token}"}), cells, run))


def _message(msg_type: str, content: dict, channel: str = "shell") -> dict:
    header = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": "portal_load", "username": "",
              "version": "5.3", "date": ""}
    return {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": channel}


async def _request(ws, msg_type: str, content: dict) -> list[dict]:
    """Send one shell request; the iopub messages it caused, until its reply and the kernel's idle."""
    msg = _message(msg_type, content)
    await ws.write_message(json.dumps(msg))
    seen: list[dict] = []
    replied = idle = False
    deadline = time.monotonic() + CELL_S
    while not (replied and idle):
        left = deadline - time.monotonic()
        text = await asyncio.wait_for(ws.read_message(), timeout=max(left, 0.1))
        if text is None:
            raise RuntimeError("the kernel's websocket closed")
        answer = json.loads(text)
        if answer["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
            continue
        seen.append(answer)
        kind = answer["header"]["msg_type"]
        replied |= kind.endswith("_reply")
        idle |= kind == "status" and answer["content"]["execution_state"] == "idle"
    return seen


async def _execute(request: HTTPRequest, cells: list[str], run: Run) -> None:
    ws = await websocket_connect(request)
    try:
        await _request(ws, "kernel_info_request", {})  # the kernel answers: it is up
        start = time.perf_counter()
        for number, source in enumerate(cells, 1):
            answers = await _request(ws, "execute_request", {"code": source, "silent": False,
                                                             "store_history": True, "allow_stdin": False})
            for answer in answers:
                if answer["header"]["msg_type"] == "error":
                    run.errors.append(f"cell {number}: {answer['content']['ename']}: "
                                      f"{answer['content']['evalue'][:200]}")
                elif answer["header"]["msg_type"] == "execute_reply" and answer["content"]["status"] == "ok":
                    run.cells += 1
        run.lesson_s = time.perf_counter() - start
    finally:
        ws.close()


class MemorySampler(threading.Thread):
    """Each second, the summed RSS of every process of each user; keeps each user's peak (MB)."""

    def __init__(self, users: list[str]) -> None:
        super().__init__(daemon=True)
        self.uids = {pwd.getpwnam(u).pw_uid: u for u in users}
        self.peak_mb = dict.fromkeys(users, 0.0)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            now = dict.fromkeys(self.peak_mb, 0.0)
            for proc in psutil.process_iter(["uids", "memory_info"]):
                user = self.uids.get(proc.info["uids"].real if proc.info["uids"] else -1)
                if user and proc.info["memory_info"]:
                    now[user] += proc.info["memory_info"].rss / 2**20
            for user, mb in now.items():
                self.peak_mb[user] = max(self.peak_mb[user], mb)


def as_user(user: str, *cmd: str) -> None:
    subprocess.run(["runuser", "-u", user, "--", "env", "-i", f"HOME={pwd.getpwnam(user).pw_dir}",
                    "PATH=/usr/bin:/bin", "HPCNB_SLURM=local", f"HPCNB_BIN_DIR={PREFIX / 'slurm-bin'}", *cmd],
                   capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


def fresh_start(user: str, lesson: str) -> None:
    """The user's local Slurm reset, no JupyterLab workspace, the lesson with its outputs cleared."""
    as_user(user, str(PREFIX / "course" / ".venv" / "bin" / "hpcnb"), "slurm", "reset")
    home = Path(pwd.getpwnam(user).pw_dir)
    shutil.rmtree(home / ".jupyter" / "lab" / "workspaces", ignore_errors=True)
    for old in home.glob("jupyterhub_slurmspawner_*.log"):
        old.unlink()
    notebook = nbformat.read(ROOT / lesson, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    target = home / COURSE_DIR / lesson
    nbformat.write(notebook, target)
    shutil.chown(target, user, user)


def visit(hub: Hub, user: str, lesson: str, run: Run) -> None:
    """One user's whole visit: log in, get a server, run the lesson, stop the server."""
    student = Student(hub, user)
    try:
        student.log_in()
        start = time.perf_counter()
        student.spawn()
        run.spawn_s = time.perf_counter() - start
        student.run_lesson(lesson, run)
    except Exception as err:  # reported with the others' figures
        run.errors.append(f"{type(err).__name__}: {err}")
    finally:
        student.stop_server()


def together(hub: Hub, users: list[str], lesson: str) -> list[Run]:
    """Every user's visit at once (one thread each), with their memory sampled."""
    for user in users:
        fresh_start(user, lesson)
    runs = [Run(user) for user in users]
    sampler = MemorySampler(users)
    sampler.start()
    threads = [threading.Thread(target=visit, args=(hub, r.user, lesson, r)) for r in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sampler.done.set()
    sampler.join()
    for run in runs:
        run.peak_mb = sampler.peak_mb[run.user]
    return runs


def report(solo: Run, crowd: list[Run], lesson: str, load: float) -> str:
    """A markdown table: solo and each of the N, with ratios to solo, and the machine."""
    memory = psutil.virtual_memory().total / 2**30
    lines = [f"portal_load: {lesson}, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
             f"{memory:.0f} GiB, load {load:.2f} before, {os.getloadavg()[0]:.2f} after",
             "", "| run | server start | lesson | lesson / solo | cells run | peak memory | errors |",
             "|---|---|---|---|---|---|---|"]
    for label, run in [("solo", solo)] + [(f"{len(crowd)} at once: {r.user}", r) for r in crowd]:
        ratio = run.lesson_s / solo.lesson_s if solo.lesson_s else float("nan")
        lines.append(f"| {label} | {run.spawn_s:.0f} s | {run.lesson_s:.0f} s | {ratio:.2f}× | "
                     f"{run.cells} | {run.peak_mb:.0f} MB | {len(run.errors)} |")
    times = [r.lesson_s for r in crowd]
    lines += ["", f"{len(crowd)} users at once: lesson median {statistics.median(times):.0f} s, "
              f"max {max(times):.0f} s = {max(times) / solo.lesson_s:.2f}× solo ({solo.lesson_s:.0f} s); "
              f"server start max {max(r.spawn_s for r in crowd):.0f} s; "
              f"peak memory per user max {max(r.peak_mb for r in crowd):.0f} MB"]
    for run in [solo, *crowd]:
        lines += [f"{run.user}: {error}" for error in run.errors]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=10, help="how many users at once (default 10)")
    parser.add_argument("--lesson", default="notebooks/03-first-batch-job.ipynb", help="the lesson each runs")
    parser.add_argument("--port", type=int, default=14130, help="the login page's port (and the next two)")
    parser.add_argument("--skip-install", action="store_true", help="the portal is installed already")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("run me as root: the hub starts each user's server as that user")
    users = [f"hpcnb-load{i}" for i in range(1, args.users + 1)]
    if not args.skip_install:
        subprocess.run(["bash", str(ROOT / "ci" / "portal.sh"), "install"], check=True,
                       env={**os.environ, "PORTAL_USERS": " ".join(users), "PORTAL_PREFIX": str(PREFIX)})
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="portal-load-") as tmp:
        hub = Hub(users, args.port, Path(tmp) / "state")
        hub.start()
        try:
            solo = together(hub, users[:1], args.lesson)[0]
            crowd = together(hub, users, args.lesson)
        finally:
            hub.stop()
            for user in users:
                as_user(user, str(PREFIX / "course" / ".venv" / "bin" / "hpcnb"), "slurm", "reset")
    print(report(solo, crowd, args.lesson, load))
    return 1 if any(r.errors for r in [solo, *crowd]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
