"""Tests for hpcnb.lessons.tuning: CPUs and workers from Slurm, device choice, real measurements, rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcnb.lessons import precision
from hpcnb.lessons import tuning as tu
from hpcnb.lessons.tuning import compiling as tu_compiling
from hpcnb.lessons.tuning import measure as tu_measure
from hpcnb.lessons.tuning import rows as tu_rows

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- CPUs and workers

def test_workers_come_from_slurm_cpus_per_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 128)  # the whole node: never the answer
    assert tu.dataloader_workers({"SLURM_CPUS_PER_TASK": "3"}) == 3
    assert tu.dataloader_workers({"SLURM_CPUS_PER_TASK": "3"}, reserve=1) == 2
    assert tu.dataloader_workers({"SLURM_CPUS_PER_TASK": "1"}, reserve=1) == 0
    assert tu.cpus_for_job({"SLURM_CPUS_PER_TASK": " 8 "}) == 8


def test_without_slurm_the_affinity_mask_counts_not_cpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 128)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5, 7})
    assert tu.cpus_for_job({}) == 3
    assert tu.dataloader_workers({"SLURM_CPUS_PER_TASK": ""}) == 3
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert tu.dataloader_workers() == 3


def test_bad_slurm_cpus_per_task_is_an_error() -> None:
    with pytest.raises(ValueError, match="SLURM_CPUS_PER_TASK"):
        tu.cpus_for_job({"SLURM_CPUS_PER_TASK": "two"})


@pytest.mark.parametrize("cpus", [1, 2])
def test_workers_inside_a_real_job_step_follow_cpus_per_task(cpus: int, tmp_path: Path) -> None:
    code = "from hpcnb.lessons.tuning import dataloader_workers, cpus_for_job; print(cpus_for_job(), dataloader_workers())"
    out = subprocess.run(["srun", "-c", str(cpus), sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(cpus), str(cpus)]


def test_import_hpcnb_tuning_does_not_import_torch() -> None:
    code = "import sys, hpcnb.lessons.tuning, hpcnb.lessons.precision; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# --------------------------------------------------------------------------- device choice

def test_gpu_is_used_only_when_cuda_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tu.device() == "cpu"
    assert tu.precisions("cpu") == ["fp32", "bf16"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert tu.device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert tu.precisions("cuda") == ["fp32", "fp16"]


def test_fp16_is_refused_on_cpu() -> None:
    with pytest.raises(ValueError, match="fp16"):
        tu.measure_step(tu.Config(batch_size=4, precision="fp16"), dev="cpu")


# --------------------------------------------------------------------------- data and model

def test_synthetic_images_are_deterministic_and_shaped() -> None:
    import torch

    ds = tu.SyntheticImages(n=20, size=16, classes=4, work=2, seed=3)
    x1, y1 = ds[7]
    x2, y2 = tu.SyntheticImages(n=20, size=16, classes=4, work=2, seed=3)[7]
    assert x1.shape == (3, 16, 16) and x1.dtype == torch.float32
    assert torch.equal(x1, x2) and y1 == y2
    assert {ds[i][1] for i in range(20)} <= set(range(4))
    assert abs(float(x1.mean())) < 1e-5  # normalised
    with pytest.raises(IndexError):
        ds[20]
    model = tu.make_model(size=16, classes=4)
    assert model(x1[None]).shape == (1, 4)


def test_loader_leaves_out_worker_options_without_workers() -> None:
    ds = tu.SyntheticImages(n=16, work=0)
    cfg = tu.Config(batch_size=4, persistent_workers=True, prefetch_factor=4)
    loader = tu.make_loader(ds, cfg)  # would raise in torch if the options were passed
    assert loader.num_workers == 0 and len(loader) == 4
    with pytest.raises(ValueError, match="fewer than one batch"):
        tu.make_loader(ds, cfg.replace(batch_size=32))


# --------------------------------------------------------------------------- real measurements

def test_measure_step_and_loop_return_positive_throughput() -> None:
    step = tu.measure_step(tu.Config(batch_size=8, threads=1), dev="cpu", seconds=0.05)
    assert step["status"] == "ok" and step["samples_per_s"] > 0 and step["samples"] >= 16
    assert step["threads"] == 1 and step["measure"] == "step"
    ds = tu.SyntheticImages(n=40, work=1)
    loop = tu.measure_loop(tu.Config(batch_size=8, num_workers=1, persistent_workers=True), ds,
                           dev="cpu", epochs=2, setting="x", max_seconds=None)
    assert loop["samples"] == 80 and loop["seconds"] > 0 and loop["samples_per_s"] > 0
    assert loop["num_workers"] == 1 and loop["setting"] == "x"
    for row in (step, loop):  # each measurement's blocks (steps in thirds, epochs) give its spread
        assert row["samples_per_s_min"] <= row["samples_per_s"] <= row["samples_per_s_max"], row


def test_block_rates_are_the_slowest_and_fastest_block() -> None:
    assert tu_measure._block_rates(10.0, [(100, 11.0), (300, 12.0), (350, 12.5)]) == \
        {"samples_per_s_min": 100.0, "samples_per_s_max": 200.0}
    assert tu_measure._block_rates(10.0, [(100, 12.0)]) == {"samples_per_s_min": 50.0, "samples_per_s_max": 50.0}
    assert tu_measure._block_rates(10.0, []) == {}


def test_before_after_rows_carry_the_median_and_the_range_of_their_runs(tmp_path: Path) -> None:
    ds = tu.SyntheticImages(n=32, work=0)
    rows = tu.before_after(tu.Config(batch_size=8, threads=1), tu.Config(batch_size=16, threads=1), ds,
                           dev="cpu", epochs=1, repeats=3)
    for row in rows:
        assert row["samples_per_s_min"] <= row["samples_per_s"] <= row["samples_per_s_max"], row
    back = tu.read_rows(tu.write_rows(tmp_path / "r.csv", rows))
    assert back[1]["samples_per_s_max"] == rows[1]["samples_per_s_max"]  # through the CSV and back


def test_a_slow_loop_stops_at_max_seconds_with_a_note() -> None:
    ds = tu.SyntheticImages(n=64, work=1)
    row = tu.measure_loop(tu.Config(batch_size=4), ds, dev="cpu", epochs=50, max_seconds=0.05)
    assert 0 < row["samples"] < 50 * 64 and row["samples"] % 4 == 0
    assert row["note"] == "stopped after 0.05 s" and row["samples_per_s"] > 0


def test_threads_setting_is_restored_after_a_measurement() -> None:
    import torch

    before = torch.get_num_threads()
    tu.measure_step(tu.Config(batch_size=4, threads=1), dev="cpu", seconds=0.01)
    assert torch.get_num_threads() == before


def test_batch_sweep_measures_each_size() -> None:
    rows = tu.sweep_batch_size(tu.Config(), sizes=[4, 8], dev="cpu", seconds=0.02)
    assert [r["batch_size"] for r in rows] == [4, 8]
    assert all(r["samples_per_s"] > 0 and r["experiment"] == "batch_size" for r in rows)


def test_batch_sweep_stops_at_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    real = tu_measure._measure_step

    def fake(cfg, **kw):
        if cfg.batch_size >= 16:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(cfg, **kw)

    monkeypatch.setattr(tu_measure, "_measure_step", fake)
    rows = tu.sweep_batch_size(tu.Config(), sizes=[4, 8, 16, 32], dev="cpu", seconds=0.01)
    assert [r["status"] for r in rows] == ["ok", "ok", "OOM"]
    assert "out of memory at batch 16" in rows[-1]["note"]
    assert tu.pick_batch(rows, tolerance=1.0) == 4  # OOM rows are never picked


def test_other_errors_are_not_mistaken_for_oom(monkeypatch: pytest.MonkeyPatch) -> None:
    real = tu_measure._measure_step

    def broken(cfg, **kw):
        if cfg.batch_size == 4:
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
        if cfg.batch_size > 8:
            raise RuntimeError("input tensor must fit into 32-bit index math")
        return real(cfg, **kw)

    monkeypatch.setattr(tu_measure, "_measure_step", broken)
    with pytest.raises(RuntimeError, match="shapes"):  # at the first size: a real error, raised
        tu.sweep_batch_size(tu.Config(), sizes=[4], dev="cpu")
    rows = tu.sweep_batch_size(tu.Config(), sizes=[8, 16, 32], dev="cpu", seconds=0.01)
    assert [r["status"] for r in rows] == ["ok", "failed"]
    assert "32-bit index math" in rows[-1]["note"]


def test_profile_split_and_ops() -> None:
    ds = tu.SyntheticImages(n=32, work=2)
    cfg = tu.Config(batch_size=8)
    rows = tu.profile_split(cfg, ds, dev="cpu", batches=2)
    assert [r["setting"] for r in rows] == ["data loading only", "model step only", "training loop"]
    assert all(r["seconds"] > 0 for r in rows)
    ops = tu.profile_ops(cfg, ds, dev="cpu", steps=2, top=5)
    names = [o["name"] for o in ops]
    assert names[:2] == ["[data] (whole range)", "[step] (whole range)"]
    assert len(ops) == 7 and all(o["self_ms"] >= 0 for o in ops)
    assert sum(o["share"] for o in ops[:2]) == pytest.approx(1.0)


def test_loader_options_on_cpu_skip_pin_memory_and_worker_options() -> None:
    ds = tu.SyntheticImages(n=16, work=0)
    rows = tu.compare_loader_options(tu.Config(batch_size=8), ds, dev="cpu", epochs=1)
    by = {r["setting"]: r for r in rows}
    assert by["current"]["status"] == "ok"
    assert by["pin_memory=True"]["status"] == "skipped" and "GPU" in by["pin_memory=True"]["note"]
    assert by["persistent_workers=True"]["status"] == "skipped"
    rows = tu.compare_loader_options(tu.Config(batch_size=8, num_workers=1), ds, dev="cpu", epochs=1)
    assert {r["setting"]: r["status"] for r in rows}["persistent_workers=True"] == "ok"


def test_workers_sweep_shares_cpus_between_workers_and_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    ds = tu.SyntheticImages(n=16, work=0)
    rows = tu.sweep_workers(tu.Config(batch_size=8), ds, dev="cpu", epochs=1)
    assert [(r["num_workers"], r["threads"]) for r in rows] == [(0, 2), (1, 1), (2, 1)]


def test_precision_rows_on_cpu() -> None:
    ds = tu.SyntheticImages(n=16, work=0)
    rows = tu.compare_precision(tu.Config(batch_size=8), ds, dev="cpu", epochs=1)
    assert [r["precision"] for r in rows] == ["fp32", "bf16"]
    assert all(r["samples_per_s"] > 0 for r in rows)


def test_compile_is_skipped_with_a_note_when_unavailable_or_over_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    ds = tu.SyntheticImages(n=16, work=0)
    rows = tu.measure_compile(tu.Config(batch_size=8), ds, dev="cpu", budget_s=0.5)
    assert len(rows) == 1 and rows[0]["status"] == "skipped" and "budget" in rows[0]["note"]
    monkeypatch.setattr(tu_compiling, "compile_available", lambda: (False, "no C++ compiler"))
    rows = tu.measure_compile(tu.Config(batch_size=8), ds, dev="cpu")
    assert rows[0]["status"] == "skipped" and "unavailable: no C++ compiler" in rows[0]["note"]


# --------------------------------------------------------------------------- choosing and storing

def _rows(*rates: float, experiment: str = "x") -> list[dict]:
    return [tu_rows._row(experiment, str(i), "loop", tu.Config(num_workers=i), "cpu", samples_per_s=r)
            for i, r in enumerate(rates)]


def test_best_config_needs_a_clear_gain_over_the_current_setting() -> None:
    assert tu.best_config(_rows(100, 104, 90)).num_workers == 0   # +4 %: noise, keep current
    assert tu.best_config(_rows(100, 104, 130)).num_workers == 2
    assert tu.best_config(_rows(100, 104), min_gain=0.0).num_workers == 1


def test_best_config_keeps_a_change_only_beyond_its_spread() -> None:
    rows = _rows(100, 120)
    rows[0].update(samples_per_s_min=90.0, samples_per_s_max=110.0)
    rows[1].update(samples_per_s_min=105.0, samples_per_s_max=125.0)   # 1.20x, but 0.95-1.39x
    assert tu.best_config(rows).num_workers == 0
    assert tu.sweep_verdict(rows) == "kept the current setting (0): 1 was 1.20x, but its range 0.95-1.39x covers 1x"
    rows[1].update(samples_per_s_min=115.0)
    assert tu.best_config(rows).num_workers == 1
    assert tu.sweep_verdict(rows) == "kept 1: 1.20x (1.05-1.39x) the samples/s of 0"
    assert tu.sweep_verdict(_rows(100, 104)) == "kept the current setting (0): 1 was 1.04x, not 5% faster"
    assert tu.sweep_verdict(_rows(100, 90)) == "kept the current setting (0): it was the fastest"


def test_pick_batch_takes_the_knee() -> None:
    rows = [tu_rows._row("batch_size", str(b), "step", tu.Config(batch_size=b), "cpu", samples_per_s=r)
            for b, r in [(16, 500), (32, 880), (64, 960), (128, 1000), (2048, 5000)]]
    assert tu.pick_batch(rows, tolerance=0.10, cap=1024) == 64
    assert tu.pick_batch(rows, tolerance=0.10, cap=None) == 2048


def test_rows_round_trip_through_csv(tmp_path: Path) -> None:
    rows = _rows(100.5, 200.25)
    rows[1]["note"] = "a, b | c"
    tu.write_rows(tmp_path / "r.csv", rows)
    back = tu.read_rows(tmp_path / "r.csv")
    assert back[1]["samples_per_s"] == 200.25 and back[1]["num_workers"] == 1
    assert back[0]["pin_memory"] is False and back[0]["prefetch_factor"] is None
    assert back[1]["note"] == "a, b | c"
    assert tu.Config.from_row(back[1]) == tu.Config(num_workers=1)
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a tuning results file"):
        tu.read_rows(tmp_path / "bad.csv")


def test_markdown_table_and_plot() -> None:
    import matplotlib

    matplotlib.use("Agg")
    text = tu.markdown_table(_rows(1234.5, 0.5), ["setting", "samples_per_s", "pin_memory", "note"])
    lines = text.splitlines()
    assert lines[0] == "| setting | samples_per_s | pin_memory | note |"
    assert "1,234" in lines[2] and "| no |" in lines[2]
    rows = ([tu_rows._row("batch_size", "8", "step", tu.Config(batch_size=8), "cpu", samples_per_s=10.0),
             tu_rows._row("batch_size", "16", "step", tu.Config(batch_size=16), "cpu", status="OOM")]
            + _rows(5, 6, experiment="num_workers") + _rows(5, 9, experiment="before_after"))
    fig = tu.plot_tuning(rows)
    assert len(fig.axes) == 3


@pytest.mark.slow
def test_compile_measures_eager_and_compiled_when_it_fits_the_budget() -> None:
    ok, why = tu.compile_available()
    if not ok:
        pytest.skip(why)
    ds = tu.SyntheticImages(n=64, work=0)
    rows = tu.measure_compile(tu.Config(batch_size=16, threads=1), ds, dev="cpu", epochs=1, budget_s=400)
    assert [r["setting"] for r in rows] == ["eager", "compiled"], rows
    assert all(r["status"] == "ok" and r["samples_per_s"] > 0 for r in rows)
    assert rows[1]["compile"] is True and "compiling took" in rows[1]["note"]


def test_the_before_after_speedup_is_judged_by_the_runs_spread() -> None:
    before = {"samples_per_s": 100.0, "samples_per_s_min": 90.0, "samples_per_s_max": 110.0}
    clearly = {"samples_per_s": 150.0, "samples_per_s_min": 140.0, "samples_per_s_max": 160.0}
    barely = {"samples_per_s": 107.0, "samples_per_s_min": 95.0, "samples_per_s_max": 115.0}
    ratio, low, high, said = tu.speedup(before, clearly)
    assert (ratio, low, high) == (1.5, 140 / 110, 160 / 90) and said == "the tuned loop is faster"
    assert "did not measurably help" in tu.speedup(before, barely)[3]  # 1.07x, inside the spread
    assert tu.speedup(clearly, before)[3] == "the tuned loop is slower"
    assert tu.speedup({"samples_per_s": 100.0}, {"samples_per_s": 50.0})[:3] == (0.5, 0.5, 0.5)  # one run each


# --------------------------------------------------------------------------- bottleneck and the GPU's knobs

def _profile(load: tuple[float, float], step: tuple[float, float], loop: float) -> list[dict]:
    """profile_split-like rows from (slowest, fastest) samples/s of loading and of the step alone."""
    rows = []
    for name, (low, high) in (("data loading only", load), ("model step only", step), ("training loop", (loop, loop))):
        rows.append(tu_rows._row("profile", name, "profile", tu.Config(batch_size=1024), "cuda",
                            samples_per_s=(low + high) / 2, samples_per_s_min=low, samples_per_s_max=high))
    return rows


def test_bottleneck_names_the_slower_part_beyond_the_spread() -> None:
    name, text = tu.bottleneck(_profile((1500, 1800), (380_000, 420_000), 1650))  # the H200's figures
    assert name == "data loading"
    assert text.startswith("bottleneck: data loading (data loading alone 1,650 samples/s, model step alone 400,000)")
    assert text.endswith("the training loop runs 1,650 samples/s, 0.4% of the model step alone")
    assert tu.bottleneck(_profile((900_000, 1e6), (380_000, 420_000), 390_000))[0] == "the device"
    assert tu.bottleneck(_profile((350_000, 450_000), (380_000, 420_000), 300_000))[0] == "no conclusion"
    with pytest.raises(ValueError, match="training loop"):
        tu.bottleneck(_profile((1, 2), (3, 4), 1)[:2])


def test_profile_split_rows_carry_their_spread_and_name_a_bottleneck() -> None:
    rows = tu.profile_split(tu.Config(batch_size=8), tu.SyntheticImages(n=32, work=2), dev="cpu", batches=3,
                            experiment="profile_tuned")
    for row in rows:
        assert row["experiment"] == "profile_tuned"
        assert row["samples_per_s_min"] <= row["samples_per_s"] <= row["samples_per_s_max"], row
    assert tu.bottleneck(rows)[0] in ("data loading", "the device", "no conclusion")


def _sweep(*rates: tuple[float, float]) -> list[dict]:
    return [tu_rows._row("batch_size", str(16 * 2**i), "step", tu.Config(batch_size=16 * 2**i), "cuda",
                    samples_per_s=(lo + hi) / 2, samples_per_s_min=lo, samples_per_s_max=hi)
            for i, (lo, hi) in enumerate(rates)]


def test_batch_sweep_stops_where_throughput_stops_growing_beyond_its_spread() -> None:
    growing = _sweep((100, 110), (190, 210), (390, 410))
    assert not tu.stopped_growing(growing)
    level = _sweep((100, 110), (190, 210), (200, 215), (205, 220))  # both last sizes within the best's spread
    assert tu.stopped_growing(level)
    assert not tu.stopped_growing(level[:3])  # one flat size is not yet enough
    assert not tu.stopped_growing(_sweep((100, 110), (190, 210), (200, 215), (260, 280)))


def test_batch_sweep_ends_at_the_plateau_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    rates = {4: 100.0, 8: 200.0, 16: 205.0, 32: 203.0, 64: 900.0}

    def fake(cfg, **kw):
        r = rates[cfg.batch_size]
        return tu_rows._row("batch_size", str(cfg.batch_size), "step", cfg, "cpu", samples_per_s=r,
                       samples_per_s_min=0.95 * r, samples_per_s_max=1.05 * r)

    monkeypatch.setattr(tu_measure, "_measure_step", fake)
    rows = tu.sweep_batch_size(tu.Config(), sizes=[4, 8, 16, 32, 64], dev="cpu")
    assert [r["batch_size"] for r in rows] == [4, 8, 16, 32]
    assert "stopped growing" in rows[-1]["note"]
    assert len(tu.sweep_batch_size(tu.Config(), sizes=[4, 8, 16, 32, 64], dev="cpu", patience=None)) == 5


def test_device_batches_follow_the_datasets_recipe_on_the_device() -> None:
    ds = tu.SyntheticImages(n=40, work=2)
    batches = list(tu.make_loader(ds, tu.Config(batch_size=16, data_on_device=True), dev="cpu"))
    assert len(batches) == 2
    x, y = batches[0]
    assert x.shape == (16, 3, 32, 32) and y.shape == (16,) and int(y.max()) < ds.classes
    assert abs(float(x.mean())) < 1e-4 and abs(float(x[0].std()) - 1) < 1e-3  # normalised per image
    # max_seconds=None: every batch, however busy the machine (the 2 s cap stopped it at 32 samples once)
    loop = tu.measure_loop(tu.Config(batch_size=8, data_on_device=True), ds, dev="cpu", epochs=1, max_seconds=None)
    assert loop["samples"] == 40 and loop["data_on_device"] is True
    with pytest.raises(ValueError, match="fewer than one batch"):
        tu.DeviceBatches(ds, 64, "cpu")


def test_device_options_on_cpu_skip_tf32_and_try_channels_last() -> None:
    rows = tu.compare_device_options(tu.Config(batch_size=8), tu.SyntheticImages(n=16, work=0), dev="cpu", epochs=1)
    assert [(r["setting"], r["status"]) for r in rows] == [
        ("current", "ok"), ("tf32=True", "skipped"), ("channels_last=True", "ok")]
    assert rows[2]["channels_last"] is True and "GPU" in rows[1]["note"]
    with pytest.raises(ValueError, match="TF32"):
        tu.measure_step(tu.Config(tf32=True), dev="cpu")


def test_compile_budget_is_longer_on_a_gpu_and_the_skip_says_whose() -> None:
    assert tu.compile_budget("cuda") > tu.compile_budget("cpu") >= 30
    rows = tu.measure_compile(tu.Config(batch_size=8), tu.SyntheticImages(n=16, work=0), dev="cpu", budget_s=0.5)
    assert "0.5 s budget on cpu" in rows[0]["note"]


def test_new_knobs_round_trip_through_csv(tmp_path: Path) -> None:
    cfg = tu.Config(data_on_device=True, tf32=True, channels_last=True)
    row = tu_rows._row("device", "x", "loop", cfg, "cuda", samples_per_s=1.0)
    assert tu.Config.from_row(tu.read_rows(tu.write_rows(tmp_path / "r.csv", [row]))[0]) == cfg


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_batches_are_made_there_and_tf32_follows_the_config() -> None:
    import torch

    ds = tu.SyntheticImages(n=64, work=2)
    x, y = next(iter(tu.make_loader(ds, tu.Config(batch_size=32, data_on_device=True), dev="cuda")))
    assert x.is_cuda and y.is_cuda
    rows = tu.compare_device_options(tu.Config(batch_size=32, data_on_device=True), ds, dev="cuda", epochs=1)
    assert [r["setting"] for r in rows] == ["current", "tf32=True", "channels_last=True"]
    assert all(r["status"] == "ok" for r in rows)
    tu_measure._Trainer(tu.Config(tf32=False), "cuda")
    assert precision.tf32_state() in ({'matmul': 'ieee', 'conv': 'ieee'}, {'matmul': False, 'conv': False})
    name, _ = tu.bottleneck(tu.profile_split(tu.Config(batch_size=32, data_on_device=True), ds, dev="cuda"))
    assert name in ("data loading", "the device", "no conclusion")


def test_a_gpu_slot_without_a_device_is_named_as_such() -> None:
    """Lesson 6 on a CPU machine: CUDA_VISIBLE_DEVICES=0 is Slurm's index, not "zero GPUs"."""
    from hpcnb.lessons.tuning import gpu_note

    assert gpu_note("cpu", {"CUDA_VISIBLE_DEVICES": "0"}) == "GPU slot 0, no device: runs on the CPU"
    assert gpu_note("cpu", {}) == "no GPU"
