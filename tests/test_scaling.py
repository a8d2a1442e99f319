"""Tests for hpcnb.lessons.scaling: hand-checked speed-ups, Amdahl recovery, CSV, errors, plot."""

from __future__ import annotations

import math
import os
import random
import re
from pathlib import Path

import pytest

from hpcnb.lessons import scaling as sc


def amdahl_rows(s: float, t1: float = 100.0, tasks=(1, 2, 4, 8, 16),
                noise: float = 0.0, repeats: int = 1, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"tasks": n, "nodes": 1, "seconds": t1 * (s + (1 - s) / n) * (1 + rng.gauss(0, noise))}
            for n in tasks for _ in range(repeats)]


def test_strong_speedup_efficiency_hand_checked() -> None:
    rows = [{"tasks": 1, "nodes": 1, "seconds": 120.0},
            {"tasks": 2, "nodes": 1, "seconds": 80.0},
            {"tasks": 4, "nodes": 2, "seconds": 50.0}]
    out = sc.speedup_efficiency(rows)
    assert [r.speedup for r in out] == pytest.approx([1.0, 1.5, 2.4])
    assert [r.efficiency for r in out] == pytest.approx([1.0, 0.75, 0.6])
    assert [r.nodes for r in out] == [1, 1, 2]


def test_weak_efficiency_is_t1_over_tn() -> None:
    rows = [{"tasks": 1, "nodes": 1, "seconds": 60, "samples": 1000, "kind": "weak"},
            {"tasks": 4, "nodes": 1, "seconds": 75, "samples": 4000, "kind": "weak"}]
    out = sc.speedup_efficiency(rows)
    assert out[1].efficiency == pytest.approx(0.8)
    assert out[1].speedup == pytest.approx(3.2)  # scaled speed-up = 4 * 0.8
    assert out[1].throughput == pytest.approx(4000 / 75)


def test_baseline_is_median_of_repeats_and_smallest_task_count() -> None:
    rows = [{"tasks": 2, "nodes": 1, "seconds": t} for t in (10, 11, 30)]
    rows.append({"tasks": 8, "nodes": 1, "seconds": 5.5})
    out = sc.speedup_efficiency(rows)
    last = out[-1]
    assert (last.base_tasks, last.ideal) == (2, 4)
    assert last.speedup == pytest.approx(11 / 5.5)
    assert last.efficiency == pytest.approx(0.5)


def test_fit_recovers_exact_serial_fraction() -> None:
    fit = sc.fit_amdahl(amdahl_rows(0.1))
    assert fit.serial_fraction == pytest.approx(0.1, abs=0.01)
    assert fit.t1 == pytest.approx(100)
    assert fit.max_speedup == pytest.approx(10)
    assert fit.predicted[4] == pytest.approx(1 / (0.1 + 0.9 / 4))
    assert fit.rms_residual_s < 1e-9


def test_fit_recovers_serial_fraction_from_noisy_timings() -> None:
    # 3 % multiplicative noise, 3 repeats: the estimate must stay within 0.02
    for seed in range(5):
        fit = sc.fit_amdahl(amdahl_rows(0.1, noise=0.03, repeats=3, seed=seed,
                                        tasks=(1, 2, 4, 8, 16, 32)))
        assert abs(fit.serial_fraction - 0.1) < 0.02, (seed, fit)


def test_fit_with_only_1_2_4_tasks() -> None:
    fit = sc.fit_amdahl(amdahl_rows(0.25, tasks=(1, 2, 4)))
    assert fit.serial_fraction == pytest.approx(0.25, abs=1e-9)


def test_fit_clips_to_unit_interval() -> None:
    superlinear = [{"tasks": n, "nodes": 1, "seconds": 100 / n ** 1.2} for n in (1, 2, 4, 8)]
    assert sc.fit_amdahl(superlinear).serial_fraction == 0
    assert math.isinf(sc.fit_amdahl(superlinear).max_speedup)
    slower = [{"tasks": n, "nodes": 1, "seconds": 10 + n} for n in (1, 2, 4)]
    assert sc.fit_amdahl(slower).serial_fraction == 1


def test_fit_needs_two_task_counts_and_strong_rows() -> None:
    with pytest.raises(ValueError, match="at least two different task counts"):
        sc.fit_amdahl([{"tasks": 2, "nodes": 1, "seconds": 3}] * 2)
    with pytest.raises(ValueError, match="gustafson"):
        sc.fit_amdahl([{"tasks": 1, "nodes": 1, "seconds": 3, "kind": "weak"}])


def test_amdahl_and_gustafson_formulas() -> None:
    assert sc.amdahl_speedup(0.1, 4) == pytest.approx(1 / 0.325)
    assert sc.gustafson_speedup(0.1, 4) == pytest.approx(3.7)
    assert sc.gustafson_speedup(0, 8) == 8 and sc.gustafson_speedup(1, 8) == 1
    with pytest.raises(ValueError, match=r"serial fraction s must be a number in \[0, 1\]"):
        sc.gustafson_speedup(1.5, 2)
    with pytest.raises(ValueError, match="n must be >= 1"):
        sc.gustafson_speedup(0.1, 0)


def test_batch_and_lr_rules() -> None:
    assert sc.global_batch(32, 4) == 128
    assert sc.global_batch(32, 4, accumulation=2) == 256
    assert sc.lr_scaling(0.1, 256, 1024) == pytest.approx(0.4)
    assert sc.lr_scaling(0.1, 256, 1024, rule="sqrt") == pytest.approx(0.2)
    with pytest.raises(ValueError, match="rule='cubic'"):
        sc.lr_scaling(0.1, 256, 1024, rule="cubic")
    with pytest.raises(ValueError, match="base_batch must be a positive number"):
        sc.lr_scaling(0.1, 0, 1024)
    with pytest.raises(ValueError, match="tasks must be a positive integer"):
        sc.global_batch(32, 0)


def test_csv_round_trip_keeps_extras(tmp_path: Path) -> None:
    rows = [sc.Run(1, 1, 12.5, 5000, "strong", {"job_id": "101"}),
            sc.Run(2, 1, 6.75, 5000, "strong", {"job_id": "102"}),
            sc.Run(4, 2, 4.125, 20000, "weak", {"job_id": "103"})]
    path = sc.write_runs(tmp_path / "runs.csv", rows)
    assert path.read_text().splitlines()[0] == "tasks,nodes,seconds,samples,kind,job_id"
    back = sc.read_runs(path)
    assert back == rows
    assert [r.extra for r in back] == [r.extra for r in rows]


def test_csv_minimal_columns_default_to_strong(tmp_path: Path) -> None:
    p = tmp_path / "runs.csv"
    p.write_text("tasks,nodes,seconds\n1,1,10\n2,1,5.5\n")
    runs = sc.read_runs(p)
    assert [(r.kind, r.samples) for r in runs] == [("strong", None)] * 2


@pytest.mark.parametrize("text, message", [
    ("tasks,nodes\n1,1\n", "missing column.*'seconds'"),
    ("tasks,nodes,seconds\n1,1,0\n", r"row 1: 'seconds' must be > 0"),
    ("tasks,nodes,seconds\n1,1,10\n-2,1,5\n", r"row 2: 'tasks' must be > 0"),
    ("tasks,nodes,seconds\n1.5,1,10\n", "'tasks' must be a whole number"),
    ("tasks,nodes,seconds\n1,1,fast\n", "'seconds'='fast' is not a number"),
    ("tasks,nodes,seconds\n1,1,\n", "'seconds' is empty"),
    ("tasks,nodes,seconds,kind\n1,1,3,medium\n", "kind='medium'"),
    ("tasks,nodes,seconds\n2,4,3\n", "nodes=4 > tasks=2"),
    ("tasks,nodes,seconds,samples\n1,1,3,100\n2,1,2,200\n", "different total work"),
    ("tasks,nodes,seconds\n", "no runs"),
    ("", "empty file"),
])
def test_bad_csv_errors_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "runs.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=message):
        sc.read_runs(p)


def test_weak_rows_must_scale_work_with_tasks() -> None:
    with pytest.raises(ValueError, match="different work per task"):
        sc.validate_runs([{"tasks": 1, "nodes": 1, "seconds": 1, "samples": 100, "kind": "weak"},
                          {"tasks": 2, "nodes": 1, "seconds": 1, "samples": 100, "kind": "weak"}])


def test_format_table() -> None:
    md = sc.format_table(amdahl_rows(0.1, tasks=(1, 2, 4)))
    assert "| strong | 4 | 1 | 32.5 | 4x | 3.08x | 77% | - |" in md


def test_speedup_range_from_each_runs_fastest_and_slowest_repeat() -> None:
    rows = [{"tasks": 1, "nodes": 1, "seconds": 10, "seconds_max": 12, "samples": 100},
            {"tasks": 2, "nodes": 1, "seconds": 6, "seconds_max": 8, "samples": 100},
            {"tasks": 2, "nodes": 1, "seconds": 10, "seconds_max": 11, "samples": 200, "kind": "weak"},
            {"tasks": 1, "nodes": 1, "seconds": 10, "seconds_max": 12, "samples": 100, "kind": "weak"}]
    strong_1, strong_2, weak_1, weak_2 = sc.speedup_efficiency(rows)
    assert (strong_1.speedup_low, strong_1.speedup_high) == pytest.approx((10 / 12, 12 / 10))
    assert (strong_2.speedup, strong_2.speedup_low, strong_2.speedup_high) == pytest.approx((10 / 6, 10 / 8, 12 / 6))
    assert (weak_2.speedup, weak_2.speedup_low, weak_2.speedup_high) == pytest.approx((2.0, 2 * 10 / 11, 2 * 12 / 10))
    md = sc.format_table(rows)
    assert "| kind | tasks | nodes | seconds | ideal | speed-up | range | efficiency | samples/s |" in md
    assert "| strong | 2 | 1 | 6 | 2x | 1.67x | 1.25-2.00x | 83% | 16.7 |" in md


def test_speedup_range_needs_every_run_timed_twice() -> None:
    rows = [{"tasks": 1, "nodes": 1, "seconds": 10, "seconds_max": 12},
            {"tasks": 2, "nodes": 1, "seconds": 6}]
    assert [r.speedup_low for r in sc.speedup_efficiency(rows)] == [pytest.approx(10 / 12), None]
    assert "| strong | 2 | 1 | 6 | 2x | 1.67x | - | 83% | - |" in sc.format_table(rows)
    assert "range" not in sc.format_table([{"tasks": 1, "nodes": 1, "seconds": 10}])


@pytest.mark.parametrize("slowest, message", [("x", "'seconds_max'='x' is not a number"),
                                              (5, "seconds_max=5 < seconds=6")])
def test_seconds_max_checked(slowest, message) -> None:
    with pytest.raises(ValueError, match=re.escape(f"rows row 1: {message}")):
        sc.validate_runs([{"tasks": 1, "nodes": 1, "seconds": 6, "seconds_max": slowest}])


def test_plot_scaling_lines_and_png(tmp_path: Path) -> None:
    rows = amdahl_rows(0.1, tasks=(1, 2, 4, 8), noise=0.02, repeats=2, seed=3)
    fit = sc.fit_amdahl(rows)
    fig = sc.plot_scaling(rows, fit=fit, cores_available=2)
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["ideal (linear)", "measured",
                      f"Amdahl fit, s = {fit.serial_fraction:.2f}, max {fit.max_speedup:.1f}x",
                      "beyond this machine's 2 cores"]
    measured = ax.get_lines()[1]
    assert list(measured.get_xdata()) == [1, 2, 4, 8]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == labels
    assert len(ax.patches) == 1  # the shaded region beyond the real cores
    out = tmp_path / "scaling.png"
    fig.savefig(out, dpi=80)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_scaling_without_fit_or_cores() -> None:
    fig = sc.plot_scaling([{"tasks": 1, "nodes": 1, "seconds": 2},
                           {"tasks": 2, "nodes": 1, "seconds": 1.2}])
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["ideal (linear)", "measured"]
    assert not ax.patches
    fig2 = sc.plot_scaling(amdahl_rows(0.2, tasks=(1, 2, 4)), fit=True)
    assert any(line.get_label().startswith("Amdahl fit, s = 0.20")
               for line in fig2.axes[0].get_lines())
    # fit=True with cores_available fits only the runs that had a core each
    two_core = [{"tasks": 1, "nodes": 1, "seconds": 40.0}, {"tasks": 2, "nodes": 1, "seconds": 22.0},
                {"tasks": 4, "nodes": 1, "seconds": 21.5}]
    fig3 = sc.plot_scaling(two_core, fit=True, cores_available=2)
    fit_label = fig3.axes[0].get_lines()[2].get_label()
    s_two = sc.fit_amdahl(two_core, max_tasks=2).serial_fraction
    assert s_two == pytest.approx(2 * 22 / 40 - 1)  # exact through two points
    assert fit_label == f"Amdahl fit, s = {s_two:.2f}, max {1 / s_two:.1f}x; fit on tasks <= 2"
    assert sc.fit_amdahl(two_core).serial_fraction > s_two + 0.1  # oversubscription biases s
    with pytest.raises(ValueError, match="cores_available"):
        sc.plot_scaling(amdahl_rows(0.2), cores_available=0)


def test_gustafson_fraction_is_the_n_task_runs_serial_share() -> None:
    # s_A refers to the 1-task run, s_G to the N-task run of the same problem:
    # converted, Gustafson's formula gives back Amdahl's speed-up.
    for s_a in (0.0, 0.05, 0.424, 1.0):
        for n in (1, 2, 4, 64):
            s_g = sc.gustafson_fraction(s_a, n)
            assert sc.gustafson_speedup(s_g, n) == pytest.approx(sc.amdahl_speedup(s_a, n))
    assert sc.gustafson_fraction(0.1, 4) == pytest.approx(0.1 / 0.325)
    assert sc.gustafson_fraction(0.1, 1) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="serial fraction"):
        sc.gustafson_fraction(-0.1, 2)


def weak_rows(s: float, tasks=(1, 2, 4, 8), t1: float = 10.0) -> list[dict]:
    # scaled speed-up N * T1 / T_N made to follow Gustafson's law exactly
    return [{"tasks": n, "nodes": 1, "kind": "weak", "samples": 100 * n,
             "seconds": n * t1 / sc.gustafson_speedup(s, n)} for n in tasks]


def test_fit_gustafson_recovers_s_and_says_when_exact() -> None:
    fit = sc.fit_gustafson(weak_rows(0.2))
    assert fit.serial_fraction == pytest.approx(0.2)
    assert fit.rms_residual < 1e-9 and fit.tasks == (1, 2, 4, 8) and not fit.exact
    assert fit.speedup(16) == pytest.approx(0.2 + 0.8 * 16)
    assert "s_G = 0.200" in str(fit) and "by construction" not in str(fit)
    two = sc.fit_gustafson(weak_rows(0.2), max_tasks=2)
    assert two.exact and two.tasks == (1, 2) and "by construction" in str(two)
    assert sc.fit_gustafson(weak_rows(0.0)).serial_fraction == 0
    strong = amdahl_rows(0.1, tasks=(1, 2))
    assert sc.fit_amdahl(strong).exact and "by construction" in str(sc.fit_amdahl(strong))
    assert not sc.fit_amdahl(amdahl_rows(0.1, tasks=(1, 2, 4))).exact
    with pytest.raises(ValueError, match="fit_amdahl"):
        sc.fit_gustafson(amdahl_rows(0.1))
    with pytest.raises(ValueError, match="at least one larger task count"):
        sc.fit_gustafson(weak_rows(0.2, tasks=(2,)))


def test_shared_cores_and_the_busy_note_only_where_nodes_share_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    import hpcnb.backend
    from hpcnb.lessons.scaling import busy_machine_note, shared_cores

    monkeypatch.setattr(hpcnb.backend, "which_slurm", lambda: "real")
    assert shared_cores() is None and busy_machine_note(5.0) == ""
    monkeypatch.setattr(hpcnb.backend, "which_slurm", lambda: "local")
    assert shared_cores() == len(os.sched_getaffinity(0))
    assert "expect noisy times" in busy_machine_note(5.0)
    assert "expect noisy times" not in busy_machine_note(0.5)
