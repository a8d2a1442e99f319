"""hpcnb.lessons.hangs (lesson 15): faulthandler's stack dumps read back per rank from a job's output."""
from __future__ import annotations

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
