"""The data model of a site profile: the dataclasses a profile file becomes, the error every
problem raises, and which Slurm release a site runs (and which emulated one stands in for it).

The layout of a profile file and how it is read are described in ``hpcnb/sites/__init__.py``;
the reading itself is ``hpcnb/sites/reader.py``.
"""
from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from hpcnb.sites.values import expand_hostlist, parse_time_limit

#: The Slurm versions whose behaviour the local Slurm emulates (each proven against a real one).
SLURM_VERSIONS = ("22.05", "24.11")
#: Overrides a profile's ``slurm_version`` (read when the local Slurm's state is made).
SLURM_VERSION_ENV = "HPCNB_SLURM_VERSION"
#: A profile that does not say which Slurm its site runs gets the one most sites run today.
DEFAULT_SLURM_VERSION = "24.11"
HOME_KINDS = ("data", "venv", "cache")


_RELEASE_RE = re.compile(r"^(\d{2})\.(0[1-9]|1[0-2])$")
#: srun does not inherit --cpus-per-task from the job from this release (22.05) until that one (23.11).
_NO_CPUS_INHERITANCE = ((22, 5), (23, 11))


def parse_slurm_version(text: str) -> tuple[int, int]:
    """(year, month) of a Slurm major release written "YY.MM" ("24.05"); ValueError otherwise."""
    m = _RELEASE_RE.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r} is not a Slurm release: write its major version as YY.MM, e.g. \"24.05\"")
    return int(m.group(1)), int(m.group(2))


def emulated_version(version: str) -> str:
    """Which emulated Slurm (one of :data:`SLURM_VERSIONS`) stands in for a site's Slurm ``version``.

    The two behave most differently in what a job step gets: 22.05 to 23.02 are the only releases
    whose ``srun`` does not inherit ``--cpus-per-task`` from the job (22.05 stopped it, 23.11 brought
    it back), so those map to "22.05" and every other release, older or newer, to "24.11". The rest
    follows the chosen one: a 23.11 or 24.05 site gets 24.11's environment (``SLURM_TRES_PER_TASK``
    and ``--external-launcher`` arrived in 23.11, as the inheritance did) and 24.11's command outputs;
    a site older than 22.05 gets 24.11's step CPUs but variables and outputs newer than its own.
    ``hpcnb.localslurm`` and ``hpcnb.lint`` both decide with this function.
    """
    release = parse_slurm_version(version)
    first, after = _NO_CPUS_INHERITANCE
    return SLURM_VERSIONS[0] if first <= release < after else SLURM_VERSIONS[1]


class ProfileError(ValueError):
    """A site profile is missing, malformed, or asked for something it does not have.

    ``file``, ``field`` and ``fix`` are kept as attributes when known; the message always
    contains them in readable form.
    """

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 fix: str | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.field = field
        self.fix = fix



# --------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class StorageTier:
    """One storage area of a site (home, scratch, project, node-local disk, ...)."""

    name: str
    path: str  # may contain $HOME, $USER, $SCRATCH, $SLURM_TMPDIR; "" = the guide gives none
    quota_bytes: int | None
    quota_files: int | None
    backed_up: bool | None  # None = the guide does not say
    purged: str | None  # e.g. "files older than 60 days"; None = not purged / not stated
    node_local: bool
    use: str  # intended use, one sentence

    def expand(self, env: Mapping[str, str] | None = None) -> str:
        """The path with ``$VARS`` filled in from ``env`` (default: ``os.environ``).

        Unknown variables are left as they are (``$SLURM_TMPDIR`` outside a job).
        """
        return string.Template(self.path).safe_substitute(os.environ if env is None else env)


@dataclass(frozen=True)
class Partition:
    """A Slurm partition of the site, as the local Slurm emulates it."""

    name: str
    max_time: str  # Slurm time format "D-HH:MM:SS", "HH:MM:SS" or "INFINITE"
    default: bool = False
    nodes: str | None = None  # hostlist expression of the emulated nodes in it (None = all)
    preemptible: bool = False
    description: str = ""
    default_time: str | None = None  # DefaultTime=: a job without --time gets it (None: max_time)
    max_nodes: int | None = None  # MaxNodes=: a job asking for more nodes waits (None: UNLIMITED)

    @property
    def max_seconds(self) -> int | None:
        """``max_time`` in seconds; ``None`` for INFINITE."""
        return parse_time_limit(self.max_time)


@dataclass(frozen=True)
class NodeGroup:
    """Virtual nodes the LOCAL Slurm uses when it emulates this site (scaled down to a laptop)."""

    names: str  # hostlist expression, e.g. "node[1-2]"
    cpus: int
    memory_mb: int
    gpus: int = 0
    gpu_type: str | None = None
    features: tuple[str, ...] = ()

    @property
    def hostnames(self) -> tuple[str, ...]:
        """The individual node names of ``names``."""
        return tuple(expand_hostlist(self.names))


@dataclass(frozen=True)
class GpuType:
    """A GPU model the real site offers."""

    name: str
    memory_gb: float | None
    per_node: int | None
    note: str = ""


@dataclass(frozen=True)
class Rule:
    """A site rule in our own words, why it exists, and where the guide says it."""

    text: str
    why: str = ""
    source: str = ""


@dataclass(frozen=True)
class Profile:
    """Everything the course knows about one site, plus its local emulation shape."""

    name: str
    title: str
    source: str  # which guide
    login_hosts: tuple[str, ...]
    storage: tuple[StorageTier, ...]
    partitions: tuple[Partition, ...]
    nodes: tuple[NodeGroup, ...]  # local emulation shape
    gpu_types: tuple[GpuType, ...]
    gpu_request: str  # how this site asks for GPUs; "" = the guide does not say
    account_directive: str | None
    account_required: bool
    required_directives: tuple[str, ...]
    home_forbidden_for: tuple[str, ...]  # subset of ("data", "venv", "cache")
    rules: tuple[Rule, ...]
    modules: dict[str, str] = field(hash=False)  # purpose -> module load line
    jupyter: str  # where/how Jupyter runs, one or two sentences; "" = the guide does not say
    slurm_tmpdir: bool  # site provides $SLURM_TMPDIR (Alliance does; plain Slurm does not)
    shebang: str = "#!/bin/bash"  # a job script's first line there ("#!/bin/bash -l": a login shell, for `module`)
    def_mem_per_cpu_mb: int = 500
    kill_wait_s: int = 2
    cluster_name: str = "hpcnb"
    slurm_version: str = DEFAULT_SLURM_VERSION  # the site's Slurm release today, "YY.MM" (see emulated_version)
    guide_slurm_version: str | None = None  # the release the source guide was written for, where known and different
    notes: tuple[str, ...] = ()
    # AccountingStorageEnforce=associations: the accounts a user may run under (sacctmgr's associations),
    # the first the default a job without --account gets; () = no account rule
    accounts: tuple[str, ...] = ()

    def partition(self, name: str | None = None) -> Partition:
        """The partition called ``name``; the default partition when ``name`` is None."""
        if name is None:
            return self.default_partition()
        for part in self.partitions:
            if part.name == name:
                return part
        known = ", ".join(p.name for p in self.partitions)
        raise ProfileError(
            f"profile '{self.name}': field 'partitions': no partition named {name!r}. "
            f"Fix: use one of: {known}.", field="partitions", fix=f"use one of: {known}")

    def default_partition(self) -> Partition:
        """The one partition marked ``default = true``."""
        defaults = [p for p in self.partitions if p.default]
        if len(defaults) != 1:
            raise ProfileError(
                f"profile '{self.name}': field 'partitions.default': {len(defaults)} default "
                "partitions. Fix: mark exactly one partition with default = true.",
                field="partitions.default", fix="mark exactly one partition with default = true")
        return defaults[0]

    def tier(self, name: str) -> StorageTier:
        """The storage tier called ``name`` (e.g. "home", "scratch", "node-local")."""
        for tier in self.storage:
            if tier.name == name:
                return tier
        known = ", ".join(t.name for t in self.storage) or "(none: the guide gives no storage)"
        raise ProfileError(
            f"profile '{self.name}': field 'storage': no storage tier named {name!r}. "
            f"Fix: use one of: {known}.", field="storage", fix=f"use one of: {known}")



def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]
