"""Site profiles: what each cluster in the course looks like, and how the local Slurm emulates it.

A profile is a TOML file in this directory (``local.toml``, ``narval.toml``, ...). It records
facts taken from the course's source guides (login hosts, storage tiers and quotas, partitions,
GPU types, how to ask for GPUs and accounts, site rules, modules, how Jupyter runs) plus a tiny
``nodes`` section: the virtual nodes the embedded local Slurm uses when it emulates that site.
Where a guide is silent the field is left out (``None``) or empty, never guessed.

Files are validated when loaded; every problem raises :class:`ProfileError` whose message names
the file, the field and the fix::

    >>> from hpcnb.sites import load_profile, compare
    >>> p = load_profile("narval")
    >>> p.tier("scratch").purged
    'regular cleanup of files older than 60 days'
    >>> rows = compare(["narval", "ulysses"], "storage")

TOML layout: top-level keys plus ``[[storage]]``, ``[[partitions]]``, ``[[nodes]]``,
``[[gpu_types]]``, ``[[rules]]`` and ``[modules]``. TOML has no null: leave an optional key out
to mean "none / not given". Quotas may be integers or strings: bytes use binary units
(``"50G"`` = 50 * 2**30; K, M, G, T, P, optionally followed by ``B`` or ``iB``), file counts use
decimal units (``"500k"`` = 500_000, ``"1M"`` = 10**6). ``slurm_version`` is the Slurm release the
site runs ("24.05"; ``guide_slurm_version`` the guide's, where it differs); :func:`emulated_version`
says which of the local Slurm's versions stands in for it. A partition may give ``default_time``
(DefaultTime) and ``max_nodes`` (MaxNodes); ``accounts`` lists the accounts a user may run under
where the site enforces them (AccountingStorageEnforce), the default first: the local Slurm then
refuses any other ``--account``.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from hpcnb.sites.model import (
    DEFAULT_SLURM_VERSION, HOME_KINDS, SLURM_VERSION_ENV, SLURM_VERSIONS, GpuType, NodeGroup, Partition,
    Profile, ProfileError, Rule, StorageTier, emulated_version, parse_slurm_version,
)
from hpcnb.sites.reader import _build_profile, _Ctx
from hpcnb.sites.tables import compare
from hpcnb.sites.values import expand_hostlist, parse_bytes, parse_file_count, parse_time_limit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "ProfileError", "StorageTier", "Partition", "NodeGroup", "GpuType", "Rule", "Profile",
    "list_profiles", "load_profile", "compare",
    "parse_time_limit", "parse_bytes", "parse_file_count", "expand_hostlist",
    "SITES_DIR", "ENV_VAR", "SLURM_VERSIONS", "SLURM_VERSION_ENV", "DEFAULT_SLURM_VERSION",
    "parse_slurm_version", "emulated_version",
]

SITES_DIR = Path(__file__).resolve().parent
ENV_VAR = "HPCNB_PROFILE"


# --------------------------------------------------------------------------- public API

_CACHE: dict[tuple[str, int, int], Profile] = {}


def list_profiles() -> list[str]:
    """Names of the profiles shipped with hpcnb, sorted."""
    return sorted(p.stem for p in SITES_DIR.glob("*.toml"))


def _resolve(name_or_path: str | os.PathLike[str]) -> Path:
    text = os.fspath(name_or_path)
    looks_like_path = (isinstance(name_or_path, os.PathLike) or text.endswith(".toml")
                       or os.sep in text or "/" in text)
    if looks_like_path:
        path = Path(text).expanduser()
        if not path.is_file():
            raise ProfileError(f"{path}: field '(file)': profile file not found. "
                               "Fix: check the path, or pass a shipped profile name: "
                               f"{', '.join(list_profiles())}.", file=str(path), field="(file)")
        return path.resolve()
    path = SITES_DIR / f"{text}.toml"
    if not path.is_file():
        known = ", ".join(list_profiles())
        raise ProfileError(f"{path}: field '(name)': no site profile named {text!r}. "
                           f"Fix: use one of: {known}, or pass a path to a .toml file.",
                           file=str(path), field="(name)", fix=f"use one of: {known}")
    return path


def load_profile(name_or_path: str | os.PathLike[str] | None = None) -> Profile:
    """Load and validate a site profile by name ("narval") or path ("my_site.toml").

    With no argument the profile named by the ``HPCNB_PROFILE`` environment variable is used,
    and ``"local"`` when that is unset. Results are cached per file and reloaded when the file
    changes.
    """
    if name_or_path is None:
        name_or_path = os.environ.get(ENV_VAR) or "local"
    path = _resolve(name_or_path)
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    ctx = _Ctx(str(path))
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ctx.error("(syntax)", f"not valid TOML: {exc}", "fix the TOML syntax at that line")
    profile = _build_profile(ctx, data, path.stem)
    for old in [k for k in _CACHE if k[0] == key[0]]:
        del _CACHE[old]
    _CACHE[key] = profile
    return profile
