"""The workshop portal (ci/portal.sh, ``make portal``) as a student meets it, in a real browser.

The hub (JupyterHub + batchspawner's SlurmSpawner + configurable-http-proxy) runs as root; the
student ``hpcnb-student`` follows a workshop's link to lesson 1 (outputs cleared): the hub's login
page, then their notebook server starts as a Slurm job submitted as them, and JupyterLab opens with
the lesson, once, in a fresh workspace (one page load: no restored tab, no second page that opens
it again and starts a second kernel). When the server has one session for the lesson, its kernel
idle and this page connected to it, the test runs the lesson to the end, saves it, checks that
every cell ran without an error inside the server's own job (hpcnb says so and starts the lesson's
jobs without that job's variables: its ``srun`` is no step of the server's job). After lesson 1 come
lesson 8's cells on training on the node the notebook holds (tagged ``own-node``): there the notebook
*is* in a job, so they train with ``torch.distributed.run --standalone`` in the server's node and once
more as ``srun --overlap --jobid=<the server's job>``, which sacct must list as a step of that job,
beside the server's own. Then the test stops the server from the hub's home page and checks that
its job is gone. Stopping the hub at the end stops the proxy and any job left; the student's jobs
are cancelled whatever happened. A failure shows what the page saw (its tabs, the kernel's state,
the cells run, the server's sessions), the hub's and the server's logs and the server job in squeue
and sacct.

A second participant, ``hpcnb-student2``, can read neither the first one's home nor their job's
output (homes are 0700).

Run by ``make test-portal`` only (long; as root, after ``ci/portal.sh install`` for
``hpcnb-student`` and ``hpcnb-student2``): ``HPCNB_PORTAL_TEST=local`` uses the student's local Slurm,
``HPCNB_PORTAL_TEST=real`` the real Slurm 22.05 of ``ci/real-slurm.sh`` (hold
/tmp/real-slurm.lock). Chromium is Debian's /usr/bin/chromium (never ``playwright install``).
Screenshots and the hub's and the server's logs land in test-artifacts/portal-*.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import nbformat
import pytest

VARIANT = os.environ.get("HPCNB_PORTAL_TEST", "")
if VARIANT not in ("local", "real"):
    pytest.skip("the portal test runs with `make test-portal` (HPCNB_PORTAL_TEST=local|real)", allow_module_level=True)

from test_browser import CHROMIUM, CHROMIUM_ARGS, run_all_cells  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ci" / "portal"))
from hub import HubProcess  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow] + ([pytest.mark.realslurm] if VARIANT == "real" else [])

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
PREFIX = Path(os.environ.get("PORTAL_PREFIX", "/opt/hpcnb-portal"))
VENV = PREFIX / "course" / ".venv"
SLURM_BIN = PREFIX / "slurm-bin"
USER = "hpcnb-student"
OTHER = "hpcnb-student2"  # a second participant (make test-portal installs both)
LESSON = "notebooks/01-cluster-anatomy.ipynb"
SECTION = "notebooks/08-ddp.ipynb"  # its cells tagged SECTION_TAG run after lesson 1, in the same kernel
SECTION_TAG = "own-node"  # "Training on the node your notebook holds"
LESSON_URL = f"/user/{USER}/lab/tree/{LESSON}"  # a workshop's link: JupyterLab with the lesson open
# the login page's port; the hub's API and the proxy's API take the next two (below the tests' ranges)
PORT = {"local": 14100, "real": 14110}[VARIANT]
HUB_UP_S = 120
SPAWN_S = 240     # the hub gives up after start_timeout (180 s) + http_timeout
KERNEL_S = 180    # the lesson's kernel started and connected (the server waits 60 s for a kernel's first reply)
LESSON_S = 660    # lesson 1 takes about 10 s on the local Slurm, 1-2 min on the real one (a requeue holds
#                   cred_expire + 1 s: 31 s in CI, 121 s by Slurm's default);
#                   lesson 8's section on the notebook's node adds two one-process trainings
STOP_S = 60


def portal_lesson() -> nbformat.NotebookNode:
    """What the student opens: lesson 1, then lesson 8's cells tagged SECTION_TAG; no outputs yet."""
    lesson = nbformat.read(PREFIX / "course" / LESSON, as_version=4)
    section = nbformat.read(PREFIX / "course" / SECTION, as_version=4)
    lesson.cells += [cell for cell in section.cells if SECTION_TAG in cell.metadata.get("tags", [])]
    for cell in lesson.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return lesson


def _home() -> Path:
    return Path(pwd.getpwnam(USER).pw_dir)


def as_student(*cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A command as the student, with the Slurm the hub gives their server (ci/portal.sh's PATH)."""
    path = (f"{SLURM_BIN}:" if VARIANT == "local" else "") + "/usr/local/bin:/usr/bin:/bin"
    env = ["env", "-i", f"HOME={_home()}", f"USER={USER}", f"PATH={path}", "LANG=C.UTF-8",
           f"HPCNB_SLURM={VARIANT}", f"HPCNB_BIN_DIR={SLURM_BIN}", "HPCNB_NODE_NETWORK=shared"]  # as ci/portal.sh
    return subprocess.run(["runuser", "-u", USER, "--", *env, *cmd], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def student_jobs() -> str:
    """The student's jobs in squeue (id, name, state, batch host), one per line."""
    res = as_student("squeue", "-h", "-u", USER, "-o", "%i %j %T %B")
    return res.stdout.strip() if res.returncode == 0 else f"squeue failed ({res.returncode}): {res.stderr.strip()}"


def cancel_student_jobs() -> None:
    """Whatever the student still runs: cancelled (the local Slurm: reset, which forgets it all)."""
    if VARIANT == "local":
        as_student(str(VENV / "bin" / "hpcnb"), "slurm", "reset", timeout=120)
    else:
        as_student("scancel", "-u", USER)


class Portal(HubProcess):
    """The hub started by ``ci/portal.sh run`` for one student, and what to show when it fails."""

    def __init__(self, state: Path) -> None:
        super().__init__([USER], PORT, VARIANT, state, PREFIX)
        self.page: Any = None        # the browser's page, once there is one (its state goes into diagnosis())
        self.job: str | None = None  # the server's Slurm job, once known

    def start(self) -> None:
        failed = super().start(HUB_UP_S)
        if failed:
            pytest.fail(f"{failed}\n{self.diagnosis()}")

    def proxy_pid(self) -> int | None:
        try:
            pid = int((self.state / "proxy.pid").read_text())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def job_log(self) -> Path | None:
        """The newest server job's output (the single-user server's log)."""
        logs = sorted(_home().glob("jupyterhub_slurmspawner_*.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1] if logs else None

    def keep_logs(self) -> None:
        """The hub's and the server's logs into test-artifacts/."""
        ARTIFACTS.mkdir(exist_ok=True)
        for name, path in (("hub", self.log_path), ("server", self.job_log())):
            if path and path.exists():
                shutil.copyfile(path, ARTIFACTS / f"portal-{VARIANT}-{name}.log")

    def diagnosis(self) -> str:
        """What the page shows, the end of the hub's log, the student's jobs, the server job's
        accounting and the end of the newest job log."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else "(no hub log)"
        parts = []
        if self.page is not None:
            parts += ["--- the page ---", describe_lab(lab_state(self.page))]
        parts += ["--- hub log (last 40 lines) ---", *text.splitlines()[-40:],
                  f"--- squeue -u {USER} ---", student_jobs() or "(no jobs)"]
        if self.job:
            res = as_student("sacct", "-j", self.job, "-P", "-o", "JobID,State,ExitCode,ReqMem,MaxRSS")
            parts += [f"--- sacct -j {self.job} ---", (res.stdout or res.stderr).strip()]
        job_log = self.job_log()
        if job_log:
            parts += [f"--- {job_log} (last 20 lines) ---", *job_log.read_text(errors="replace").splitlines()[-20:]]
        return "\n".join(parts)


@pytest.fixture
def portal(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("the portal needs root (it runs each student's server job as the student)")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    if not (VENV / "bin" / "jupyterhub-singleuser").exists():
        pytest.fail(f"the course is not installed for the students: PORTAL_USERS={USER} bash ci/portal.sh install")
    cancel_student_jobs()  # a clean start, whatever an earlier run left
    for old in _home().glob("jupyterhub_slurmspawner_*.log"):
        old.unlink()
    # a first visit: no JupyterLab workspace that reopens the lesson (and starts its kernel) on login
    shutil.rmtree(_home() / ".jupyter" / "lab" / "workspaces", ignore_errors=True)
    lesson = portal_lesson()
    target = _home() / "hpcnb-course" / LESSON
    nbformat.write(lesson, target)
    shutil.chown(target, USER, USER)
    hub = Portal(tmp_path / "state")
    try:
        hub.start()
        yield hub
    finally:
        try:
            hub.stop()
        finally:
            left = hub.proxy_pid()
            if left:
                os.kill(left, signal.SIGKILL)
            jobs = student_jobs()
            cancel_student_jobs()
            hub.keep_logs()
        assert left is None, f"the hub left its proxy (pid {left}) running"
        assert "spawner-jupyterhub" not in jobs, f"the hub left the server's job:\n{jobs}"


# The lesson's state in the page: code cells, how many ran, are queued or running, errors, and the
# kernel's state in the notebook's toolbar (it says "idle" before the kernel has told anything).
CELL_STATE_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim());
  const errors = [...panel.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]')];
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  return {cells: prompts.length, ran: prompts.filter(p => /^\\[\\d+\\]/.test(p)).length,
          busy: prompts.filter(p => p.includes('*')).length, errors: errors.map(e => e.innerText.slice(-1500)),
          kernel: indicator ? indicator.dataset.status : null};
}"""

# JupyterLab as the student sees it, and the server's sessions as its REST API lists them (asked
# from the page, as JupyterLab asks: its cookie and its XSRF token). Never waits more than 5 s.
LAB_STATE_JS = """async (api) => {
  const tabs = [...document.querySelectorAll('#jp-main-dock-panel .lm-TabBar-tabLabel')].map(t => t.textContent);
  const bar = document.querySelector('#jp-main-statusbar');
  const xsrf = decodeURIComponent((document.cookie.match(/(?:^|;\\s*)_xsrf=([^;]*)/) || [])[1] || '');
  const ask = fetch(api + 'sessions', {headers: {'X-XSRFToken': xsrf}})
    .then(r => r.ok ? r.json() : `GET ${api}sessions: HTTP ${r.status}`)
    .then(list => typeof list === 'string' ? list : list.map(s => ({
      path: s.path, kernel: s.kernel ? s.kernel.id : null, state: s.kernel ? s.kernel.execution_state : null,
      connections: s.kernel ? s.kernel.connections : 0})))
    .catch(e => `GET ${api}sessions: ${e}`);
  const late = new Promise(done => setTimeout(() => done(`GET ${api}sessions: no answer in 5 s`), 5000));
  return {url: location.pathname, tabs, statusbar: bar ? bar.innerText.replace(/\\s+/g, ' ') : null,
          sessions: await Promise.race([ask, late])};
}"""


def lab_state(page) -> dict[str, Any]:
    """The page's JupyterLab (LAB_STATE_JS and CELL_STATE_JS together), or what kept it from answering."""
    try:
        return {**page.evaluate(LAB_STATE_JS, f"/user/{USER}/api/"), "lesson": page.evaluate(CELL_STATE_JS)}
    except Exception as err:  # the page is gone, elsewhere or stuck
        return {"error": f"{type(err).__name__}: {err}"}


def lesson_sessions(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The server's sessions for the lesson (all of them if the server could not be asked)."""
    sessions = state.get("sessions")
    return [s for s in sessions if s["path"] == LESSON] if isinstance(sessions, list) else []


def kernel_ready(state: dict[str, Any]) -> bool:
    """One tab and one server session for the lesson; its kernel idle, with this page connected to it."""
    sessions = lesson_sessions(state)
    tabs = [t for t in state.get("tabs", []) if t == Path(LESSON).name]
    return (len(tabs) == len(sessions) == 1 and sessions[0]["state"] == "idle" and sessions[0]["connections"] >= 1
            and (state.get("lesson") or {}).get("kernel") == "idle")


def describe_lab(state: dict[str, Any]) -> str:
    """lab_state() in a few lines."""
    if "error" in state:
        return f"(the page did not answer: {state['error']})"
    lesson = state.get("lesson") or {}
    lines = [f"at {state['url']}; tabs: {state['tabs']}", f"status bar: {state['statusbar']}",
             f"lesson: {lesson.get('cells')} code cells on the page, {lesson.get('ran')} ran, "
             f"{lesson.get('busy')} queued or running; kernel in the toolbar: {lesson.get('kernel')}"]
    sessions = state["sessions"]
    if isinstance(sessions, str):
        lines.append(f"server sessions: {sessions}")
    else:
        lines += [f"server sessions: {len(sessions)}"] + [
            f"  {s['path']}: kernel {s['kernel']} {s['state']}, {s['connections']} connection(s)" for s in sessions]
    return "\n".join(lines)


def wait_until(what: str, probe, timeout: float, hub: Portal, ready=bool, poll: float = 1.0):
    """Poll ``probe()`` until ``ready`` says yes to what it returned, and return that; fail after
    ``timeout`` s with the last thing it returned and the portal's diagnosis."""
    deadline = time.monotonic() + timeout
    while True:
        seen = probe()
        if ready(seen):
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s (last seen: {seen!r})\n{hub.diagnosis()}")
        time.sleep(poll)


def server_job() -> str | None:
    """The id of the student's server job while it runs."""
    for line in student_jobs().splitlines():
        job_id, name, state, *_ = line.split() + [""]
        if name == "spawner-jupyterhub" and state == "RUNNING":
            return job_id
    return None


def peak_memory(job_id: str) -> str:
    """The server step's peak memory so far and the job's memory (sstat; empty where there is none)."""
    res = as_student("sstat", "-n", "-P", "-j", f"{job_id}.0", "-o", "MaxRSS")
    mem = as_student("squeue", "-h", "-j", job_id, "-o", "%m")
    if res.returncode != 0 or not res.stdout.strip():
        return ""
    return f"server peak memory {res.stdout.strip()} of {mem.stdout.strip() or '?'}"


def job_steps(job_id: str) -> dict[str, str]:
    """The steps of a job in sacct with their command and state: ``{"batch": "batch COMPLETED", "0": ...}``."""
    res = as_student("sacct", "-j", job_id, "-n", "-P", "-o", "JobID,JobName,State")
    rows = (line.split("|") for line in res.stdout.split())
    return {i.split(".", 1)[1]: f"{name} {state}" for i, name, state in rows if "." in i}


@pytest.mark.timeout(300)
def test_participants_cannot_read_each_others_home_or_job_output() -> None:
    """Homes are 0700 (ci/portal.sh): a job's output in one participant's home is theirs alone."""
    if os.geteuid() != 0:
        pytest.skip("the portal's users exist only when it was installed as root")
    try:
        other = pwd.getpwnam(OTHER)
    except KeyError:
        pytest.fail(f"no user {OTHER}: PORTAL_USERS='{USER} {OTHER}' bash ci/portal.sh install")
    for home in (_home(), Path(other.pw_dir)):
        assert stat.S_IMODE(home.stat().st_mode) == 0o700, f"{home} is not 0700"
    token = secrets.token_hex(8)
    out = _home() / f"secret-{token}.out"
    try:
        done = as_student("sbatch", "--wait", "-o", str(out), "--wrap", f"echo SECRET={token}", timeout=240)
        assert done.returncode == 0 and f"SECRET={token}" in out.read_text(), done.stderr
        for peek in (["cat", str(out)], ["ls", str(_home())]):
            seen = subprocess.run(["runuser", "-u", OTHER, "--", *peek], capture_output=True, text=True, timeout=60)
            assert seen.returncode != 0 and "Permission denied" in seen.stderr, (peek, seen.stdout)
    finally:
        out.unlink(missing_ok=True)


@pytest.mark.timeout(HUB_UP_S + SPAWN_S + LESSON_S + 420)
def test_lesson_runs_in_a_spawned_server(portal: Portal) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    times: dict[str, float] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        try:
            page.set_default_timeout(60_000)
            expect.set_options(timeout=60_000)
            portal.page = page
            t0 = time.monotonic()
            # the link: log in, start the server (a Slurm job), then open the lesson in it
            spawn = "/hub/spawn?" + urllib.parse.urlencode({"next": LESSON_URL})
            page.goto(f"{portal.url}/hub/login?" + urllib.parse.urlencode({"next": spawn}))
            page.fill("#username_input", USER)
            page.fill("#password_input", portal.password)
            page.click("#login_submit")
            # the hub submits the server job and sends the browser on to the lesson once it answers
            page.wait_for_url(re.compile(re.escape(LESSON_URL) + "$"), timeout=SPAWN_S * 1000)
            times["login to JupyterLab"] = time.monotonic() - t0
            job = portal.job = wait_until("the server's Slurm job runs", server_job, 30, portal)

            t1 = time.monotonic()
            wait_until("the lesson's kernel is idle and connected, once", lambda: lab_state(page), KERNEL_S, portal,
                       ready=kernel_ready)
            notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
            run_all_cells(page, notebook)

            def lesson_state():
                state = page.evaluate(CELL_STATE_JS)
                if state and state["errors"]:
                    pytest.fail(f"a cell of {LESSON} failed in the spawned server:\n{state['errors'][0]}\n"
                                f"{portal.diagnosis()}")
                return state

            # JupyterLab adds a long notebook's cells to the page bit by bit: count against the file's
            code_cells = sum(c.cell_type == "code" for c in portal_lesson().cells)
            wait_until(f"all {code_cells} code cells of {LESSON} ran", lesson_state, LESSON_S, portal,
                       ready=lambda state: bool(state and state["cells"] == state["ran"] == code_cells), poll=2)
            times["lesson run"] = time.monotonic() - t1
            saved = _home() / "hpcnb-course" / LESSON

            def saved_cells():
                page.keyboard.press("Control+s")
                time.sleep(1)
                return [c for c in nbformat.read(saved, as_version=4).cells if c.cell_type == "code"]

            cells = wait_until("the run lesson is saved", saved_cells, 30, portal,
                               ready=lambda cells: all(c.execution_count for c in cells))
            page.screenshot(path=str(ARTIFACTS / f"portal-{VARIANT}-lesson.png"))  # the run lesson
            steps = job_steps(job)  # lesson 1's srun asked for jobs of its own; lesson 8's section made one step
            memory = peak_memory(job)

            t2 = time.monotonic()
            page.goto(f"{portal.url}/hub/home")
            # the button's handler is bound by the "home" module, which RequireJS loads after the page
            # itself: a click before that does nothing (CI, 2026-12-02: the job never left the queue)
            page.wait_for_function("() => window.require && require.defined && require.defined('home')")
            page.click("#stop")
            wait_until("the server's job has left the queue", lambda: job not in student_jobs().split(), STOP_S,
                       portal)
            expect(page.locator("#start")).to_contain_text("Start My Server")
            times["stop"] = time.monotonic() - t2
        except Exception as err:  # a browser step failed (Playwright's errors, expect's AssertionError)
            pytest.fail(f"in the browser, at {page.url}: {type(err).__name__}: {err}\n{portal.diagnosis()}")
        finally:
            portal.page = None
            with contextlib.suppress(Exception):  # the page as the test left it, if it still can be shown
                page.screenshot(path=str(ARTIFACTS / f"portal-{VARIANT}.png"), full_page=True, timeout=10_000)
            browser.close()

    first = "".join(o.get("text", "") for o in cells[0].outputs)
    assert f"this notebook runs inside Slurm job {job}" in first, f"hpcnb.setup() in the server's job said:\n{first}"
    assert f"talks to the {VARIANT} Slurm" in first
    srun = next(c for c in cells if c.source.startswith("!srun"))
    assert re.search(r"^node\d\s*$", "".join(o.get("text", "") for o in srun.outputs), re.MULTILINE), srun.outputs
    # step 0 is the server; lesson 8's `srun --overlap --jobid` is the only other step (lesson 1's srun is none)
    assert sorted(set(steps) - {"batch", "extern"}) == ["0", "1"], f"the steps of the server's job {job}: {steps}"
    assert steps["1"] == "python COMPLETED", f"the section's srun --overlap step in job {job}: {steps}"
    section = "".join(o.get("text", "") for c in cells if SECTION_TAG in c.metadata.get("tags", []) for o in c.outputs)
    assert f"this notebook's server is job {job} on " in section, f"lesson 8's section in the server's job:\n{section}"
    for said in ("the same training, the same weights: True", "the srun ran as a step of the notebook's job: True"):
        assert said in section, f"lesson 8's section in the server's job:\n{section}"
    errors = [o for c in cells for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    print(f"portal on the {VARIANT} Slurm: " + ", ".join([f"{k} {v:.1f} s" for k, v in times.items()]
                                                         + ([memory] if memory else [])))
