"""Slurm's numeric bounds: job ids are ``uint32_t``, limits in minutes ``uint32_t``, times ``time_t``.

Slurm reserves ``NO_VAL`` (0xfffffffe) and ``INFINITE`` (0xffffffff) in its 32-bit fields, so no
job id reaches them; a time limit at or past ``INFINITE`` minutes is no limit. A point in time is
kept before the year 10000 in every time zone, which every printer (``strftime``, ``datetime``)
and SQLite can hold.
"""
from __future__ import annotations

__all__ = ["FIELD_WIDTH_MAX", "INFINITE", "INT_MAX", "LONG_MAX", "MAX_EPOCH", "NO_VAL", "clamp_epoch", "c_int",
           "field_width", "job_id_fits", "saturated", "strtol"]

NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1  # where C's strtol() saturates: squeue refuses such an id
MAX_EPOCH = 253402128000  # 9999-12-30T00:00:00 UTC
# squeue's and sinfo's ``_print_str`` and sacct's ``print_fields_str`` cut a value in ``char temp[width + 1]``
# on the stack: past Linux's default 8 MiB stack the real command dies (SIGSEGV); no width beyond it works
FIELD_WIDTH_MAX = 8 * 2**20


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


def field_width(text: str, wraps: bool = True, signed: bool = False) -> int:
    """A format's field width as the real command reads it into a C ``int``: squeue's and sinfo's
    ``_parse_token`` add digit after digit (it wraps: ``%.4294967297i`` is 1), sacct's ``atoi`` and
    the ``-O name:N`` readers' ``strtol`` saturate first (``wraps=False``). Raises ValueError, one
    line, past :data:`FIELD_WIDTH_MAX` (where the real command overflows its stack): a negative
    width too where its size counts (``signed``: sacct's, left-justified), not where it means "no
    width" (squeue's and sinfo's ``%s ``)."""
    if wraps:
        number = 0
        for start in range(0, len(text), 18):  # the value mod 2**32, whatever the number of digits
            chunk = text[start:start + 18]
            number = (number * 10 ** len(chunk) + int(chunk)) % 2**32
        width = c_int(number)
    else:
        width = c_int(strtol(text))
    if (abs(width) if signed else width) > FIELD_WIDTH_MAX:
        raise ValueError(f"Field width {text if len(text) <= 24 else text[:20] + '...'} is too large "
                         f"(at most {FIELD_WIDTH_MAX})")
    return width
