"""Lesson helpers: what the course's notebooks (and the scripts their jobs run) use beside the job
API, one module per topic, each naming its lessons in its docstring: ``checkpoint`` (12),
``distributed`` (8, 10, 11, 13), ``markdown`` (1, 2, 6, 7, 11: tables), ``precision`` (7),
``scaling`` (11), ``softenv`` (3b), ``spread`` (2, 6, 8, 10), ``storage`` (2), ``stragglers`` (13),
``training`` (8, 9, 10), ``tuning`` (6, 7), ``tunnel`` (5), ``ownjob`` (8: the notebook's own job).
This module holds what every notebook needs:

* :func:`setup` — the first cell of every lesson and exercise notebook;
* :func:`work_folder` — the folder a lesson's files and jobs work in;
* :mod:`hpcnb.lessons.jobscripts` — ``%%jobscript``: a lesson's job script with what the user's
  site needs (shebang, partition, project, GPU request), from the site profile.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["setup", "work_folder"]


def setup(workdir: str | None = None) -> Path | None:
    """Every lesson's first cell (lessons 1-15 and their exercises): ready this kernel for ``!sbatch``.

    * the chosen Slurm's commands (``hpcnb which-slurm``) come first on PATH, in any kernel; on
      the local Slurm its node names resolve in shell commands as on a login node;
    * then this kernel's Python, so that ``python`` (and ``torchrun``, ``horovodrun``) in a job
      script is this environment's — as ``source .venv/bin/activate`` in the script would be;
    * inside a Slurm job (a portal's notebook server is one) the job's ``SLURM_*`` variables
      leave this kernel, saying so once: ``srun`` in a cell then asks for an allocation of its
      own, as on a login node, instead of running as a step of the server's job, and new jobs
      do not inherit the server's memory or CPU settings (:mod:`hpcnb.lessons.ownjob` keeps the
      job's id and node for steps run into it on purpose, lesson 8);
    * the site's project and required directives for every job (``SBATCH_ACCOUNT``...,
      :func:`hpcnb.lessons.jobscripts.site_environment`), where the user has not set them;
    * ``%%jobscript FILE [--gpus-per-node N]`` writes a cell as a job script for the site in
      ``HPCNB_PROFILE`` (:mod:`hpcnb.lessons.jobscripts`);
    * with ``workdir``: :func:`work_folder` (returned).
    """
    import hpcnb
    from hpcnb.backend import check_settings, login_env, which_slurm, without_job_variables
    from hpcnb.lessons.jobscripts import register_magic, site_environment
    from hpcnb.lessons.ownjob import remember_server_job

    check_settings()  # a bad HPCNB_* value: one clear SettingError before anything changes
    remember_server_job(os.environ)  # the server's job, for lesson 8's steps into it (hpcnb.lessons.ownjob)
    env = without_job_variables(login_env())
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    os.environ.clear()
    os.environ.update(env)
    site = {k: v for k, v in site_environment().items() if k not in env}
    os.environ.update(site)
    register_magic()
    print(f"hpcnb {hpcnb.__version__} talks to the {which_slurm()} Slurm; sbatch is {shutil.which('sbatch')}; "
          f"site profile: {os.environ.get('HPCNB_PROFILE') or 'local'}"
          + (f" (for every job: {', '.join(f'{k}={v}' for k, v in site.items() if k.startswith('SBATCH'))},"
             " and the same for salloc and srun)" if site else ""))
    return None if workdir is None else work_folder(workdir)


def work_folder(name: str) -> Path:
    """Every lesson: ``work/<name>`` next to the notebook, emptied, as the working directory (on a
    cluster: a shared filesystem, so the compute nodes see it too). Re-running starts clean."""
    here = Path.cwd()
    work = here / "work" / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chdir(work)
    print("working in", work.relative_to(here))
    return work
