"""hpcnb.lessons.hangs (lesson 15): faulthandler's stack dumps read back per rank from a job's output."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from hpcnb.lessons.hangs import Frame, labelled_lines, planted, stack_dumps, where_stuck

SCRIPT = "/venv/hpcnb/scripts/faulty_ddp.py"
TORCH = "/venv/torch/distributed/distributed_c10d.py"


def _dump(rank: int, *threads: tuple[str, list[tuple[str, int, str]]]) -> list[str]:
    lines = []
    for header, frames in threads:
        lines.append(f"{rank}: {header} 0x00007f00000000{rank:02x} (most recent call first):")
        lines += [f'{rank}:   File "{f}", line {n} in {fn}' for f, n, fn in frames]
        lines.append(f"{rank}: ")
    return lines


OUTPUT = "\n".join([
    "0: rank=0 host=node1 step=0 loss=1.0", "1: rank=1 host=node2 step=0 loss=1.1", "srun: unlabelled",
    *_dump(0, ("Current thread", [(TORCH, 3252, "all_reduce"), (SCRIPT, 85, "average_gradients"),
                                  (SCRIPT, 104, "<module>")])),
    "0: rank=0 host=node1 step=1 loss=0.9",
    *_dump(1, ("Thread", [("/usr/lib/python3.11/threading.py", 331, "wait")]),
           ("Current thread", [(SCRIPT, 75, "read_batch"), (SCRIPT, 100, "<module>")])),
    *_dump(0, ("Current thread", [(TORCH, 5356, "barrier"), (SCRIPT, 108, "<module>")])),
    "0: [rank0]: RuntimeError: Timed out waiting 10000ms for recv operation to complete",
    "2: rank=2 host=node2 step=0 loss=1.2",
])


def test_labelled_lines_split_the_output_per_rank() -> None:
    ranks = labelled_lines(OUTPUT)
    assert sorted(ranks) == [0, 1, 2]
    assert ranks[2] == ["rank=2 host=node2 step=0 loss=1.2"]


def test_each_ranks_last_dump_with_its_threads() -> None:
    dumps = stack_dumps(OUTPUT)
    assert sorted(dumps) == [0, 1]                      # rank 2 printed none
    assert dumps[0] == [[Frame(TORCH, 5356, "barrier"), Frame(SCRIPT, 108, "<module>")]]   # the later one
    assert [len(t) for t in dumps[1]] == [1, 2]         # a helper thread and the main thread


def test_where_stuck_is_the_innermost_line_of_the_script() -> None:
    stuck = where_stuck(OUTPUT, "faulty_ddp.py")
    assert {r: (f.line, f.function) for r, f in stuck.items()} == {0: (108, "<module>"), 1: (75, "read_batch")}
    assert where_stuck(OUTPUT, "train.py") == {}


def test_a_crash_dump_is_read_too() -> None:
    crash = "\n".join(["0: Fatal Python error: Aborted", "0: ",
                       *_dump(0, ("Thread", [(TORCH, 3252, "all_reduce"), (SCRIPT, 85, "average_gradients")])),
                       "0: Extension modules: numpy, torch._C (total: 2)"])
    assert where_stuck(crash, "faulty_ddp.py")[0].line == 85


def test_the_mystery_rank_is_never_rank_0() -> None:
    assert {planted(job, 3) for job in range(1, 50)} == {1, 2}
    assert planted(7, 1) == 0


SKIPS_A_COLLECTIVE = '''
import datetime, os, torch, torch.distributed as dist
from hpcnb.lessons.hangs import dump_flight_recorder
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
rank, t = dist.get_rank(), torch.ones(8)
try:
    for step in range(3):
        dist.all_reduce(t)
    dist.barrier() if rank == 1 else dist.all_reduce(t)   # rank 1 skips the last all-reduce
except RuntimeError:
    print(rank, "dumped", dump_flight_recorder(rank))
'''


def test_a_gloo_ranks_flight_recorder_dump_names_the_culprit_in_torchfrtrace(tmp_path) -> None:
    """Lesson 15: each rank writes its flight recorder when its collective times out, where
    TORCH_FR_DUMP_TEMP_FILE says, and PyTorch's analyser reads the dumps (it fails on gloo's own
    group name in PyTorch 2.13, which the dump mends)."""
    (tmp_path / "skip.py").write_text(SKIPS_A_COLLECTIVE)
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "100", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr" / "rank_")}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          "skip.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert sorted(p.name for p in (tmp_path / "fr").iterdir()) == ["rank_0", "rank_1"], run.stdout + run.stderr
    report = subprocess.run([str(Path(sys.executable).with_name("torchfrtrace")), "fr", "--prefix", "rank_"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    said = report.stdout + report.stderr   # the analyser reports through logging, on stderr
    assert "Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH" in said, said


def test_no_flight_recorder_no_dump(monkeypatch) -> None:
    from hpcnb.lessons.hangs import dump_flight_recorder

    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    assert dump_flight_recorder(0) is None


def _torchfrtrace(folder: Path) -> str:
    """What PyTorch's analyser says of the dumps ``folder/rank_<R>`` (it logs on stderr)."""
    report = subprocess.run([str(Path(sys.executable).with_name("torchfrtrace")), str(folder), "--prefix", "rank_"],
                            capture_output=True, text=True, timeout=120)
    return report.stdout + report.stderr


def test_the_recorded_dumps_are_a_real_hang_that_torchfrtrace_reads() -> None:
    """Exercise 15.4's dumps (package data): faulty_ddp --fault skip --rank 1 on 3 gloo ranks, each
    rank's recorder as it timed out: ranks 0 and 2 in the 4th all-reduce, rank 1 in the barrier."""
    from hpcnb.lessons.hangs import FLIGHT_RECORDER_EXAMPLE, read_flight_recorder

    dumps = read_flight_recorder(FLIGHT_RECORDER_EXAMPLE)
    assert sorted(dumps) == [0, 1, 2]
    last = {rank: (d["entries"][-1]["collective_seq_id"], d["entries"][-1]["profiling_name"]) for rank, d in dumps.items()}
    assert last == {0: (4, "gloo:all_reduce"), 1: (4, "gloo:barrier"), 2: (4, "gloo:all_reduce")}
    said = _torchfrtrace(FLIGHT_RECORDER_EXAMPLE)
    assert "Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH" in said, said


def test_reading_dumps_that_are_not_there_or_not_dumps_fails_clearly(tmp_path) -> None:
    from hpcnb.lessons.hangs import read_flight_recorder

    with pytest.raises(FileNotFoundError, match="no flight-recorder dump"):
        read_flight_recorder(tmp_path)
    (tmp_path / "rank_0").write_text("rank=0 step=3 loss=1.0\n")
    with pytest.raises(ValueError, match="rank_0: not a flight-recorder dump"):
        read_flight_recorder(tmp_path)
    (tmp_path / "rank_0").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="rank_0: not a flight-recorder dump"):
        read_flight_recorder(tmp_path)
    (tmp_path / "rank_0").write_bytes(pickle.dumps({"entries": [1, 2, 3]})[:-4])   # cut short: the rank was killed
    with pytest.raises(ValueError, match="rank_0: not a flight-recorder dump"):
        read_flight_recorder(tmp_path)


def test_pretend_dumps_keep_the_recorded_layout_and_torchfrtrace_names_their_culprit(tmp_path) -> None:
    """The exercise's hidden tests build other hangs from the recorded dumps: PyTorch's analyser
    reads them as it reads real ones, and names the rank that went elsewhere (here rank 2 of 4)."""
    from hpcnb.course.probes import flight_recorder_dumps
    from hpcnb.lessons.hangs import FLIGHT_RECORDER_EXAMPLE, read_flight_recorder

    ops = ["all_reduce"] * 3
    dumps = flight_recorder_dumps(read_flight_recorder(FLIGHT_RECORDER_EXAMPLE),
                                  {3: ops, 1: ops, 2: [*ops[:2], "broadcast"], 0: ops}, backend="gloo")
    assert list(dumps) == [3, 1, 2, 0]   # the order given
    assert [e["state"] for e in dumps[0]["entries"]] == ["completed", "completed", "started"]
    assert dumps[2]["pg_config"]["0"]["ranks"] == "[0, 1, 2, 3]"
    for rank, dump in dumps.items():
        (tmp_path / f"rank_{rank}").write_bytes(pickle.dumps(dump))
    assert read_flight_recorder(tmp_path).keys() == {0, 1, 2, 3}
    said = _torchfrtrace(tmp_path)
    assert "Culprit rank 2; Error type: COLLECTIVE_TYPE_MISMATCH" in said, said
