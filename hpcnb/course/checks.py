"""What the exercises' graded test cells use to tell a student what to do (issue 25).

A graded test cell starts with :func:`answered`: when the student's answer cell was never run,
or still holds the ``raise NotImplementedError()`` stub that ``hpcnb grading generate`` puts in
place of the solution, the test says that the exercise is unanswered instead of failing with a
``NameError`` or a ``NotImplementedError`` from deep inside the check.
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

__all__ = ["answered", "in_words", "is_stub"]

STUB = "raise NotImplementedError()"


def is_stub(value: Any) -> bool:
    """Whether ``value`` is a function whose body is still the exercise's stub."""
    function = inspect.unwrap(value) if callable(value) else None
    code = getattr(function, "__code__", None)
    if code is None:
        return False
    try:
        return STUB in inspect.getsource(function)
    except (OSError, TypeError):  # no source kept: a body that only raises NotImplementedError
        return code.co_names == ("NotImplementedError",)


def answered(exercise: str, *names: str, files: tuple[str, ...] = ()) -> None:
    """Fail with "<exercise> is unanswered" unless the caller's notebook defines every one of
    ``names`` (a function among them no longer the stub) and every one of ``files`` exists
    (relative to the working folder)."""
    namespace = sys._getframe(1).f_globals
    missing = [f"`{name}`" for name in names if name not in namespace or is_stub(namespace[name])]
    missing += [f"the file {file}" for file in files if not Path(file).exists()]
    if missing:
        raise AssertionError(
            f"{exercise} is unanswered: write your answer in the cell above, in place of "
            f"{STUB}, and run it (it must make {', '.join(missing)})")


def in_words(seconds: int | None) -> str:
    """A duration as a person says it ("45 minutes", "2 days 12 hours"); None is "no limit"."""
    if seconds is None:
        return "no limit"
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    days, hrs = divmod(hours, 24)
    parts = [f"{n} {unit}{'s' if n != 1 else ''}"
             for n, unit in ((days, "day"), (hrs, "hour"), (mins, "minute"), (secs, "second")) if n]
    return " ".join(parts) or "0 seconds"
