"""A lesson's job script, made right for the user's site (every lesson that writes one).

A lesson writes the part of a script that is the same everywhere (job name, nodes, tasks, the
commands); the site's profile adds what differs from site to site, as its guide says:

* the shebang (``#!/bin/bash -l`` on Piz Daint, so that ``module`` works);
* the partition, where the guide names one: the default one, or one whose nodes have GPUs (a GPU
  job) or have none (a CPU job at a site whose default partition is for GPUs, as Stability's);
* the project: ``--account=def-<PI>`` (Narval), ``--comment=<project>`` (Stability)...;
* the directives the site requires (``--constraint=gpu`` on Piz Daint);
* the GPUs, in the site's form (``--gres=gpu:N``, ``--gpus-per-node=V100:N``, ``--gpus=N`` for the
  whole job, only ``--constraint=gpu`` on Piz Daint) and no more per node than its nodes have;
* where the site's jobs start in a login shell (which resets PATH), a line that activates the
  course's environment, unless the script loads its own (``module``, ``source``, ``conda``).

In a script, ``{per_node}`` is the processes per node that follow from that: one per GPU granted,
or the number asked for at a site without GPUs (the training then runs on CPUs).

In a notebook, after ``hpcnb.setup()``::

    %%jobscript ddp.sh --gpus-per-node 2
    #!/bin/bash
    #SBATCH --nodes=2
    #SBATCH --ntasks-per-node={per_node}
    srun python train.py

The site is ``HPCNB_PROFILE`` (default ``local``), the project ``HPCNB_PROJECT`` (default: the profile's
default account where it enforces accounts, e.g. a probed profile's, else ``demo``);
``HPCNB_RESERVATION`` (a workshop's reservation on the cluster) adds ``--reservation`` to every script
and, through Slurm's input variables, to every ``sbatch``, ``salloc`` and ``srun`` of the kernel.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from hpcnb.backend import reservation
from hpcnb.jobscript import parse_script
from hpcnb.sites import Partition, Profile, expand_hostlist, load_profile
from hpcnb.slurm.gpus import parse_gpus
from hpcnb.slurm.options import INPUT_VARIABLES, parse_args

__all__ = ["SiteScript", "for_site", "gpu_options", "gpus_per_node", "jobscript_magic", "partition_for",
           "processes_per_node", "site_environment", "write_jobscript"]

PROJECT_VAR = "HPCNB_PROJECT"
RESERVATION_INPUTS = ("SBATCH_RESERVATION", "SALLOC_RESERVATION", "SLURM_RESERVATION")  # sbatch, salloc, srun
UNNAMED_PARTITION = "default"  # a profile's stand-in where its guide names no partition: none is asked for
_PER_NODE = re.compile(r"(?<!\$)\{per_node\}")


@dataclass(frozen=True)
class SiteScript:
    """A job script for one site: its text, the lines the site added, and the layout it got."""

    text: str
    site: str
    added: tuple[str, ...]
    gpus_per_node: int  # GPUs each node gives the job (0: none asked, or a site without GPUs)
    per_node: int  # processes per node: one per GPU granted, else the number asked for


def _gpus_of(profile: Profile, partition: Partition) -> list[int]:
    hosts = set(expand_hostlist(partition.nodes)) if partition.nodes else None
    return [group.gpus for group in profile.nodes
            if hosts is None or hosts & set(group.hostnames)]


def partition_for(profile: Profile, gpus: bool) -> Partition:
    """The partition a job goes to: the default one if its nodes suit the job (some with GPUs for a
    GPU job, some without for a CPU job), else the first that is not preemptible and does."""
    def suits(part: Partition) -> bool:
        counts = _gpus_of(profile, part)
        return any(counts) if gpus else not all(counts)
    default = profile.default_partition()
    if suits(default):
        return default
    return next((p for p in profile.partitions if suits(p) and not p.preemptible), default)


def gpus_per_node(profile: Profile, wanted: int) -> int:
    """GPUs per node a job asking for ``wanted`` gets at this site: no more than its GPU nodes have
    (the emulated nodes, and the guide's figure per GPU type where it gives one)."""
    if wanted <= 0:
        return 0
    most = max(_gpus_of(profile, partition_for(profile, True)), default=0)
    known = [g.per_node for g in profile.gpu_types if g.per_node]
    if known:
        most = min(most, max(known))
    return min(wanted, most)


def _gpu_line(profile: Profile, per_node: int, nodes: int) -> str | None:
    """The site's GPU request (its ``gpu_request`` form) for ``per_node`` GPUs on each of ``nodes``."""
    if not profile.gpu_request:  # the guide does not say: Slurm's own per-node form
        return f"--gpus-per-node={per_node}"
    (spec, value), = parse_args(shlex.split(profile.gpu_request), "sbatch")[0]
    if spec.long == "constraint":
        return None  # the GPU node comes with its GPU; the constraint is a required directive
    count, typ = parse_gpus(value or "", f"--{spec.long}")
    prefix = f"{typ}:" if typ else ""
    if spec.long == "gres":
        return f"--gres=gpu:{prefix}{per_node}"
    total = per_node * nodes if spec.long == "gpus" else per_node
    return f"--{spec.long}={prefix}{total}"


def gpu_options(gpus: int, nodes: int = 1, profile: Profile | str | None = None) -> dict[str, str]:
    """The site's request for ``gpus`` GPUs per node as keyword arguments of :func:`hpcnb.jobs.submit`,
    e.g. ``{"gres": "gpu:2"}``: lessons 8-10 submit one script with several layouts."""
    site = profile if isinstance(profile, Profile) else load_profile(profile)
    granted = gpus_per_node(site, gpus)
    line = _gpu_line(site, granted, nodes) if granted else None
    if line is None:
        return {}
    option, _, value = line.removeprefix("--").partition("=")
    return {option.replace("-", "_"): value}


def _account_line(profile: Profile, project: str) -> str | None:
    if not profile.account_directive:
        return None
    option, _, example = profile.account_directive.partition("=")
    return f"{option}={re.sub(r'<[^>]*>', project, example) if '<' in example else project}"


def _project(site: Profile, project: str | None) -> str:
    """The project a job is charged to: the one given, else ``HPCNB_PROJECT``, else the site's default
    account where it enforces accounts (any other is refused there), else ``demo``."""
    return project or os.environ.get(PROJECT_VAR) or (site.accounts[0] if site.accounts else "demo")


def site_environment(profile: Profile | str | None = None, project: str | None = None) -> dict[str, str]:
    """The variables that give every job of this kernel the site's project and required directives,
    ``!sbatch --wrap`` and ``!salloc`` included: ``SBATCH_ACCOUNT``, ``SALLOC_ACCOUNT``,
    ``SLURM_ACCOUNT`` (srun), ``*_CONSTRAINT``... (``hpcnb.setup()``, every lesson). A form Slurm
    reads from no variable (Stability's ``--comment``) must be in each script."""
    site = profile if isinstance(profile, Profile) else load_profile(profile)
    project = _project(site, project)
    lines = [*site.required_directives, _account_line(site, project) if site.account_required else None]
    env: dict[str, str] = {}
    for line in filter(None, lines):
        option, _, value = line.removeprefix("--").partition("=")
        if value:
            env.update({variable: value for variables in INPUT_VARIABLES.values()
                        for variable, long in variables.items() if long == option})
    if name := reservation():
        env.update(dict.fromkeys(RESERVATION_INPUTS, name))
    return env


def _nodes(text: str) -> int:
    directive = parse_script(text).get("nodes")
    try:
        return int((directive.value or "1").split("-")[0]) if directive else 1
    except ValueError:
        return 1


def for_site(text: str, profile: Profile | str | None = None, *, gpus_per_node_wanted: int = 0,
             project: str | None = None) -> SiteScript:
    """``text`` with the site's shebang and request lines added after its first line (a directive
    the script already gives is kept and not added again), ``{per_node}`` filled in, and at a
    login-shell site this kernel's environment activated before the first command."""
    site = profile if isinstance(profile, Profile) else load_profile(profile)
    project = _project(site, project)
    granted = gpus_per_node(site, gpus_per_node_wanted)
    parsed = parse_script(text)
    partition = partition_for(site, granted > 0).name
    wanted_lines = [f"--partition={partition}" if partition != UNNAMED_PARTITION else None,
                    _account_line(site, project), *site.required_directives,
                    _gpu_line(site, granted, _nodes(text)) if granted else None,
                    f"--reservation={name}" if (name := reservation()) else None]
    added = [f"#SBATCH {line}" for line in wanted_lines
             if line and parsed.get(line.split("=")[0].lstrip("-")) is None]
    first, _, rest = text.partition("\n")
    if not first.startswith("#!"):
        first, rest = site.shebang, text
    login = site.shebang.endswith(" -l")  # the site's jobs start in a login shell: its PATH, not ours
    shebang = site.shebang if login else first
    per_node = granted or max(gpus_per_node_wanted, 1)
    body = _PER_NODE.sub(str(per_node), rest)
    text = "\n".join([shebang, *added, body])
    if login and not _LOADS_ITS_OWN.search(body):
        text, line = _with_environment(text)
        added.append(line)
    return SiteScript(text, site.name, tuple(added), granted, per_node)


_LOADS_ITS_OWN = re.compile(r"^\s*(module|ml|source|conda|\.)\s", re.M)


def _with_environment(script: str) -> tuple[str, str]:
    """``script`` with this kernel's environment activated after its #SBATCH lines (sbatch reads
    none after the first command), and that line."""
    prefix = Path(sys.prefix)
    line = (f'source "{prefix}/bin/activate"' if (prefix / "bin" / "activate").is_file()
            else f'export PATH="{prefix}/bin:$PATH"') + "   # the course's environment"
    lines = script.split("\n")
    first_command = next((i for i, text in enumerate(lines) if text.strip() and not text.startswith("#")),
                         len(lines))
    return "\n".join([*lines[:first_command], line, *lines[first_command:]]), line


def _magic_arguments(line: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="%%jobscript", add_help=False, allow_abbrev=False,
                                     exit_on_error=False)
    parser.add_argument("path")
    parser.add_argument("--gpus-per-node", type=int, default=0)
    try:
        return parser.parse_args(shlex.split(line))
    except (argparse.ArgumentError, SystemExit) as exc:
        raise ValueError(f"%%jobscript {line}: {exc}. Use: %%jobscript FILE [--gpus-per-node N]") from None


def write_jobscript(path: str | os.PathLike[str], text: str, *, gpus_per_node: int = 0) -> SiteScript:
    """Write ``text`` as a job script for this site (``HPCNB_PROFILE``), saying which lines the site
    added (lessons 5 and 12, whose scripts are built in Python; ``%%jobscript`` elsewhere)."""
    script = for_site(text, gpus_per_node_wanted=gpus_per_node)
    Path(path).write_text(script.text if script.text.endswith("\n") else script.text + "\n")
    added = "; ".join(line.removeprefix("#SBATCH ") for line in script.added) or "nothing"
    print(f"Writing {os.fspath(path)} (site {script.site} added: {added})")
    return script


def processes_per_node(gpus_per_node: int) -> int:
    """Processes per node for a job that asks for ``gpus_per_node`` GPUs at this site: ``{per_node}``
    in its script (lessons 8-10 and their parameters)."""
    return for_site("#!/bin/bash\n", gpus_per_node_wanted=gpus_per_node).per_node


def jobscript_magic(line: str, cell: str) -> None:
    """``%%jobscript FILE [--gpus-per-node N]``: :func:`write_jobscript` for a notebook cell."""
    args = _magic_arguments(line)
    write_jobscript(args.path, cell, gpus_per_node=args.gpus_per_node)


def register_magic() -> None:
    """Make ``%%jobscript`` available in this IPython kernel (a no-op outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.register_magic_function(jobscript_magic, magic_kind="cell", magic_name="jobscript")
