"""The course's Open OnDemand interactive app (``ondemand/hpcnb-course``), run as OnDemand runs it.

OnDemand itself (a Rails dashboard) is not installed; this test does what it does for a batch_connect
app with the "basic" template (ood_core's ``lib/ood_core/batch_connect/template.rb`` and its Slurm
adapter, read at 86656b3): render ``submit.yml.erb`` and every ``template/*.erb`` with Ruby's ERB
(Debian's ``erb``, trim mode ``-``, the form's values as its variables) into a session folder, wrap
``before.sh``/``script.sh``/``after.sh`` in the template's job script (its bash helpers ``find_port``,
``create_passwd``, ``wait_until_port_used``; ``connection.yml`` written with host, port and password),
and submit it with ``sbatch --parsable -J ... -o output.log -t ... --export NONE <native args>``, the
script on standard input. It then reads ``connection.yml``, renders ``view.html.erb`` with it, logs in
to the server the way the view's form does (through OnDemand's ``/node/HOST/PORT/`` prefix) and finds
the course kernel and the exercises.

Run by ``make test-portal``, beside the portal test: ``HPCNB_PORTAL_TEST=local`` on the local Slurm,
``HPCNB_PORTAL_TEST=real`` on the real Slurm 22.05 (after ``ci/real-slurm.sh up``); needs Debian's ``ruby``
(``ci/portal.sh install`` installs it).
"""
from __future__ import annotations

import http.cookiejar
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "ondemand" / "hpcnb-course"
VARIANT = os.environ.get("HPCNB_PORTAL_TEST", "")
REAL = VARIANT == "real"
START_S = 180  # the server's job started and JupyterLab answering (a real Slurm starts a job within seconds)

if VARIANT not in ("local", "real"):
    pytest.skip("the OnDemand app test runs with `make test-portal` (HPCNB_PORTAL_TEST=local|real)",
                allow_module_level=True)
pytestmark = [pytest.mark.slow] + ([pytest.mark.realslurm] if REAL else [])

# ood_core's basic template: the helpers it defines and the order in which it runs the app's files
BASIC_TEMPLATE = r"""#!/bin/bash
cd {work_dir}
export host
export port
create_yml () {{
  echo "Generating connection YAML file..."
  (
    umask 077
    echo -e "host: $host\nport: $port\npassword: $password" > "connection.yml"
  )
}}
clean_up () {{
  echo "Cleaning up..."
  [[ ${{SCRIPT_PID}} ]] && pkill -P ${{SCRIPT_PID}} || :
  pkill -P $$
  exit ${{1:-0}}
}}
port_used () {{
  local port="${{1#*:}}"
  local host=$((expr "${{1}}" : '\(.*\):' || echo "localhost") | awk 'END{{print $NF}}')
  python3 -c "import socket; socket.socket().connect(('$host',$port))" >/dev/null 2>&1
}}
find_port () {{
  local host="${{1:-localhost}}"
  for port in $(shuf -i 2000-65535 -n 100); do
    port_used "${{host}}:${{port}}" || {{ echo "${{port}}"; return 0; }}
  done
  echo "error: failed to find available port" >&2
  return 1
}}
wait_until_port_used () {{
  local port="${{1}}"
  local time="${{2:-30}}"
  for ((i=1; i<=time*2; i++)); do
    port_used "${{port}}" && return 0
    sleep 0.5
  done
  return 1
}}
create_passwd () (
  set +o pipefail
  tr -cd 'a-zA-Z0-9' < /dev/urandom 2> /dev/null | head -c${{1:-8}}
)
host=$(hostname)
[[ -e "before.sh" ]] && source "before.sh"
echo "Script starting..."
"./script.sh" &
SCRIPT_PID=$!
[[ -e "after.sh" ]] && source "after.sh"
create_yml
wait ${{SCRIPT_PID}} || clean_up 1
clean_up
"""


def erb(path: Path, values: dict[str, str]) -> str:
    """Render an ERB file as OnDemand does (trim mode '-'), the values as its variables."""
    done = subprocess.run(["erb", "-T", "-", *(f"{k}={v}" for k, v in values.items()), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"erb {path.name}: {done.stderr}"
    return done.stdout


def stage(values: dict[str, str], session: Path) -> list[str]:
    """The session folder as OnDemand stages it; returns the native sbatch arguments."""
    for source in (APP / "template").iterdir():
        target = session / source.name.removesuffix(".erb")
        target.write_text(erb(source, values) if source.suffix == ".erb" else source.read_text())
        target.chmod(0o755 if target.name == "script.sh" else 0o644)
    submit = yaml.safe_load(erb(APP / "submit.yml.erb", values))
    assert submit["batch_connect"]["template"] == "basic"
    return [str(arg) for arg in submit["script"]["native"]]


def slurm_env(tmp_path: Path) -> dict[str, str]:
    if REAL:
        bin_dir = subprocess.run(["bash", str(ROOT / "ci" / "real-slurm.sh"), "bin", "22.05"], capture_output=True,
                                 text=True, timeout=30).stdout.strip()
        return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HPCNB_SLURM": "real"}
    from hpcnb.backend import local_bin_dir, login_env

    # this test is OnDemand's web server on the login node: the node names resolve as they do there
    return login_env({**os.environ, "PATH": f"{local_bin_dir()}:{os.environ['PATH']}", "HPCNB_SLURM": "local"})


def login_address(host: str, port: int, env: dict[str, str]) -> str:
    """``host``'s address as the login node resolves it, once its ``port`` answers there (the local
    Slurm's gateway takes up to a tenth of a second to see a new server on a node)."""
    code = ("import socket, sys, time\n"
            "address = socket.gethostbyname(sys.argv[1])\n"
            "for _ in range(100):\n"
            "    try:\n"
            "        socket.create_connection((address, int(sys.argv[2])), timeout=10).close(); break\n"
            "    except ConnectionRefusedError:\n"
            "        time.sleep(0.1)\n"
            "print(address)\n")
    done = subprocess.run([sys.executable, "-c", code, host, str(port)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def wait_for_connection(session: Path, job: str, env: dict[str, str]) -> dict[str, str]:
    """connection.yml, once the job has written it (after.sh waits for the server first)."""
    seen = ""
    end = time.time() + START_S
    while time.time() < end:
        if (session / "connection.yml").exists():
            return {k: str(v) for k, v in yaml.safe_load((session / "connection.yml").read_text()).items()}
        seen = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %R"], env=env, capture_output=True,
                              text=True, timeout=30).stdout.strip()
        if not seen:
            break
        time.sleep(0.5)
    log = (session / "output.log").read_text() if (session / "output.log").exists() else "(no output.log)"
    raise AssertionError(f"no connection.yml after {START_S} s; job {job}: {seen or 'gone'}\n{log}")


def test_ondemand_app_starts_the_course_in_a_slurm_job(tmp_path: Path) -> None:
    session = tmp_path / "session"
    session.mkdir()
    values = {"num_cores": "1", "memory_mb": "2000", "course_dir": str(ROOT), "bc_num_hours": "1"}
    native = stage(values, session)
    assert native == ["--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--mem=2000M"]
    env = slurm_env(tmp_path)
    script = BASIC_TEMPLATE.format(work_dir=session)
    sbatch = ["sbatch", "-D", str(session), "-J", "sys/dashboard/sys/hpcnb-course", "-o", str(session / "output.log"),
              "-t", "01:00:00", "--export", "NONE", *native, "--parsable"]
    done = subprocess.run(sbatch, input=script, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    try:
        conn = wait_for_connection(session, job, env)
        assert set(conn) == {"host", "port", "password"} and len(conn["password"]) == 16
        view = erb(APP / "view.html.erb", conn)
        prefix = f"/node/{conn['host']}/{conn['port']}"
        assert f'action="{prefix}/login"' in view and f'value="{conn["password"]}"' in view
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        # OnDemand's web server reaches the node by its name
        base = f"http://{login_address(conn['host'], int(conn['port']), env)}:{conn['port']}{prefix}"
        print("OnDemand reaches the server at", base, file=sys.stderr)
        login = opener.open(urllib.request.Request(f"{base}/login", urllib.parse.urlencode(
            {"password": conn["password"]}).encode()), timeout=30)
        assert login.status == 200 and "/lab" in login.url, login.url  # logged in: redirected into JupyterLab
        kernels = json.load(opener.open(f"{base}/api/kernelspecs", timeout=30))
        assert "hpcnb" in kernels["kernelspecs"], sorted(kernels["kernelspecs"])
        exercises = json.load(opener.open(f"{base}/api/contents/exercises", timeout=30))
        assert any(item["name"].endswith("-exercises.ipynb") for item in exercises["content"])
        with pytest.raises(urllib.error.HTTPError):  # without the password, nothing
            urllib.request.urlopen(f"{base}/api/contents/exercises", timeout=30)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=60)
    end = time.time() + 60
    while time.time() < end and subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True,
                                               text=True, timeout=30).stdout.strip():
        time.sleep(0.5)
