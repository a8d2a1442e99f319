"""Has a submission tampered with the machinery that runs its graded tests?

A cell of the student's own can make every ``assert`` pass: an ``ast.NodeTransformer`` in IPython's
``ast_transformers``, an ``input_transformers_post`` entry that empties each cell, a ``sys.settrace``
function that jumps over the failing line, a patched ``builtins.AssertionError`` or ``__import__``,
a replaced ``run_cell``. The grader (:class:`hpcnb.course.sandbox_jupyter.SandboxedExecute`) checks twice
around each graded cell, with requests the student's code does not see in the notebook:

* a *canary*: an ``assert`` that must fail, run as a cell is (transformers, trace, events): it
  must come back as an AssertionError;
* the kernel's :func:`kernel_state` (a user expression: no transformer touches it) must equal its
  value before the first cell ran (the known-good snapshot).

A failed check adds a :data:`TAMPERED` error to the graded cell (nbgrader scores it 0) and the
grader marks the notebook "tampered". Code running in the kernel can hide from any check made
inside that kernel (a replaced :func:`kernel_state` and an AST transformer that spares the canary
did), so these checks no longer guard the scores: the graded tests run in the test kernel, which
the notebook's code cannot reach (:mod:`hpcnb.course.testkernel`). They stay as a report of the
known tricks tried on the notebook's kernel, for the instructor.
"""
from __future__ import annotations

import json
import random
from typing import Any

TAMPERED = "HpcnbTampered"  # the error name a tampered graded cell gets
STATE_EXPRESSION = "__import__('hpcnb.course.tamper', fromlist=['kernel_state']).kernel_state()"
WATCHED_BUILTINS = ("AssertionError", "BaseException", "Exception", "__import__", "__build_class__",
                    "compile", "eval", "exec", "isinstance", "issubclass", "type")
WATCHED_METHODS = ("run_cell", "run_cell_async", "run_ast_nodes", "run_code", "transform_cell",
                   "transform_ast", "should_run_async", "showtraceback", "_run_cell")

__all__ = ["STATE_EXPRESSION", "TAMPERED", "canary", "canary_failed", "error_output", "kernel_state",
           "parse_state", "state_changes"]


def _describe(objects: Any) -> list[str]:
    return [f"{type(o).__module__}.{type(o).__qualname__}@{id(o):x}" for o in objects]


def kernel_state() -> str:
    """(Runs in the kernel.) What grading relies on, as JSON: IPython's transformers and cell
    runners, trace and profile functions, and the builtins that tests use."""
    import builtins
    import sys
    import threading

    from IPython import get_ipython

    shell = get_ipython()
    try:
        assert False  # noqa: B011 - the interpreter's own AssertionError, whatever builtins say
    except BaseException as err:  # noqa: BLE001
        real_assertion = type(err)
    manager = shell.input_transformer_manager
    state = {
        "IPython ast_transformers": _describe(shell.ast_transformers),
        "IPython input_transformers_post": _describe(shell.input_transformers_post),
        "IPython input_transformers_cleanup": _describe(shell.input_transformers_cleanup),
        "IPython input_transformer_manager": _describe([manager, *manager.cleanup_transforms,
                                                        *manager.line_transforms, *manager.token_transformers]),
        "IPython compiler": _describe([shell.compile]),
        "sys.settrace": repr(sys.gettrace()),
        "sys.setprofile": repr(sys.getprofile()),
        "threading.settrace": repr(getattr(threading, "_trace_hook", None)),
        "threading.setprofile": repr(getattr(threading, "_profile_hook", None)),
        "builtins.AssertionError is the interpreter's": repr(builtins.AssertionError is real_assertion),
    }
    for name in WATCHED_BUILTINS:
        state[f"builtins.{name}"] = f"{id(getattr(builtins, name, None)):x}"
    for name in WATCHED_METHODS:
        method = getattr(shell, name, None)
        state[f"IPython shell.{name}"] = f"{id(getattr(method, '__func__', method)):x}"
    return json.dumps(state)


def state_changes(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between two :func:`kernel_state` snapshots, said for the student."""
    return [f"{key} was changed" for key in sorted(set(before) | set(now)) if before.get(key) != now.get(key)]


def parse_state(reply: dict[str, Any] | None) -> dict[str, str] | None:
    """The snapshot in an execute_reply asked for ``{"state": STATE_EXPRESSION}``; None if absent."""
    import ast

    result = ((reply or {}).get("content", {}).get("user_expressions") or {}).get("state", {})
    try:
        state = json.loads(ast.literal_eval(result["data"]["text/plain"]))
    except (KeyError, TypeError, ValueError, SyntaxError):
        return None
    return state if isinstance(state, dict) else None


def canary() -> str:
    """An assert that must fail, looking like a test."""
    value = random.randrange(10, 10**6)
    return f"assert {value} == {value + random.randrange(1, 99)}"


def canary_failed(reply: dict[str, Any] | None) -> bool:
    """Did the canary fail as it must (an AssertionError)?"""
    content = (reply or {}).get("content", {})
    return content.get("status") == "error" and content.get("ename") == "AssertionError"


def error_output(reasons: list[str]) -> Any:
    """The error output that zeroes a graded cell run on tampered machinery."""
    from nbformat.v4 import new_output

    said = "; ".join(reasons)
    return new_output("error", ename=TAMPERED, evalue=said,
                      traceback=[f"{TAMPERED}: the grading machinery was tampered with ({said}): "
                                 "this test scores 0"])
