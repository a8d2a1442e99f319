"""hpcnb.lessons.softenv (lesson 3b): Lmod modulefiles over the course's environment, and wheels for a wheelhouse."""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hpcnb.lessons.softenv import CACHE_VARIABLES, build_wheel, modulefile, without_course_environment, write_course_modules

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")  # Debian's lmod (ci/install-system-deps.sh)
HELLO = {"jobhello.py": "def hello():\n    return 'hello'\n"}


def test_modulefile_quotes_every_value_for_lua() -> None:
    text = modulefile('say "hi"\nto C:\\', "a test", depends_on=["python/3.11"],
                      prepend_path={"PATH": "/opt/x y/bin"}, setenv={"TORCH_HOME": "/s/torch"})
    assert text.splitlines() == [
        'help("say \\"hi\\"\\nto C:\\\\")',
        'whatis("Description: a test")',
        'depends_on("python/3.11")',
        'prepend_path("PATH", "/opt/x y/bin")',
        'setenv("TORCH_HOME", "/s/torch")',
    ]


def test_course_modules_point_at_the_given_environment(tmp_path: Path) -> None:
    paths = write_course_modules(tmp_path / "mf", tmp_path / "scratch", bin_dir="/envs/course/bin",
                                 python_version="3.11.2", torch_version="2.13.0+cpu")
    assert paths == [tmp_path / "mf/python/3.11.lua", tmp_path / "mf/pytorch/2.13.lua"]
    python, torch = (p.read_text() for p in paths)
    assert 'prepend_path("PATH", "/envs/course/bin")' in python
    assert 'depends_on("python/3.11")' in torch
    for var, sub in CACHE_VARIABLES.items():
        assert f'setenv("{var}", "{tmp_path / "scratch" / sub}")' in torch
    assert torch.count("setenv(") == len(CACHE_VARIABLES)  # every cache it sets is below scratch


def test_course_modules_default_to_this_kernel(tmp_path: Path) -> None:
    python = write_course_modules(tmp_path / "mf", tmp_path / "c", torch_version="2.13")[0]
    assert python.name == f"{sys.version_info[0]}.{sys.version_info[1]}.lua"
    assert f'prepend_path("PATH", "{Path(sys.executable).parent}")' in python.read_text()


@pytest.mark.parametrize("kwargs, message", [
    ({"root": "mf"}, "absolute"),
    ({"cache": "cache"}, "absolute"),
    ({"torch_version": "nightly"}, "MAJOR.MINOR"),
])
def test_course_modules_refuse_what_a_job_cannot_use(tmp_path: Path, kwargs: dict, message: str) -> None:
    args = {"root": tmp_path / "mf", "cache": tmp_path / "c", "torch_version": "2.13", **kwargs}
    with pytest.raises(ValueError, match=message):
        write_course_modules(args.pop("root"), args.pop("cache"), **args)


@pytest.mark.skipif(not LMOD_INIT.exists(), reason="Debian's lmod is not installed (ci/install-system-deps.sh)")
def test_lmod_loads_the_tree_in_a_clean_shell(tmp_path: Path) -> None:
    """Real Lmod: `module load pytorch` loads python first (depends_on), puts its bin first on PATH,
    sets the caches; `module purge` takes all of it away again."""
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\necho fake\n")
    (bin_dir / "python").chmod(0o755)
    write_course_modules(tmp_path / "mf", tmp_path / "scratch", bin_dir=bin_dir, python_version="3.11",
                         torch_version="2.13")
    script = (f"source {LMOD_INIT}; module use {tmp_path / 'mf'}; module load pytorch; module -t list 2>&1;"
              " command -v python; echo \"TORCH_HOME=$TORCH_HOME\"; module purge;"
              " echo \"after purge: $(command -v python || echo none) TORCH_HOME=${TORCH_HOME-unset}\"")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "USER": "nobody"}
    out = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["python/3.11", "pytorch/2.13"], out.stdout
    assert lines[2] == str(bin_dir / "python")
    assert lines[3] == f"TORCH_HOME={tmp_path / 'scratch' / 'torch'}"
    assert lines[4] == "after purge: none TORCH_HOME=unset"


def _wheel_files(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as whl:
        return {name: whl.read(name) for name in whl.namelist()}


def test_wheel_holds_metadata_and_a_true_record(tmp_path: Path) -> None:
    path = build_wheel(tmp_path / "wh", "job-hello", "1.0", HELLO, summary="a greeting")
    assert path == tmp_path / "wh" / "job_hello-1.0-py3-none-any.whl"
    files = _wheel_files(path)
    info = "job_hello-1.0.dist-info"
    assert sorted(files) == sorted(["jobhello.py", f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"])
    assert b"Name: job-hello\nVersion: 1.0\nSummary: a greeting\n" in files[f"{info}/METADATA"]
    assert b"Tag: py3-none-any\n" in files[f"{info}/WHEEL"]
    rows = list(csv.reader(io.StringIO(files[f"{info}/RECORD"].decode())))
    assert rows[-1] == [f"{info}/RECORD", "", ""]
    for name, digest, size in rows[:-1]:
        data = files[name]
        want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={want}", len(data)), name


def test_wheel_is_the_same_bytes_every_time(tmp_path: Path) -> None:
    first = build_wheel(tmp_path / "a", "jobhello", "1.0", HELLO).read_bytes()
    assert build_wheel(tmp_path / "b", "jobhello", "1.0", HELLO).read_bytes() == first


@pytest.mark.parametrize("name, version, modules, message", [
    ("job hello", "1.0", HELLO, "package name"),
    ("jobhello", "1.0/../x", HELLO, "version"),
    ("jobhello", "1.0", {}, "at least one module"),
    ("jobhello", "1.0", {"../evil.py": ""}, "relative path"),
    ("jobhello", "1.0", {"/abs.py": ""}, "relative path"),
    ("jobhello", "1.0", {"notes.txt": ""}, "ending in .py"),
])
def test_wheel_refuses_bad_input(tmp_path: Path, name: str, version: str, modules: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_wheel(tmp_path, name, version, modules)
    assert not list(tmp_path.iterdir())


def test_pip_installs_the_wheel_without_an_index(tmp_path: Path) -> None:
    """What the lesson's job does on each node: pip install --no-index --find-links=WHEELHOUSE."""
    build_wheel(tmp_path / "wh", "jobhello", "1.0", HELLO)
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--no-index", f"--find-links={tmp_path / 'wh'}", f"--target={target}", "jobhello==1.0"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = subprocess.run([sys.executable, "-c", "import jobhello; print(jobhello.hello())"],
                         env={**env, "PYTHONPATH": str(target)}, capture_output=True, text=True, timeout=60)
    assert out.stdout == "hello\n", out.stderr
    assert (target / "jobhello-1.0.dist-info" / "RECORD").exists()


def test_without_course_environment_drops_the_kernel_and_lmod() -> None:
    env = {"PATH": "/venv/bin:/usr/local/bin:/venv/bin/:/usr/bin", "VIRTUAL_ENV": "/venv", "HOME": "/home/a",
           "BASH_FUNC_module%%": "() {  eval ...", "BASH_FUNC_ml%%": "() { ...", "BASH_ENV": "/usr/share/lmod/init",
           "MODULEPATH": "/m", "LMOD_CMD": "/lmod", "LOADEDMODULES": "python/3.11", "_LMFILES_": "/m/python",
           "HPCNB_STATE_DIR": "/state", "MODULEPATH_ROOT": "/r"}
    assert without_course_environment(env, "/venv/bin") == {
        "PATH": "/usr/local/bin:/usr/bin", "HOME": "/home/a", "HPCNB_STATE_DIR": "/state"}
    assert without_course_environment({"PATH": f"{Path(sys.executable).parent}:/bin"}) == {"PATH": "/bin"}

