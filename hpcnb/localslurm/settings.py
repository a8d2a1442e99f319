"""The local Slurm's own ``HPCNB_*`` settings, read and checked in one place: a value it cannot use
is one clear line (:class:`SettingError`, which every command prints), never a traceback in a
daemon's log nor a silent default. (``HPCNB_STATE_DIR`` is :mod:`.paths`'s, ``HPCNB_PROFILE`` and
``HPCNB_SLURM_VERSION`` the site profile's, ``HPCNB_ALLOCATION_HANDOFF`` :mod:`.allocation`'s.)"""
from __future__ import annotations

import math
import os

from hpcnb.slurm.bounds import NO_VAL

# seconds, with their defaults: how long an idle controller stays, how long a scheduled job may
# wait for its supervisor, how long a finished job's environment is kept
SECONDS = {"HPCNB_CONTROLLER_IDLE": 600.0, "HPCNB_LAUNCH_GRACE": 10.0, "HPCNB_ENV_KEPT_AFTER_END": 60.0}
# switches: the values each takes (unset or empty: the first, the default)
CHOICES = {"HPCNB_NODES": ("apart", "shared"), "HPCNB_NODE_NETWORK": ("own", "shared")}
FIRST_JOB_ID = "HPCNB_FIRST_JOB_ID"
MAX_SECONDS = 365 * 86400.0  # a year: beyond it no wait means anything here


class SettingError(ValueError):
    """An ``HPCNB_*`` variable holds a value the local Slurm cannot use (one line: which, and why)."""


def seconds(name: str) -> float:
    """The number of seconds ``name`` (one of :data:`SECONDS`) sets, or its default."""
    text = os.environ.get(name, "").strip()
    if not text:
        return SECONDS[name]
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_SECONDS:  # NaN too
        raise SettingError(f"{name}={_shown(text)} is not a number of seconds from 0 to {MAX_SECONDS:.0f}")
    return value


def first_job_id() -> int:
    """The first job id of a new state (``HPCNB_FIRST_JOB_ID``; default 1, as Slurm's FirstJobId)."""
    text = os.environ.get(FIRST_JOB_ID, "").strip()
    if not text:
        return 1
    if not (text.isdigit() and len(text) < 11 and 0 < int(text) < NO_VAL):
        raise SettingError(f"{FIRST_JOB_ID}={_shown(text)} is not a job id (a whole number from 1 to {NO_VAL - 1})")
    return int(text)


def check() -> None:
    """Raise :class:`SettingError` for the first of the local Slurm's settings it cannot use."""
    for name in SECONDS:
        seconds(name)
    first_job_id()
    for name, values in CHOICES.items():
        value = os.environ.get(name, "")
        if value and value not in values:
            raise SettingError(f"{name}={_shown(value)} is not valid: use {' or '.join(values)}")


def _shown(text: str) -> str:
    """A value as an error line quotes it: repr'd, and cut when long."""
    return repr(text if len(text) <= 40 else text[:37] + "...")
