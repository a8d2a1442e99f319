"""hpcnb.course.tamper: the kernel-side snapshot and its comparison, in a plain IPython shell."""
from __future__ import annotations

import ast
import json
import sys

import pytest

from hpcnb.course import tamper


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    yield shell
    InteractiveShell.clear_instance()


def _state() -> dict[str, str]:
    return json.loads(tamper.kernel_state())


def test_an_untouched_shell_keeps_its_state(shell) -> None:
    assert tamper.state_changes(_state(), _state()) == []


def test_each_trick_is_named(shell, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    before = _state()
    monkeypatch.setattr(shell, "ast_transformers", [ast.NodeTransformer()])
    monkeypatch.setattr(shell, "input_transformers_post", [lambda lines: []])
    monkeypatch.setattr(builtins, "AssertionError", type("Quiet", (Exception,), {}))
    monkeypatch.setattr(shell, "run_cell", lambda *a, **k: None)
    old_trace = sys.gettrace()
    sys.settrace(lambda *args: None)
    try:
        changed = tamper.state_changes(before, _state())
    finally:
        sys.settrace(old_trace)
        monkeypatch.undo()
    assert {
        "IPython ast_transformers was changed", "IPython input_transformers_post was changed",
        "builtins.AssertionError was changed", "builtins.AssertionError is the interpreter's was changed",
        "IPython shell.run_cell was changed", "sys.settrace was changed"} <= set(changed)


def test_replies_are_read() -> None:
    state = {"a": "1"}
    reply = {"content": {"status": "ok", "user_expressions": {
        "state": {"status": "ok", "data": {"text/plain": repr(json.dumps(state))}}}}}
    assert tamper.parse_state(reply) == state
    assert tamper.parse_state({"content": {"user_expressions": {"state": {"status": "error"}}}}) is None
    assert tamper.parse_state(None) is None
    assert tamper.canary_failed({"content": {"status": "error", "ename": "AssertionError"}})
    assert not tamper.canary_failed({"content": {"status": "ok"}})
    code = tamper.canary()
    with pytest.raises(AssertionError):
        exec(compile(code, "<canary>", "exec"), {})
