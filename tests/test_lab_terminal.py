"""The student's Lab is the course's cluster (issue 41, item 4): `make lab` as a student gets it.

- START.md, the landing page, links what exists, and no student-facing page links solutions/;
- `make lab PORT=... ROLE=...` runs hpcnb/course/lab.py with them (JUPYTER_PORT, PORT's old name, too);
- the Lab's environment: hpcnb and the chosen Slurm's commands first on PATH, the student's config;
- in a browser (Debian's /usr/bin/chromium, the Lab started with the Makefile's own command): the Lab
  opens on START.md, offers one kernel, has none of nbgrader's instructor menus, and a terminal opened
  in it runs `hpcnb slurm status` and `squeue` on the local Slurm that has the test's job, not the
  machine's /usr/bin/squeue.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

from hpcnb.backend import local_bin_dir
from hpcnb.course import lab as course_lab

ROOT = Path(__file__).resolve().parent.parent
START = ROOT / "START.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")  # Markdown links' targets
#: What students read: the landing page, the READMEs, the lessons, the exercises, the kit's README.
STUDENT_PAGES = [START, ROOT / "README.md", ROOT / "notebooks" / "README.md", ROOT / "hpcnb/course/kit/README.md",
                 *sorted((ROOT / "notebooks").glob("*.ipynb")), *sorted((ROOT / "exercises").glob("*.ipynb"))]
INSTRUCTOR_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                      "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:menu")


def _markdown(page: Path) -> str:
    if page.suffix != ".ipynb":
        return page.read_text()
    cells = nbformat.read(page, as_version=4).cells
    return "\n".join(c.source for c in cells if c.cell_type == "markdown")


def links(text: str) -> list[str]:
    """The local targets of a Markdown text's links (no URLs, no #anchors)."""
    return [t.split("#")[0] for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and t.split("#")[0]]


def solution_links(text: str) -> list[str]:
    """The links of a page that lead into solutions/."""
    return [t for t in links(text) if "solutions" in Path(t).parts]


def test_start_page_links_what_exists() -> None:
    text = START.read_text()
    targets = links(text)
    assert "notebooks/01-cluster-anatomy.ipynb" in targets and "exercises/" in targets, targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"START.md links what is not there: {missing}"
    assert len(text.splitlines()) <= 25, "the landing page is a page, not a manual"


def test_no_student_page_links_solutions() -> None:
    assert solution_links("see [the answer](../solutions/03-first-batch-job-exercises.ipynb)")  # the check bites
    found = {str(p.relative_to(ROOT)): solution_links(_markdown(p)) for p in STUDENT_PAGES}
    assert not {p: t for p, t in found.items() if t}, "a student-facing page links solutions/"
    assert "../exercises/" in links(_markdown(ROOT / "notebooks" / "README.md"))


def _make_lab_command(*assignments: str, env: dict[str, str] | None = None) -> str:
    """The command `make lab` runs (its LAB_COMMAND), with these make variables."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "--eval", "print-lab: ; @echo '$(LAB_COMMAND)'",
                          "print-lab", *assignments], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=env or {k: v for k, v in os.environ.items() if k not in ("PORT", "JUPYTER_PORT")})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_make_lab_port_and_role() -> None:
    assert _make_lab_command().endswith("-m hpcnb.course.lab --role student")
    assert _make_lab_command("PORT=18888").endswith("--role student --port 18888")
    assert _make_lab_command("ROLE=instructor").endswith("--role instructor")
    old = {**{k: v for k, v in os.environ.items() if k != "PORT"}, "JUPYTER_PORT": "18889"}
    assert _make_lab_command(env=old).endswith("--port 18889")
    assert _make_lab_command().startswith("HPCNB_SLURM=${HPCNB_SLURM:-local} ")


def test_bad_port_is_one_line() -> None:
    res = subprocess.run([sys.executable, "-m", "hpcnb.course.lab", "--port", "88x"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "'88x' is not a port number (1-65535)" in res.stderr
    assert len(res.stderr.strip().splitlines()) <= 3 and "Traceback" not in res.stderr


def test_lab_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCNB_SLURM", "local")
    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    env = course_lab.lab_env("student", {**os.environ, "PATH": "/usr/bin:/bin"})
    first = [str(Path(sys.executable).parent), str(local_bin_dir())]
    assert env["PATH"].split(os.pathsep)[:3] == [*first, "/usr/bin"]
    assert env[course_lab.PATH_VARIABLE] == os.pathsep.join(first)
    assert env["HPCNB_SLURM"] == "local"
    assert env["JUPYTER_CONFIG_PATH"] == str(course_lab.STUDENT_CONFIG)
    assert "JUPYTER_CONFIG_PATH" not in course_lab.lab_env("instructor", {"PATH": "/usr/bin"})
    monkeypatch.setenv("HPCNB_SLURM", "real")
    assert str(local_bin_dir()) not in course_lab.lab_env("student", {"PATH": "/usr/bin"})["PATH"]
    monkeypatch.setenv("HPCNB_SLURM", "nonsense")
    with pytest.raises(ValueError, match="HPCNB_SLURM='nonsense' is not valid"):
        course_lab.lab_env("student")


def test_student_config_disables_nbgrader_instructor_parts() -> None:
    page = json.loads((course_lab.STUDENT_CONFIG / "labconfig/page_config.json").read_text())
    assert set(INSTRUCTOR_PLUGINS) <= set(page["disabledExtensions"])
    assert "@jupyter/nbgrader:validate-assignment" not in page["disabledExtensions"]  # Validate stays
    server = json.loads((course_lab.STUDENT_CONFIG / "jupyter_server_config.json").read_text())
    off = server["ServerApp"]["jpserver_extensions"]
    assert off["nbgrader.server_extensions.formgrader"] is False
    assert "nbgrader.server_extensions.validate_assignment" not in off


def test_terminal_rcfile_puts_the_course_first(tmp_path: Path) -> None:
    """Whatever ~/.bashrc does to PATH, the terminal's bash ends with the course's folders first."""
    (tmp_path / ".bashrc").write_text('export PATH=/usr/bin:/bin\nalias ll="ls -l"\n')
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", course_lab.PATH_VARIABLE: "/course/bin:/slurm/bin"}
    res = subprocess.run(["bash", "--rcfile", str(course_lab.BASHRC), "-i", "-c", 'echo "$PATH"; alias ll'],
                         env=env, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert res.stdout.splitlines()[0].startswith("/course/bin:/slurm/bin:/usr/bin"), res.stdout + res.stderr
    assert "ls -l" in res.stdout  # the user's own rc file ran


# ---- in a browser ----------------------------------------------------------------------------------

@contextlib.contextmanager
def served_course(base: Path, *assignments: str):
    """The course (START.md, notebooks/, exercises/) copied to ``base`` and served by `make lab`'s own
    command with these make variables, on its own local Slurm, from a student's shell: the venv not
    activated, the local Slurm's commands not on PATH, the machine's /usr/bin/squeue where there is one."""
    from test_browser import _free_port, _install_course_kernel, serve_lab

    pytest.importorskip("jupyterlab")
    if _install_course_kernel() != "hpcnb":
        pytest.skip("the course kernel could not be installed")
    course = base / "course"
    for folder in ("notebooks", "exercises"):
        shutil.copytree(ROOT / folder, course / folder, ignore=shutil.ignore_patterns("work", ".ipynb_checkpoints"))
    shutil.copy(START, course / START.name)
    firsts = (str(local_bin_dir()), str(Path(sys.executable).parent))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_", "HPCNB_", "SLURM_", "SBATCH_"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p and p not in firsts)
    env.update(HPCNB_STATE_DIR=str(base / "slurm"), JUPYTER_CONFIG_DIR=str(base / "config"),
               JUPYTER_RUNTIME_DIR=str(base / "runtime"))
    settings = base / "config" / "lab" / "user-settings" / "@jupyterlab"
    (settings / "apputils-extension").mkdir(parents=True)
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    (settings / "terminal-extension").mkdir()  # the terminal's text in the page (xterm's accessibility tree)
    (settings / "terminal-extension" / "plugin.jupyterlab-settings").write_text(json.dumps({"screenReaderMode": True}))
    port, token = _free_port(), secrets.token_hex(16)
    command = _make_lab_command(f"VENV={Path(sys.executable).parent.parent}", f"PORT={port}", *assignments) + (
        f" -- --no-browser --IdentityProvider.token={token} --ServerApp.port_retries=0 --LabApp.news_url=None"
        " --LabApp.expose_app_in_browser=True --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")
    try:
        with serve_lab(["bash", "-c", command], env, course, base / "jupyter.log", port, token) as url:
            yield {"url": url, "token": token, "course": course, "env": env, "state": base / "slurm"}
    finally:
        subprocess.run([sys.executable, "-m", "hpcnb.cli", "slurm", "stop"], env={**env, "HPCNB_SLURM": "local"},
                       capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def student_lab(tmp_path_factory: pytest.TempPathFactory):
    """`make lab` as a student gets it, with a job in its local Slurm."""
    with served_course(tmp_path_factory.mktemp("student-lab")) as lab:
        local = {**lab["env"], "HPCNB_SLURM": "local"}
        bin_dir = str(local_bin_dir())
        job = subprocess.run([f"{bin_dir}/sbatch", "--parsable", "-J", "labprobe", "-t", "5", "--wrap", "sleep 300"],
                             env=local, capture_output=True, text=True, timeout=120)
        assert job.returncode == 0, job.stderr
        try:
            yield {**lab, "bin": bin_dir, "job": job.stdout.strip()}
        finally:
            subprocess.run([f"{bin_dir}/scancel", job.stdout.strip()], env=local, capture_output=True, timeout=60)


def _page_config(lab) -> dict:
    """The page config the Lab's page carries (its disabled extensions...)."""
    req = urllib.request.Request(f"{lab['url']}/lab", headers={"Authorization": f"token {lab['token']}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        html = resp.read().decode()
    return json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                html, re.S).group(1))


def _status(lab, path: str) -> int:
    req = urllib.request.Request(f"{lab['url']}{path}", headers={"Authorization": f"token {lab['token']}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_student_lab_server(student_lab) -> None:
    from test_browser import _get

    specs = _get(f"{student_lab['url']}/api/kernelspecs", student_lab["token"])
    assert sorted(specs["kernelspecs"]) == ["hpcnb"] and specs["default"] == "hpcnb"
    assert _status(student_lab, "/formgrader") == 404  # nbgrader's formgrader is not served
    assert set(INSTRUCTOR_PLUGINS) <= set(_page_config(student_lab)["disabledExtensions"])


def test_instructor_lab_keeps_nbgrader(tmp_path: Path) -> None:
    with served_course(tmp_path, "ROLE=instructor") as lab:
        assert _status(lab, "/formgrader") != 404
        disabled = _page_config(lab)["disabledExtensions"]
    assert not set(INSTRUCTOR_PLUGINS) & set(disabled), disabled


@pytest.mark.browser
def test_terminal_in_the_lab_is_on_the_course_slurm(student_lab) -> None:
    from playwright.sync_api import expect, sync_playwright

    from test_browser import ARTIFACTS, CHROMIUM, _browser_page

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    with sync_playwright() as p:
        browser, page = _browser_page(p, student_lab, path="/")
        try:
            current = page.locator(".lm-TabBar-tab.lm-mod-current[data-type='document-title']")
            expect(current).to_contain_text("START.md")  # the landing page, opened first, rendered
            start = page.locator(".jp-MainAreaWidget:not(.lm-mod-hidden) .jp-RenderedMarkdown")
            expect(start.locator("a[href*='01-cluster-anatomy.ipynb']").first).to_be_visible()
            # no instructor menus: nbgrader's Formgrader, Create Assignment, course list are not loaded
            expect(page.locator("#jp-mainmenu-nbgrader")).to_have_count(0)
            plugins = page.evaluate("ids => ids.map(id => window.jupyterapp.hasPlugin(id))",
                                    [*INSTRUCTOR_PLUGINS, "@jupyter/nbgrader:validate-assignment"])
            assert plugins == [False] * len(INSTRUCTOR_PLUGINS) + [True], plugins
            page.evaluate("() => window.jupyterapp.commands.execute('terminal:create-new')")
            terminal = page.locator(".jp-Terminal:not(.lm-mod-hidden)")
            expect(terminal.locator(".xterm-screen")).to_be_visible(timeout=60_000)
            terminal.locator(".xterm-screen").click()
            page.keyboard.type("hpcnb slurm status | head -1; echo \"status-rc=${PIPESTATUS[*]}\"; "
                               "which squeue; squeue; echo squeue-rc=$?\n")
            screen = terminal.locator(".xterm-accessibility-tree")
            expect(screen).to_contain_text("squeue-rc=0", timeout=120_000)
            text = screen.inner_text()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "browser-lab-terminal.png"))
            # a lesson stored with `python3` opens on the one kernel offered, the course's, without asking
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:open', "
                          "{path: 'notebooks/01-cluster-anatomy.ipynb'})")
            lesson = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
            expect(lesson.locator(".jp-Toolbar-kernelName")).to_contain_text("hpcnb", timeout=120_000)
            expect(page.locator(".jp-Dialog")).to_have_count(0)
        finally:
            browser.close()
    assert f"state: {student_lab['state']}" in text, text  # `hpcnb slurm status`'s first line: this Lab's Slurm
    assert re.search(r"status-rc=(141|0) 0", text), text  # ended quietly when head left
    assert "BrokenPipe" not in text and "Traceback" not in text, text
    assert f"{student_lab['bin']}/squeue" in text, text  # the local Slurm's, not /usr/bin/squeue
    assert re.search(r"JOBID\s+PARTITION\s+NAME\s+USER\s+ST", text), text
    assert re.search(rf"\b{student_lab['job']}\s+\S+\s+labprobe\b", text), text  # the local cluster's job
