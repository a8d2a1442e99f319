"""Comparing two timings no further than their spread allows (lessons 2, 6, 8, 10 and 11).

A ratio of two medians alone hides how much each measurement varied: a lesson shows the range of
the ratio over the repeats as well, and draws a conclusion only where that whole range lies on one
side of 1.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["ratio_range", "verdict"]


def ratio_range(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """``a`` over ``b`` (e.g. the seconds of one process over those of four: the speed-up):
    (median over median, lowest, highest), the lowest being a's smallest over b's largest."""
    if not a or not b or min(b) <= 0:
        raise ValueError("ratio_range needs at least one value on each side, and b's above 0")
    return statistics.median(a) / statistics.median(b), min(a) / max(b), max(a) / min(b)


def verdict(low: float, high: float, above: str, below: str,
            neither: str = "the spread covers 1x: no conclusion either way") -> str:
    """``above`` if the whole range lies above 1, ``below`` if it lies below, else ``neither``."""
    return above if low > 1 else below if high < 1 else neither
