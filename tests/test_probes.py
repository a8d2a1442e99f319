"""hpcnb.course.probes: a student's job script run by bash on a pretend node, for the hidden tests (issue 38)."""
from __future__ import annotations

import tarfile
from pathlib import Path

from hpcnb.course import probes


def _submit_dir(tmp_path: Path) -> Path:
    here = tmp_path / "submit"
    here.mkdir()
    return here


def test_the_batch_shell_has_slurms_variables_and_srun_runs_the_step_once(tmp_path: Path) -> None:
    here = _submit_dir(tmp_path)
    script = ("#!/bin/bash\n#SBATCH --nodes=2\n"
              'srun --ntasks=$SLURM_NNODES --ntasks-per-node 1 -c 2 bash -c \'echo "$SLURM_PROCID $SLURMD_NODENAME" >> steps.txt\'\n'
              'echo "$SLURM_JOB_ID ${SLURM_TMPDIR:-none} $SLURM_SUBMIT_DIR" > batch.txt\n')
    ran = probes.run_batch_script(script, here)
    assert ran.returncode == 0, ran.stderr
    assert (here / "steps.txt").read_text() == f"0 {probes.NODE}\n"
    assert (here / "batch.txt").read_text() == f"{probes.JOB_ID} none {here}\n"


def test_tmp_stands_for_the_nodes_own_and_slurm_tmpdir_is_the_sites(tmp_path: Path) -> None:
    here, node_tmp, site_tmp = _submit_dir(tmp_path), tmp_path / "node-tmp", tmp_path / "site-tmp"
    ran = probes.run_batch_script('mkdir /tmp/data && touch "$SLURM_TMPDIR/mine"', here, tmp=node_tmp,
                                  slurm_tmpdir=site_tmp)
    assert ran.returncode == 0, ran.stderr
    assert (node_tmp / "data").is_dir() and (site_tmp / "mine").exists()


def test_the_tar_stand_in_says_where_each_extraction_went(tmp_path: Path) -> None:
    here = _submit_dir(tmp_path)
    (here / "x.txt").write_text("x")
    with tarfile.open(here / "d.tar", "w") as tar:
        tar.add(here / "x.txt", arcname="x.txt")
    script = ("mkdir -p a b c && tar -cf again.tar x.txt && tar -xf d.tar -C a && tar --extract --file=d.tar --directory=b\n"
              "cd c && tar xf ../d.tar\n")
    ran = probes.run_batch_script(script, here, stubs={"tar": probes.TAR})
    assert ran.returncode == 0, ran.stderr
    assert probes.unpacked_into(here) == [here / "a", here / "b", here / "c"]
    assert all((here / d / "x.txt").exists() for d in "abc")


def test_a_script_that_never_ends_is_stopped_and_says_so(tmp_path: Path) -> None:
    ran = probes.run_batch_script("while true; do :; done", _submit_dir(tmp_path), timeout=1)
    assert ran.returncode == 124 and "did not end within 1 s" in ran.stderr
