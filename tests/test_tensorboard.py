"""hpcnb.lessons.tensorboard: scalars written and read back, the board started beside the kernel.

The DDP script's rank-0-only writing is checked on a real 4-rank job in test_training.py; the board
opened from a notebook through jupyter-server-proxy, in test_browser.py.
"""
from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("torch")

from hpcnb.lessons import tensorboard  # noqa: E402


def _write(folder: Path, values: list[float]) -> None:
    board = tensorboard.writer(folder)
    for step, value in enumerate(values):
        board.add_scalar("train/loss", value, step)
    board.close()


def test_scalars_written_and_read_back(tmp_path: Path) -> None:
    _write(tmp_path / "runs" / "a", [1.0, 0.5, 0.25])
    assert tensorboard.read_scalars(tmp_path / "runs") == {"a": {"train/loss": [(0, 1.0), (1, 0.5), (2, 0.25)]}}
    assert tensorboard.event_files(tmp_path / "runs") == {"a": 1}
    text = tensorboard.summary(tmp_path / "runs")
    assert text.splitlines()[0] == "a: 1 event file(s)"
    assert "3 points, step 0: 1.0000 ... step 2: 0.2500" in text


def test_every_writer_adds_an_event_file(tmp_path: Path) -> None:
    """The mistake lesson 8 warns of: two processes writing into one run's folder."""
    _write(tmp_path / "runs" / "ddp", [1.0, 0.5])
    _write(tmp_path / "runs" / "ddp", [0.9, 0.4])
    assert tensorboard.event_files(tmp_path / "runs") == {"ddp": 2}
    assert len(tensorboard.read_scalars(tmp_path / "runs")["ddp"]["train/loss"]) == 4


def test_board_serves_the_scalars_and_stops(tmp_path: Path) -> None:
    _write(tmp_path / "runs" / "a", [1.0, 0.5])
    board = tensorboard.start(tmp_path / "runs")
    try:
        with urllib.request.urlopen(f"{board.url}data/runs", timeout=10) as reply:
            assert json.loads(reply.read()) == ["a"]
        assert f"port {board.port}" in repr(board)
        # the system gave the board its port as it bound it (a port picked first could be taken meanwhile)
        assert board.process.args[board.process.args.index("--port") + 1] == "0"
        if tensorboard.proxy_available():
            assert f'href="/proxy/{board.port}/"' in board._repr_html_()
    finally:
        board.stop()
    assert not board.running()


def test_board_behind_a_portal_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice")
    (tmp_path / "runs").mkdir()
    board = tensorboard.start(tmp_path / "runs")
    board.stop()
    assert board.proxy_path == f"/user/alice/proxy/{board.port}/"


def test_a_taken_port_fails_with_the_boards_own_words(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(RuntimeError, match=r"tensorboard on port \d+ exited with \d+:\n(.|\n)*"):
            tensorboard.start(tmp_path / "runs", port=taken.getsockname()[1], timeout=60)


def test_show_says_why_where_there_is_nothing_to_show(tmp_path: Path) -> None:
    assert tensorboard.show(tmp_path / "none") == f"no such folder: {tmp_path / 'none'}: the job wrote no event files (see its output)"
    with pytest.raises(FileNotFoundError, match="no such folder"):
        tensorboard.start(tmp_path / "none")
