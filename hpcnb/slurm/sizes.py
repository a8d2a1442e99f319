"""Slurm's sizes: ``--mem`` as Slurm reads it, sizes as Slurm prints them (``15464K``, ``1.50M``,
``2G``), and one printer, Slurm's ``convert_num_unit`` with exact conversion (sacct's MaxRSS and
ReqMem, TRES strings' ``mem=``, squeue's MIN_MEMORY). Units are binary: ``1K`` is 1024.
"""
from __future__ import annotations

import re

from hpcnb.slurm.bounds import LONG_MAX, saturated

__all__ = ["UNITS", "SizeError", "format_rounded_size", "format_size", "parse_bytes", "parse_mem", "parse_printed_size"]

UNITS = ("", "K", "M", "G", "T", "P")
_MEM = re.compile(r"\s*([+-]?\d+)(?:([KMGT])B?)?", re.IGNORECASE)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([KMGTP])(?:I?B)?|B)?", re.IGNORECASE)


class SizeError(ValueError):
    """Not a size; for ``--mem`` the message starts as Slurm's: ``Invalid --mem specification``."""


def parse_mem(text: str, option: str = "--mem") -> int:
    """MB in a ``--mem``/``--mem-per-cpu`` value, as Slurm's ``str_to_mbytes``: a whole number,
    MB by default, then K (rounded up to whole MB), M, G or T, optionally followed by B."""
    match = _MEM.fullmatch(text) if isinstance(text, str) else None
    digits = match.group(1).lstrip("+-").lstrip("0") if match else ""
    number, negative = saturated(digits), bool(match) and match.group(1).startswith("-")
    if not match or (negative and number) or (number == LONG_MAX and digits != str(LONG_MAX)):
        # strtoll saturating is refused (NO_VAL64), as is a negative number
        raise SizeError(f"Invalid {option} specification: {text!r} (write e.g. 500M, 2G, 1T)")
    unit = (match.group(2) or "M").upper()
    if unit == "K":
        return (number + 1023) // 1024
    return number * 1024 ** (UNITS.index(unit) - 2)


def parse_bytes(text: str) -> int:
    """Bytes in a size: ``512``, ``15464K``, ``1.50M``, ``2G``, ``7.2T``, ``50GB``, ``1 TiB``."""
    match = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise SizeError(f"{text!r} is not a size (write e.g. 500M, 2G, 1.5T)")
    return round(float(match.group(1)) * 1024 ** UNITS.index((match.group(2) or "").upper()))


def parse_printed_size(text: str) -> int | None:
    """Bytes in a size a Slurm command printed (sacct's MaxRSS); None for a blank or anything else."""
    try:
        return parse_bytes(text)
    except SizeError:
        return None


def format_size(value: float, unit: str = "") -> str:
    """``value`` (in ``unit``: "", K, M...) as Slurm prints it: in the largest unit that keeps it
    exact, half units included (``convert_num_unit`` with ``CONVERT_NUM_UNIT_EXACT``):
    ``format_size(1024, "M")`` is ``1G``, ``format_size(1536, "M")`` ``1.50G``, 1000 M stays ``1000M``."""
    if int(value) == 0:
        return "0"
    num, order = float(value), UNITS.index(unit.upper())
    while num >= 1024 and int(num) % 512 == 0 and order < len(UNITS) - 1:
        num, order = num / 1024, order + 1
    return f"{int(num)}{UNITS[order]}" if num == int(num) else f"{num:.2f}{UNITS[order]}"


def format_rounded_size(size: int) -> str:
    """Bytes for a person, in 1024-based units with one decimal: ``272629760`` -> ``260.0M``, ``1.5G``
    (what seff shows; :func:`format_size` is Slurm's own exact form)."""
    value, unit = float(size), ""
    for unit in UNITS[:-1]:
        if value < 1024 or unit == UNITS[-2]:
            break
        value /= 1024
    return f"{value:.1f}{unit}" if unit else f"{size}"
