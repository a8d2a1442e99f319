"""The course in a real browser: JupyterLab (as `make lab` starts it) driven by headless Chromium.

The server serves a copy of the course (notebooks/, exercises/) as `make lab` serves the repository,
so that nothing a test runs or saves touches the real notebooks. Every lesson and exercise renders
its stored outputs as written (no `$HOME` typeset as math, no `<PI>` dropped as HTML); lesson 3's
link opens its exercise, whose nbgrader "Validate" button runs it.

A lesson-like notebook submits a short job with the job API and shows ``hpcnb.widgets.watch(job)``;
the test runs all cells, waits for the widget to show COMPLETED (with the job's output), saves a
screenshot to test-artifacts/browser-widget.png, and checks the README's "open the course" path:
the server lists the course kernel, and ``!which sbatch`` in it finds the local Slurm's command.

Chromium is Debian's /usr/bin/chromium (never `playwright install`); the server binds 127.0.0.1
with a token, with private Jupyter config/runtime folders, and is stopped by the test.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
COURSE_KERNEL = "hpcnb"
COURSE_FOLDERS = ("notebooks", "exercises")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _install_course_kernel() -> str:
    """`hpcnb kernel install` (into this venv); the kernel to use: the course's, else python3."""
    res = subprocess.run([sys.executable, "-m", "hpcnb.cli", "kernel", "install"], capture_output=True,
                         text=True, timeout=120)
    return COURSE_KERNEL if res.returncode == 0 else "python3"


def _lesson(kernel: str) -> nbformat.NotebookNode:
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    display = "Python 3 (hpcnb: Slurm course)" if kernel == COURSE_KERNEL else "Python 3 (ipykernel)"
    return new_notebook(cells=[
        new_markdown_cell("# Watching a job\n\nSubmit a short job and follow it live."),
        new_code_cell("!which sbatch"),
        new_code_cell(
            "from hpcnb.jobs import submit\n"
            "from hpcnb.widgets import watch\n\n"
            'job = submit(wrap="echo hello from the widget; sleep 8; echo done", time="0:30", job_name="widget-demo")\n'
            "watch(job)"
        ),
        new_code_cell("from hpcnb.widgets import QueueWidget\n\nQueueWidget()"),
    ], metadata={"kernelspec": {"name": kernel, "display_name": display, "language": "python"},
                 "language_info": {"name": "python"}})


def _get(url: str, token: str, timeout: float = 10) -> dict | list:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("jupyterlab")
    from hpcnb.backend import local_bin_dir

    base = tmp_path_factory.mktemp("lab")
    course = base / "course"  # as `make lab`: the repository's layout, served from its root
    for folder in COURSE_FOLDERS:
        shutil.copytree(ROOT / folder, course / folder, ignore=shutil.ignore_patterns("work", ".ipynb_checkpoints"))
    notebooks = course / "notebooks"
    kernel = _install_course_kernel()
    nbformat.write(_lesson(kernel), notebooks / "watch-a-job.ipynb")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    # As `make lab`: the local Slurm chosen, its commands NOT on the server's PATH (the kernel adds them).
    folder = str(local_bin_dir())
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != folder)
    env["HPCNB_SLURM"] = "local"
    env["JUPYTER_CONFIG_DIR"] = str(base / "config")
    # no "Would you like to get notified about official Jupyter news?" toast over the screenshot
    settings = base / "config" / "lab" / "user-settings" / "@jupyterlab"
    (settings / "apputils-extension").mkdir(parents=True)
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    # every cell in the page, not only those scrolled into view, so that all outputs can be checked
    (settings / "notebook-extension").mkdir()
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env["JUPYTER_RUNTIME_DIR"] = str(base / "runtime")
    env.pop("JUPYTER_PATH", None)
    argv = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
            "--no-browser", "--ServerApp.open_browser=False", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={course}", "--LabApp.default_url=/lab/tree/notebooks", "--LabApp.news_url=None",
            "--LabApp.expose_app_in_browser=True",  # the tests open notebooks through its commands
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    with serve_lab(argv, env, course, base / "jupyter.log", port, token) as url:
        yield {"url": url, "token": token, "kernel": kernel, "course": course, "notebooks": notebooks,
               "bin": folder, "log": base / "jupyter.log"}


@contextlib.contextmanager
def serve_lab(argv: list[str], env: dict[str, str], cwd: Path, log_path: Path, port: int, token: str):
    """Run a Jupyter server on 127.0.0.1:``port`` (``argv``) until it answers; its URL; stop it after
    (a clean shutdown stops its kernels and terminals, else SIGTERM then SIGKILL to its group)."""
    log = open(log_path, "w")
    server = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                pytest.fail(f"jupyter lab exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                _get(f"{url}/api/status", token, timeout=2)
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not answer in 120 s:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
        yield url
    finally:
        try:  # a clean stop shuts the kernels down too
            req = urllib.request.Request(f"{url}/api/shutdown", method="POST",
                                         headers={"Authorization": f"token {token}"})
            urllib.request.urlopen(req, timeout=10).close()
            server.wait(timeout=30)
        except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
            pass
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=15)
        log.close()


def close_dialogs(page) -> list[str]:
    """Close any JupyterLab dialog open now (Escape: its cancel), and say what each said. JupyterLab
    opens some by itself; one that covered the menu bar made a click wait its whole timeout (CI, a
    loaded machine; what it said was not kept then). The checks after the click still decide."""
    said = []
    dialog = page.locator(".jp-Dialog")
    while dialog.count() and len(said) < 5:
        said.append(" ".join(dialog.first.inner_text(timeout=5_000).split()))
        print(f"closed a JupyterLab dialog: {said[-1][:500]}", file=sys.stderr, flush=True)
        page.keyboard.press("Escape")
        page.wait_for_timeout(500)
    return said


def run_all_cells(page, notebook) -> None:
    """Run > Run All Cells in JupyterLab, until a cell has started (also used by test_portal.py).
    A click lost while the session connects is made again, never one that landed late: cells run
    twice ran a DDP job twice (CI: two event files in the lesson's TensorBoard folder)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    started = notebook.locator(".jp-InputPrompt", has_text=re.compile(r"\[(\*|\d+)\]"))
    for attempt in range(3):
        close_dialogs(page)
        try:
            if attempt:  # the last click may have landed: its cells start once a dialog is gone
                expect(started).not_to_have_count(0, timeout=10_000)
                return
        except AssertionError:
            pass
        try:
            page.get_by_role("menuitem", name="Run", exact=True).click(timeout=30_000)
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click(timeout=30_000)
            expect(started).not_to_have_count(0, timeout=30_000)
            return
        except (AssertionError, PlaywrightTimeout):  # a dialog that opened meanwhile is closed above
            if attempt == 2:
                raise


def _start_session(lab, path: str) -> None:
    """A session with the notebook's kernel before the page opens: JupyterLab connects to it rather
    than choosing a kernel itself (a busy machine: it asked "Select Kernel" as the cells ran)."""
    body = json.dumps({"path": path, "name": Path(path).name, "type": "notebook",
                       "kernel": {"name": lab["kernel"]}}).encode()
    req = urllib.request.Request(f"{lab['url']}/api/sessions", data=body, method="POST",
                                 headers={"Authorization": f"token {lab['token']}",
                                          "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=60).close()


@contextlib.contextmanager
def _notebook_page(lab, name: str):
    """Chromium on a notebook of the course's notebooks/ folder, its kernel up and idle: (page, notebook)."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            _start_session(lab, f"notebooks/{name}")
            page.set_default_timeout(120_000)
            expect.set_options(timeout=120_000)  # a busy 2-core machine: kernels take a while to start
            # reset: not the workspace an earlier test left (its notebooks, an open dialog)
            page.goto(f"{lab['url']}/lab/tree/notebooks/{name}?reset&token={lab['token']}")
            notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
            expect(notebook.locator(".jp-Cell").first).to_be_visible()
            # connected to that kernel (not "No Kernel"), and idle (the toolbar's execution indicator)
            expect(notebook.locator(".jp-Toolbar-kernelName")).to_contain_text("Python 3")
            expect(notebook.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)
            sessions = [s for s in _get(f"{lab['url']}/api/sessions", lab["token"])
                        if s["path"] == f"notebooks/{name}"]
            assert len(sessions) == 1, f"the page did not take the session made for it: {sessions}"
            yield page, notebook
        finally:
            browser.close()


def test_server_lists_the_course_kernel(lab) -> None:
    specs = _get(f"{lab['url']}/api/kernelspecs", lab["token"])["kernelspecs"]
    assert COURSE_KERNEL in specs, f"`hpcnb kernel install` did not register the course kernel: {sorted(specs)}"
    assert specs[COURSE_KERNEL]["spec"]["display_name"] == "Python 3 (hpcnb: Slurm course)"


def test_widget_in_jupyterlab(lab) -> None:
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "browser-widget.png"
    with _notebook_page(lab, "watch-a-job.ipynb") as (page, notebook):
        if lab["kernel"] == COURSE_KERNEL:
            expect(notebook.locator(".jp-KernelName")).to_contain_text("hpcnb")
        run_all_cells(page, notebook)
        widget = notebook.locator(".hpcnb-job-widget")
        expect(widget).to_be_visible()
        expect(widget.locator(".hpcnb-job-state")).to_contain_text("RUNNING", timeout=60_000)
        # watch() did not block the kernel: the next cell ran while the job was still running
        queue = notebook.locator(".hpcnb-queue-widget")
        expect(queue.locator(".hpcnb-queue-table")).to_contain_text("widget-demo")
        expect(queue.locator(".hpcnb-queue-table")).to_contain_text("RUNNING")
        expect(widget.locator(".hpcnb-job-tail")).to_contain_text("hello from the widget")
        expect(widget.locator(".hpcnb-job-state")).not_to_contain_text("COMPLETED", timeout=1_000)
        expect(widget.locator(".hpcnb-job-state")).to_contain_text("COMPLETED", timeout=120_000)
        expect(widget.locator(".hpcnb-job-tail")).to_contain_text("hello from the widget")
        expect(widget.locator(".hpcnb-job-tail")).to_contain_text("done")
        expect(widget.locator(".hpcnb-job-nodes")).to_contain_text("node")
        expect(widget.locator(".hpcnb-job-time")).to_contain_text("0:30")
        expect(widget.locator("button.hpcnb-job-cancel")).to_be_disabled()
        expect(queue.locator(".hpcnb-queue-table")).not_to_contain_text("RUNNING", timeout=60_000)
        # `!which sbatch` in the course kernel finds the local Slurm's command
        which = notebook.locator(".jp-Cell").nth(1).locator(".jp-OutputArea-output")
        if lab["kernel"] == COURSE_KERNEL:
            expect(which).to_contain_text(str(Path(lab["bin"]) / "sbatch"))
        widget.scroll_into_view_if_needed()
        page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if lab["kernel"] != COURSE_KERNEL:
        pytest.skip("the course kernel could not be installed: ran on python3 and skipped the `which sbatch` check")


# Tags that a stored Markdown output may use as HTML; any other `<name>` is a placeholder to show.
HTML_TAGS = {"a", "b", "br", "code", "div", "em", "i", "img", "p", "pre", "small", "span", "strong", "sub", "sup"}
MATH = "mjx-container, .MathJax, .katex"


def _markdown_outputs(notebook: Path) -> list[str]:
    """The text/markdown of every stored output JupyterLab renders as Markdown."""
    nb = nbformat.read(notebook, as_version=4)
    return [o["data"]["text/markdown"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if "text/markdown" in o.get("data", {}) and not {"text/html", "application/vnd.jupyter.widget-view+json"}
            & set(o["data"])]


def _placeholders(markdown: str) -> set[str]:
    """`$NAME` and `<placeholder>` texts a reader must see, escaped in the source or not."""
    names = {f"${m}" for m in re.findall(r"\\?\$([A-Za-z_]\w*)", markdown)}
    tags = re.findall(r"&lt;([^&<>]+)&gt;", markdown) + [t for t in re.findall(r"<([A-Za-z][\w-]*)>", markdown)
                                                         if t.lower() not in HTML_TAGS]
    return names | {f"<{t}>" for t in tags}


def _open(page, lab, path: str):
    """Open a notebook of the served course in the running JupyterLab (no reload); its panel."""
    page.evaluate("path => window.jupyterapp.commands.execute('docmanager:open', {path})", path)
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    from playwright.sync_api import expect

    expect(page.locator(".lm-TabBar-tab.lm-mod-current[data-type='document-title']")).to_contain_text(Path(path).name)
    return panel


def _close_all(page, lab) -> None:
    """Close every tab, unsaved (nothing here is meant to be saved), and shut down their kernels."""
    page.evaluate("() => { for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) w.dispose(); }")
    for session in _get(f"{lab['url']}/api/sessions", lab["token"]):
        req = urllib.request.Request(f"{lab['url']}/api/sessions/{session['id']}", method="DELETE",
                                     headers={"Authorization": f"token {lab['token']}"})
        urllib.request.urlopen(req, timeout=10).close()


def _check_rendered(page, lab, path: str) -> list[str]:
    """Open one notebook; what its stored Markdown outputs lost in the browser (math, dropped text)."""
    from playwright.sync_api import expect

    outputs = _markdown_outputs(lab["course"] / path)
    panel = _open(page, lab, path)
    expect(panel.locator(".jp-Cell")).to_have_count(len(nbformat.read(lab["course"] / path, as_version=4).cells))
    rendered = panel.locator(".jp-OutputArea-output.jp-RenderedMarkdown")
    expect(rendered).to_have_count(len(outputs))
    problems = [f"{path}: math typeset in an output: {t[:80]!r}"
                for t in panel.locator(".jp-OutputArea-output").filter(has=page.locator(MATH)).all_inner_texts()]
    text = "\n".join(rendered.all_inner_texts())
    problems += [f"{path}: {p!r} is not shown" for md in outputs for p in sorted(_placeholders(md)) if p not in text]
    _close_all(page, lab)
    return problems


def _browser_page(p, lab, path: str = "/lab?reset"):
    """Chromium on the Lab at ``path`` (default: a fresh workspace; ``/``: the server's default URL)."""
    browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(120_000)
    from playwright.sync_api import expect

    expect.set_options(timeout=120_000)  # a busy 2-core machine
    page.goto(f"{lab['url']}{path}{'&' if '?' in path else '?'}token={lab['token']}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started")
    return browser, page


def _without_kernels(page) -> None:
    """Notebooks opened from now on in this page start no kernel (stored outputs need none): a
    kernel per notebook costs seconds of CPU to start and to shut down."""
    factory = page.evaluate_handle("() => window.jupyterapp.docRegistry.getWidgetFactory('Notebook')")
    assert factory.evaluate("f => '_preferKernel' in f && '_canStartKernel' in f"), "JupyterLab changed"
    factory.evaluate("f => { f._preferKernel = false; f._canStartKernel = false; }")


def test_stored_outputs_render_as_written(lab) -> None:
    """Issue 25, item 2: every lesson's and exercise's Markdown outputs keep `$HOME`, `<PI>`... as text.

    A control notebook first shows that this JupyterLab does typeset `$...$` in an output table and
    drops `<PI>`, so the checks below can see both."""
    from playwright.sync_api import expect, sync_playwright

    control = "| dir | flag |\n|---|---|\n| $HOME and $SCRATCH | --account=def-<PI> |"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/markdown": control, "text/plain": "control"})])],
        metadata={"kernelspec": {"name": lab["kernel"], "display_name": "course", "language": "python"}})
    nbformat.write(nb, lab["notebooks"] / "render-control.ipynb")
    notebooks = [p for folder in COURSE_FOLDERS for p in sorted((lab["course"] / folder).glob("[0-9]*.ipynb"))]
    assert len(notebooks) >= 28
    # Only Markdown outputs can lose text this way (streams are plain text): open the notebooks that
    # have any (about 10 s each on a busy 2-core machine), not all 28
    paths = [str(p.relative_to(lab["course"])) for p in notebooks if _markdown_outputs(p)]
    assert "notebooks/01-cluster-anatomy.ipynb" in paths and "notebooks/02-storage-tiers.ipynb" in paths
    with sync_playwright() as p:
        browser, page = _browser_page(p, lab)
        _without_kernels(page)
        try:
            panel = _open(page, lab, "notebooks/render-control.ipynb")
            expect(panel.locator(f"table :is({MATH})").first).to_be_attached()
            assert _check_rendered(page, lab, "notebooks/render-control.ipynb"), "the control lost nothing?"
            problems = [problem for path in paths for problem in _check_rendered(page, lab, path)]
        finally:
            browser.close()
    assert not problems, "\n".join(problems)


def test_lesson_3_links_its_exercise_which_validates(lab) -> None:
    """Issue 25, item 1: in the lab as `make lab` serves it, lesson 3's link opens its exercise, and
    nbgrader's Validate button runs it: unanswered, its setup cells work and its test cells fail on
    the missing answers."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser, page = _browser_page(p, lab)
        try:
            lesson = _open(page, lab, "notebooks/03-first-batch-job.ipynb")
            lesson.locator(".jp-MarkdownCell a[href*='03-first-batch-job-exercises.ipynb']").first.click()
            current = page.locator(".lm-TabBar-tab.lm-mod-current[data-type='document-title']")
            expect(current).to_contain_text("03-first-batch-job-exercises.ipynb")
            exercise = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
            expect(exercise.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)
            exercise.locator(".validate-button").click()
            dialog = page.locator(".jp-Dialog")
            expect(dialog).to_contain_text("Validation Results", timeout=300_000)
            expect(dialog).to_contain_text("The following cell failed")
            expect(dialog).to_contain_text("3.1 is unanswered")  # exercise 1's answer, named (checks.answered)
            expect(dialog).not_to_contain_text("ModuleNotFoundError")  # the setup cells ran
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "browser-validate.png"))
        finally:
            browser.close()


def _tensorboard_lesson(kernel: str) -> nbformat.NotebookNode:
    """As lesson 8: a 2-rank DDP job writes TensorBoard scalars (rank 0 alone); the board opens beside it."""
    from nbformat.v4 import new_code_cell, new_notebook

    display = "Python 3 (hpcnb: Slurm course)" if kernel == COURSE_KERNEL else "Python 3 (ipykernel)"
    return new_notebook(cells=[
        new_code_cell("import hpcnb\n\nhpcnb.setup()"),
        new_code_cell("!sbatch --wait -n 2 -o ddp-%j.out --wrap 'srun python -m hpcnb.scripts.ddp_train "
                      "--epochs 2 --out ddp-2 --tensorboard runs'"),
        new_code_cell("from hpcnb.lessons import tensorboard\n\nprint(tensorboard.summary('runs'))\n"
                      "board = tensorboard.show('runs')\nboard"),
    ], metadata={"kernelspec": {"name": kernel, "display_name": display, "language": "python"},
                 "language_info": {"name": "python"}})


def test_tensorboard_opens_from_the_notebook(lab) -> None:
    """Issue 27, item 4: the notebook's link opens TensorBoard through jupyter-server-proxy, and its
    scalars page draws the curves a real DDP job's rank 0 wrote."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("jupyter_server_proxy")
    from playwright.sync_api import expect

    nbformat.write(_tensorboard_lesson(lab["kernel"]), lab["notebooks"] / "watch-training.ipynb")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "browser-tensorboard.png"
    with _notebook_page(lab, "watch-training.ipynb") as (page, notebook):
        run_all_cells(page, notebook)
        link = notebook.get_by_role("link", name="Open TensorBoard")
        expect(link).to_be_visible(timeout=240_000)
        summary = notebook.locator(".jp-Cell").nth(2).locator(".jp-OutputArea-output").first
        expect(summary).to_contain_text("ddp-2: 1 event file(s)")
        expect(summary).to_contain_text("train/batch_loss")
        with page.expect_popup() as opened:
            link.click()
        board = opened.value
        board.set_default_timeout(120_000)
        assert re.search(r"/proxy/\d+/$", board.url), board.url
        board.get_by_text(re.compile(r"^\s*scalars\s*$", re.IGNORECASE)).first.click()
        for tag in ("train/batch_loss", "epoch/loss", "epoch/seconds"):  # the Time Series tab hides its own
            expect(board.get_by_text(tag, exact=True).filter(visible=True).first).to_be_visible()
        card = board.locator("tf-scalar-card").filter(has_text="train/batch_loss").filter(visible=True)
        expect(card).to_have_count(1)
        # the curve itself drawn: a line through the steps' points (Plottable's path.line)
        expect(card.locator("path.line").first).to_have_attribute("d", re.compile(r"^M(?:[^L]*L){10,}"))
        board.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
