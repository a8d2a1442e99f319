"""Slurm's times: the one parser of durations, the one parser of calendar times, and a printer
for each form Slurm prints.

The parser is Slurm's ``time_str2secs`` (``src/common/parse_time.c``, 22.05 to 24.11): the
shape check of ``_is_valid_timespec`` and then ``sscanf``, with no range check of the fields
(``1-25`` is 2 days 1 hour, ``00:61:00`` 61 minutes, ``1:90`` 2 minutes 30 seconds). The
printers are ``secs2time_str`` (limits, sacct's Elapsed, scontrol's RunTime), squeue's and
sinfo's ``_print_secs`` and sacct's ``_elapsed_time`` (TotalCPU, UserCPU, SystemCPU).
Calendar times (``--begin``, ``--deadline``, ``scontrol update StartTime=``) are read by
:func:`parse_calendar`, a subset of the same file's ``parse_time``.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .bounds import INFINITE, INT_MAX, MAX_EPOCH, c_int, clamp_epoch, saturated

if TYPE_CHECKING:
    from datetime import datetime

__all__ = [
    "TIME_FORMATS",
    "CalendarTimeError",
    "TimeSpecError",
    "format_cpu_time",
    "format_elapsed",
    "format_limit",
    "format_squeue_time",
    "minutes",
    "parse_calendar",
    "parse_printed",
    "parse_printed_seconds",
    "parse_stamp",
    "parse_time",
]

TIME_FORMATS = "INFINITE, MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
_UNLIMITED = {"-1", "INFINITE", "UNLIMITED"}
_SHAPE = re.compile(r"(?:(\d+)-)?([0-9:]*)")


class TimeSpecError(ValueError):
    """Not a Slurm time; the message starts as Slurm's own: ``Invalid --time specification``."""

    def __init__(self, text: str, option: str = "--time") -> None:
        super().__init__(f"Invalid {option} specification: {text!r} is not a Slurm time ({TIME_FORMATS})")
        self.text, self.option = text, option


def _valid_timespec(text: str) -> bool:
    """Slurm's ``_is_valid_timespec``: digits, ``-`` and ``:`` only, one ``-`` before at most two
    ``:``, and enough digit groups for the colons (``1:`` and ``1-2:`` are refused)."""
    if not text or set(text) - set("0123456789-:"):
        return False
    dashes, colons = text.count("-"), text.count(":")
    groups = len([g for g in re.split(r"[-:]", text) if g])
    if not groups or dashes > 1 or colons > 2 or (dashes and text.index("-") > text.find(":") >= 0):
        return False
    return not colons or groups >= colons + 1 + dashes


def parse_time(text: str, option: str = "--time") -> int | None:
    """Seconds in a Slurm time spec (``--time``, ``MaxTime``...); None for INFINITE, UNLIMITED, -1.

    Takes ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS`` (and ``D-``) as
    Slurm does, fields unchecked: ``1:90`` is 150 s. A negative day count (``-5``), which Slurm
    turns into a garbage limit, is refused. Raises :class:`TimeSpecError` (a ValueError).
    Slurm keeps job limits in whole minutes, rounding seconds up (:func:`minutes`). Past 32 bits
    it computes in C ``int`` values (:func:`_wrapped_limit`).
    """
    if not isinstance(text, str):
        raise TimeSpecError(str(text), option)
    if text.upper() in _UNLIMITED:
        return None
    if not _valid_timespec(text) or text.startswith("-"):
        raise TimeSpecError(text, option)
    days, rest = _SHAPE.fullmatch(text).groups()  # type: ignore[union-attr]
    fields = [c_int(saturated(f)) for f in rest.split(":")] if rest else []  # sscanf's %d
    if days is not None:
        hours, minutes, seconds = (fields + [0, 0, 0])[:3]
    elif len(fields) == 3:
        hours, minutes, seconds = fields
    else:
        hours, minutes, seconds = 0, fields[0], (fields + [0])[1]
    total = ((c_int(saturated(days or "")) * 24 + hours) * 60 + minutes) * 60 + seconds
    return total if 0 <= total <= INT_MAX - 59 else _wrapped_limit(total)


def _wrapped_limit(total: int) -> int | None:
    """What ``time_str2mins`` makes of a limit past an ``int`` of seconds: the sum wraps, is
    rounded to minutes (C's division) and kept in 32 bits, INFINITE being no limit (measured on
    22.05: 20 digits and ``4294967295`` give 0, ``4294967294`` UNLIMITED, ``99999999999`` 2981813 days)."""
    secs = c_int(total + 59)
    mins = (abs(secs) // 60 * (1 if secs >= 0 else -1)) % 2**32
    return None if mins == INFINITE else mins * 60


def minutes(seconds: int | None) -> int | None:
    """Slurm's ``time_str2mins``: whole minutes, rounded up (None stays None)."""
    return None if seconds is None else (seconds + 59) // 60


def parse_printed(text: str) -> int | None:
    """Whole seconds of a duration as Slurm prints it (squeue's ``1:05``, sacct's ``1-00:00:02``,
    TotalCPU's ``00:02.345``); None for a blank, ``INVALID``, ``UNLIMITED``, ``Partition_Limit``."""
    whole = text.strip().partition(".")[0]
    if ":" not in whole:
        return None
    try:
        return parse_time(whole)
    except TimeSpecError:
        return None


def parse_printed_seconds(text: str) -> float | None:
    """:func:`parse_printed` keeping the fraction (sacct's TotalCPU ``00:02.345`` -> 2.345)."""
    whole = parse_printed(text)
    fraction = text.strip().partition(".")[2]
    if whole is None or (fraction and not fraction.isdigit()):
        return None if whole is None else float(whole)
    return whole + (float(f"0.{fraction}") if fraction else 0.0)


def parse_stamp(text: str) -> datetime | None:
    """A point in time as Slurm prints it (sacct's Start and End, ``2026-11-27T00:22:07``); None for
    ``Unknown``, ``None``, a blank."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        return None


def _split(seconds: float) -> tuple[int, int, int, int]:
    secs = max(0, int(seconds))
    return secs // 86400, secs // 3600 % 24, secs // 60 % 60, secs % 60


def format_elapsed(seconds: float | None) -> str:
    """``secs2time_str``: ``HH:MM:SS`` or ``D-HH:MM:SS`` (sacct's Elapsed, scontrol's RunTime)."""
    days, hours, mins, secs = _split(seconds or 0)
    text = f"{hours:02d}:{mins:02d}:{secs:02d}"
    return f"{days}-{text}" if days else text


def format_limit(seconds: float | None) -> str:
    """A limit as Slurm prints it (and reads it back): ``UNLIMITED`` for None, else :func:`format_elapsed`."""
    return "UNLIMITED" if seconds is None else format_elapsed(seconds)


def format_squeue_time(seconds: float | None) -> str:
    """squeue's TIME, TIME_LIMIT, TIME_LEFT and sinfo's TIMELIMIT: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``."""
    days, hours, mins, secs = _split(seconds or 0)
    if days:
        return f"{days}-{hours:02d}:{mins:02d}:{secs:02d}"
    return f"{hours}:{mins:02d}:{secs:02d}" if hours else f"{mins}:{secs:02d}"


def format_cpu_time(seconds: float) -> str:
    """sacct's TotalCPU, UserCPU, SystemCPU: ``MM:SS.mmm`` under an hour when there are
    milliseconds, else ``00:MM:SS``, ``HH:MM:SS`` or ``D-HH:MM:SS``."""
    days, hours, mins, secs = _split(seconds)
    millis = int(round((seconds - int(seconds)) * 1e6)) // 1000
    if days or hours:
        return format_elapsed(seconds)
    return f"{mins:02d}:{secs:02d}.{millis:03d}" if millis else f"00:{mins:02d}:{secs:02d}"


class CalendarTimeError(ValueError):
    """Not a calendar time Slurm reads; ``pos`` is where its ``parse_time`` stopped (its message:
    ``Invalid time specification (pos=N): TEXT``)."""

    def __init__(self, text: str, pos: int) -> None:
        super().__init__(f"Invalid time specification (pos={pos}): {text}")
        self.text, self.pos = text, pos


_DELTA_UNITS = {"": 1, "second": 1, "seconds": 1, "minute": 60, "minutes": 60, "hour": 3600, "hours": 3600,
                "day": 86400, "days": 86400, "week": 604800, "weeks": 604800}
_NAMED_TIMES = {"midnight": 0, "elevenses": 11, "noon": 12, "fika": 15, "teatime": 16}


def parse_calendar(text: str, now: float) -> float:
    """Epoch seconds of a calendar time as Slurm's ``parse_time`` (``src/common/parse_time.c``)
    reads ``--begin``, ``--deadline`` and ``scontrol update StartTime=``: ``now[+-N[unit]]`` (unit:
    second(s), minute(s), hour(s), day(s), week(s)), ``today``, ``tomorrow``, ``midnight``,
    ``elevenses``, ``noon``, ``fika``, ``teatime``, ``HH:MM[:SS][AM|PM]``, ``MM/DD[/YY]``,
    ``YYYY-MM-DD[THH:MM[:SS]]``; a clock time already past today is tomorrow's. Far offsets are
    clamped (:func:`~hpcnb.slurm.bounds.clamp_epoch`), as Slurm keeps a ``time_t``. Not read
    (Slurm does): ``uts<epoch>``, a date and a clock time in one (``tomorrow 10:00``,
    ``MM/DD-HH:MM``), ``MMDDYY`` without separators. Raises :class:`CalendarTimeError`."""
    import datetime as dt

    def fail(pos: int) -> CalendarTimeError:
        return CalendarTimeError(text, pos)

    low = text.strip().lower()
    today = dt.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if low.startswith("now"):
        when, pos = now, 3
        if pos < len(low):
            if low[pos] not in "+-":
                raise fail(pos)
            match = re.match(r"(\d+)([a-z]*)", low[pos + 1:])
            if not match:
                raise fail(pos)
            if match.group(2) not in _DELTA_UNITS or pos + 1 + match.end() != len(low):
                raise fail(pos + 1)
            step = min(saturated(match.group(1)) * _DELTA_UNITS[match.group(2)], MAX_EPOCH)
            when += step if low[pos] == "+" else -step
        return clamp_epoch(when)
    if low in ("today", "tomorrow"):
        return (today + dt.timedelta(days=low == "tomorrow")).timestamp()
    if low in _NAMED_TIMES:
        at = today.replace(hour=_NAMED_TIMES[low])
        return (at if at.timestamp() > now else at + dt.timedelta(days=1)).timestamp()
    iso = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:t(\d{1,2}):(\d{1,2})(?::(\d{1,2}))?)?", low)
    if iso:
        year, month, day, hour, minute, sec = (int(g) if g else 0 for g in iso.groups())
        starts = [m.start() for m in re.finditer(r"\d+", low)]
        for index, (value, top) in enumerate(((month, 12), (day, 31), (hour, 23), (minute, 59), (sec, 59)), 1):
            if value > top or (index <= 2 and value < 1):
                raise fail(starts[index] if index < len(starts) else 0)
        try:
            return dt.datetime(year, month, day, hour, minute, sec).timestamp()
        except ValueError:
            raise fail(starts[2]) from None
    clock = re.fullmatch(r"(\d{1,2}):(\d{1,2})(?::(\d{1,2}))?\s*(am|pm)?", low)
    if clock:
        hour, minute, sec = (int(g) if g else 0 for g in clock.groups()[:3])
        if clock.group(4):
            hour = hour % 12 + (12 if clock.group(4) == "pm" else 0)
        if hour > 23:
            raise fail(0)
        if minute > 59:
            raise fail(clock.start(2))
        if sec > 59:
            raise fail(clock.start(3))
        at = today.replace(hour=hour, minute=minute, second=sec)
        return (at if at.timestamp() > now else at + dt.timedelta(days=1)).timestamp()
    date = re.fullmatch(r"(\d{1,2})[/.](\d{1,2})(?:[/.](\d{2}|\d{4}))?", low)
    if date:
        month, day = int(date.group(1)), int(date.group(2))
        year = int(date.group(3)) if date.group(3) else today.year
        year += 2000 if year < 100 else 0
        if not 1 <= month <= 12:
            raise fail(0)
        try:
            return dt.datetime(year, month, day).timestamp()
        except ValueError:
            raise fail(date.start(2)) from None
    raise fail(0)
