"""Slurm's numeric bounds: job ids are ``uint32_t``, limits in minutes ``uint32_t``, times ``time_t``.

Slurm reserves ``NO_VAL`` (0xfffffffe) and ``INFINITE`` (0xffffffff) in its 32-bit fields, so no
job id reaches them; a time limit at or past ``INFINITE`` minutes is no limit. A point in time is
kept before the year 10000 in every time zone, which every printer (``strftime``, ``datetime``)
and SQLite can hold.
"""
from __future__ import annotations

__all__ = ["INFINITE", "INT_MAX", "LONG_MAX", "MAX_EPOCH", "NO_VAL", "clamp_epoch", "c_int", "job_id_fits", "saturated",
           "strtol"]

NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1  # where C's strtol() saturates: squeue refuses such an id
MAX_EPOCH = 253402128000  # 9999-12-30T00:00:00 UTC


def job_id_fits(job_id: int) -> bool:
    """Could a job have this id (``uint32_t``, below ``NO_VAL``)? Beyond it there is no such job."""
    return 0 < job_id < NO_VAL


def clamp_epoch(epoch: float) -> float:
    """A point in time Slurm can keep and print: within 0 .. :data:`MAX_EPOCH`."""
    return min(max(epoch, 0.0), float(MAX_EPOCH))


def saturated(digits: str) -> int:
    """A run of ASCII digits as C's ``strtol`` reads it: past ``LONG_MAX`` it stays ``LONG_MAX``
    (and thousands of digits cost nothing, where Python's ``int`` would refuse them)."""
    digits = digits.lstrip("0")
    return LONG_MAX if len(digits) > 19 else min(int(digits or "0"), LONG_MAX)


def strtol(text: str) -> int:
    """An optionally signed run of ASCII digits as C's ``strtol`` reads it: saturated at ``LONG_MAX``
    and ``LONG_MIN``."""
    digits = text.lstrip("+-").lstrip("0")
    if not text.startswith("-"):
        return saturated(digits)
    return -(LONG_MAX + 1) if len(digits) > 19 else -min(int(digits or "0"), LONG_MAX + 1)


def c_int(number: int) -> int:
    """C's ``(int)`` of a ``long``: past INT_MAX it wraps (``2**31`` is ``-2**31``, ``2**32 + 1`` is 1)."""
    return (number + 2**31) % 2**32 - 2**31
