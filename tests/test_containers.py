"""Containers for real: job steps that run in the course's Charliecloud image (ci/build-container.sh:
Debian 12, python3, torch CPU) with ``srun ... ch-run IMAGE -- CMD`` on the local Slurm."""
from __future__ import annotations

import os
import pwd
import re
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, Lane, run

from hpcnb.localslurm import apart

BUILD = ROOT / "ci" / "build-container.sh"
DDP = ROOT / "hpcnb" / "scripts" / "container_ddp.py"
# the local Slurm preloads nss_wrapper so that node names resolve; the image has no such library
CH_RUN = "ch-run --unset-env=LD_PRELOAD"


@pytest.fixture(scope="module")
def image() -> Path:
    """The built image (HPCNB_CONTAINER_IMAGE, else where ci/build-container.sh puts it)."""
    if not shutil.which("ch-run"):
        pytest.skip("ch-run not found: install Charliecloud (ci/install-system-deps.sh)")
    if os.environ.get("HPCNB_CONTAINER_IMAGE"):
        path = Path(os.environ["HPCNB_CONTAINER_IMAGE"])
        if not (path / "usr" / "bin" / "python3").exists():
            pytest.fail(f"HPCNB_CONTAINER_IMAGE={path} is not an image with python3 in it")
        return path
    found = run(["bash", str(BUILD), "--path"], timeout=30)
    path = Path(found.stdout.strip())
    if found.returncode != 0:
        pytest.skip(f"the container image {path} is not built: run `sudo ci/build-container.sh` (a few minutes)")
    return path


def sbatch(lane: Lane, workdir: Path, script: str, *options: str) -> str:
    """Run ``script`` as a batch job on ``lane``'s Slurm, wait for it, and return its output.
    ch-run needs ``$USER`` (``error: $USER not set``), which a bare CI container may lack."""
    user = os.environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name
    (workdir / "job.sh").write_text("#!/bin/bash\nset -euo pipefail\n" + script)
    done = lane.run(["sbatch", "--wait", "-o", "out.txt", *options, "job.sh"], cwd=workdir,
                    env={"USER": user}, timeout=300)
    out = (workdir / "out.txt").read_text() if (workdir / "out.txt").exists() else ""
    assert done.returncode == 0, done.stderr + out
    return out


def test_ddp_over_two_nodes_runs_inside_the_image(lane: Lane, workdir: Path, image: Path) -> None:
    shutil.copy(DDP, workdir / "ddp.py")
    out = sbatch(lane, workdir, "first=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | awk 'NR == 1')\n"
                          # resolved here, as lesson 3b's job does: the image may not know the node names
                          "export MASTER_ADDR=$(getent ahostsv4 \"$first\" | awk 'NR == 1 {print $1}')\n"
                          "export MASTER_PORT=$((16000 + SLURM_JOB_ID % 16000))\n"
                          f"srun -N2 -n2 -l {CH_RUN} -b \"$PWD:/scratch\" -c /scratch {image} -- python3 ddp.py\n",
                 "-N2", "-n2")
    ranks = sorted(line for line in out.splitlines() if re.match(r"\d+: rank=", line))
    assert len(ranks) == 2, out
    hosts = ["node1", "node2"] if apart.mode() == "apart" else [os.uname().nodename] * 2
    for n, line in enumerate(ranks):
        assert line.startswith(f"{n}: rank={n}/2 host={hosts[n]} torch=2.13.0+cpu "), out
        assert "os='Debian GNU/Linux 12 (bookworm)' python=/usr/bin/python3 allreduce=3 " in line, out
    assert ranks[0].split("weights=")[1] == ranks[1].split("weights=")[1], out  # one model, kept in step


def test_slurm_tmpdir_bound_into_the_image_is_written_through(lane: Lane, workdir: Path, image: Path) -> None:
    inside = ("echo rank $SLURM_PROCID on $(hostname) > /localscratch/hello.txt; "
              "touch /etc/written 2>/dev/null && echo image writable || echo image read-only")
    out = sbatch(lane, workdir, f"srun -N2 -n2 -l bash -c '{CH_RUN} -b \"$SLURM_TMPDIR:/localscratch\" {image} -- "
                          f"sh -c \"{inside}\" && echo outside: $(cat \"$SLURM_TMPDIR/hello.txt\")'\n",
                 "-N2", "-n2")
    lines = sorted(line for line in out.splitlines() if re.match(r"\d+: ", line))
    hosts = ["node1", "node2"] if apart.mode() == "apart" else [os.uname().nodename] * 2
    assert lines == ["0: image read-only", f"0: outside: rank 0 on {hosts[0]}",
                     "1: image read-only", f"1: outside: rank 1 on {hosts[1]}"], out


def test_lesson_helpers_find_the_image_or_say_how_to_build_it(image: Path, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    from hpcnb.lessons import containers

    monkeypatch.setenv(containers.IMAGE_ENV, str(image))
    assert containers.image() == image.resolve()
    assert containers.describe().startswith(f"image {image.resolve()} (Debian GNU/Linux 12 (bookworm), "
                                            "torch 2.13.0+cpu), run by ch-run 0.")
    monkeypatch.setenv(containers.IMAGE_ENV, str(tmp_path))  # not an image: no python3 in it
    assert containers.image() is None
    assert containers.describe() == f"ch-run {containers.runtime()}, but no course image: build it with " \
                                    + containers.BUILD_HINT
