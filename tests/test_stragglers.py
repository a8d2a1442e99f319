"""hpcnb.lessons.stragglers: the outlier test, per-rank log lines, gathering across ranks."""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpcnb.lessons.stragglers import (
    find_stragglers, format_report, load_times, read_step_logs, save_times, step_line,
)


def _ranks(n: int, slow: dict[int, float] | None = None, base: float = 0.040, jitter: float = 0.05,
           steps: int = 30, seed: int = 0) -> dict[int, list[float]]:
    """Step times of n ranks with a few percent of noise; ``slow`` multiplies some ranks' times."""
    rng = random.Random(seed)
    slow = slow or {}
    return {r: [base * slow.get(r, 1.0) * (1 + rng.uniform(-jitter, jitter)) for _ in range(steps)]
            for r in range(n)}


def _flagged(results) -> list[int]:
    return [t.rank for t in results if t.slow]


# --------------------------------------------------------------------------- the outlier test

@pytest.mark.parametrize("n", [3, 4, 8, 32, 832])
def test_a_5x_slower_rank_is_flagged_and_no_other(n):
    results = find_stragglers(_ranks(n, slow={n - 1: 5.0}))
    assert _flagged(results) == [n - 1]
    slow = results[-1]
    assert 4.5 < slow.ratio < 5.5 and slow.z > 3.5


@pytest.mark.parametrize("n", [3, 4, 8, 64])
def test_normal_ranks_are_not_flagged(n):
    for seed in range(20):
        assert _flagged(find_stragglers(_ranks(n, seed=seed, jitter=0.15))) == []


def test_a_mildly_slow_rank_needs_both_ratio_and_spread():
    times = _ranks(8, slow={3: 1.3})
    assert _flagged(find_stragglers(times)) == []                # 30 % slower: below the 1.5x ratio
    assert _flagged(find_stragglers(times, ratio=1.2)) == [3]     # a stricter ratio catches it


def test_fast_ranks_are_never_stragglers():
    assert _flagged(find_stragglers(_ranks(6, slow={2: 0.2}))) == []


def test_two_slow_ranks_among_many():
    assert _flagged(find_stragglers(_ranks(16, slow={4: 5.0, 11: 3.0}))) == [4, 11]


def test_identical_times_and_one_slow_rank_mad_zero():
    results = find_stragglers({0: 1.0, 1: 1.0, 2: 1.0, 3: 4.0})
    assert _flagged(results) == [3] and math.isinf(results[3].z)
    assert _flagged(find_stragglers({0: 1.0, 1: 1.0, 2: 1.0})) == []


def test_warmup_steps_are_skipped():
    times = _ranks(4)
    times[0][:3] = [5.0, 5.0, 5.0]  # a slow first steps (compilation, caches) is not a straggler
    assert _flagged(find_stragglers(times, skip=3)) == []
    assert find_stragglers(times, skip=3)[0].steps == 27


def test_needs_three_ranks_and_sane_input():
    with pytest.raises(ValueError, match="at least 3 ranks"):
        find_stragglers({0: [1.0], 1: [5.0]})
    with pytest.raises(ValueError, match="no step times"):
        find_stragglers({0: [], 1: [1.0], 2: [1.0]})
    with pytest.raises(ValueError, match="finite"):
        find_stragglers({0: [float("nan")], 1: [1.0], 2: [1.0]})
    with pytest.raises(ValueError, match="ratio"):
        find_stragglers(_ranks(3), ratio=1.0)


def test_hosts_and_report():
    results = find_stragglers(_ranks(3, slow={2: 5.0}), hosts={0: "node1", 1: "node1", 2: "node2"})
    report = format_report(results)
    lines = report.splitlines()
    assert len(lines) == 4 and "node2" in lines[3] and lines[3].endswith("SLOW")
    assert all(line.endswith("ok") for line in lines[1:3])


# -------------------------------------------------------------------------------- log lines

def test_step_lines_roundtrip_with_srun_labels_and_noise(tmp_path: Path):
    lines = ["job starting", "0: " + step_line(0, 3, "node1", compute_s=0.01, wait_s=0.04)]
    lines += ["2: " + step_line(2, 4, "node2", compute_s=0.05, wait_s=0.001),
              "2: " + step_line(2, 3, "node2", compute_s=0.06, wait_s=0.002),
              step_line(1, 3, "node1", compute_s=0.011, wait_s=0.039), "garbage rank=x"]
    log = tmp_path / "job.out"
    log.write_text("\n".join(lines) + "\n")
    parsed = read_step_logs(log)
    assert sorted(parsed) == [0, 1, 2]
    assert parsed[2] == {"host": "node2", "steps": [3, 4], "compute_s": [0.06, 0.05], "wait_s": [0.002, 0.001]}
    assert read_step_logs(log, field="wait_s")[0] == {"host": "node1", "steps": [3], "wait_s": [0.04]}
    # one file per rank (--output=...-%t.out), or the text itself
    for rank in range(3):
        (tmp_path / f"r{rank}.out").write_text("\n".join(line for line in lines if f"rank={rank} " in line))
    assert read_step_logs(sorted(tmp_path.glob("r*.out"))) == parsed
    assert read_step_logs(log.read_text()) == parsed


def test_save_and_load_times(tmp_path: Path):
    gathered = {0: {"host": "a", "compute_s": [0.1]}, 1: {"host": "b", "compute_s": [0.2]}}
    path = save_times(tmp_path / "t.json", gathered, world_size=2)
    ranks, meta = load_times(path)
    assert ranks == gathered and meta == {"world_size": 2}
    assert json.loads(path.read_text())["ranks"]["1"]["host"] == "b"


# ---------------------------------------------------------------- gathering with torch.distributed

_GATHER = textwrap.dedent("""
    import os, sys
    import torch.distributed as dist
    from hpcnb.lessons.stragglers import gather_step_times
    rank, size = int(sys.argv[1]), int(sys.argv[2])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3])
    dist.init_process_group("gloo", rank=rank, world_size=size)
    got = gather_step_times({"compute_s": [0.01 * (rank + 1)] * 3}, host=f"h{rank}")
    if rank == 0:
        import json
        print(json.dumps(got))
    from hpcnb.lessons.distributed import leave
    leave()  # a plain exit can abort in gloo's threads (see leave's docstring)
""")


@pytest.mark.slow
def test_gather_step_times_across_processes():
    pytest.importorskip("torch")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    size = 3
    procs = [subprocess.Popen([sys.executable, "-c", _GATHER, str(r), str(size), port],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(size)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    got = {int(k): v for k, v in json.loads(outs[0][0]).items()}
    assert got == {r: {"host": f"h{r}", "compute_s": [0.01 * (r + 1)] * 3} for r in range(size)}


def test_step_by_step_comparison_cancels_machine_wide_noise():
    """A busy machine slows whole steps (every rank at once); the test compares ranks step by step."""
    rng = random.Random(7)
    load = [rng.uniform(0.5, 3.0) for _ in range(30)]  # up to 6x swings from step to step
    def run(slow_factor):
        return {r: [0.04 * load[i] * (slow_factor if r == 2 else 1.0) * (1 + rng.uniform(-0.1, 0.1))
                    for i in range(30)] for r in range(3)}
    assert _flagged(find_stragglers(run(1.0))) == []
    flagged = find_stragglers(run(1.8))
    assert _flagged(flagged) == [2] and 1.6 < flagged[2].ratio < 2.0


def test_one_number_per_rank_uses_the_spread_between_ranks():
    means = {r: 0.040 * (1 + 0.02 * (r % 3)) for r in range(8)}
    assert _flagged(find_stragglers(means)) == []
    means[5] = 0.2
    assert _flagged(find_stragglers(means)) == [5]
    # unequal numbers of steps: compared by their medians
    uneven = {0: [1.0, 1.1], 1: [1.0, 1.05, 0.95], 2: [1.02], 3: [5.0, 5.1]}
    assert _flagged(find_stragglers(uneven)) == [3]


def test_slowed_node_slows_the_local_node_and_always_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import hpcnb.backend
    import hpcnb.lessons.stragglers as stragglers

    calls = []
    monkeypatch.setattr(hpcnb.backend, "which_slurm", lambda: "local")
    monkeypatch.setattr(stragglers.subprocess, "run", lambda argv, **_: calls.append(argv[-3:]))
    with pytest.raises(KeyboardInterrupt), stragglers.slowed_node("node2", 5, rank=2) as extra:
        assert extra == "" and calls == [["slow-node", "node2", "5"]]
        raise KeyboardInterrupt
    assert calls[-1] == ["slow-node", "node2", "1"]


def test_slowed_node_on_a_real_slurm_lets_the_rank_pretend(monkeypatch: pytest.MonkeyPatch) -> None:
    import hpcnb.backend
    import hpcnb.lessons.stragglers as stragglers

    monkeypatch.setattr(hpcnb.backend, "which_slurm", lambda: "real")
    monkeypatch.setattr(stragglers.subprocess, "run", lambda *a, **k: pytest.fail("a real node was touched"))
    with stragglers.slowed_node("node2", 4.5, rank=2) as extra:
        assert extra == "--simulate-slow-rank 2 --simulate-factor 4.5"
