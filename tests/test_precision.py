"""Tests for hpcnb.lessons.precision: exact TF32 emulation, error growth, switches, CPU/GPU case selection."""

from __future__ import annotations

import math
import struct

import pytest

torch = pytest.importorskip("torch")

from hpcnb.lessons import precision as pr  # noqa: E402


def f32_bits(value: float) -> int:
    return struct.unpack(">I", struct.pack(">f", value))[0]


# --------------------------------------------------------------------------- rounding, bit-exact

@pytest.mark.parametrize("value, expected", [
    (math.pi, 3.140625),                        # 1.1001001000|0111... -> rounds down
    (-math.pi, -3.140625),
    (1 / 3, 0.333251953125),                    # 1.0101010101|0101... x 2^-2 -> down
    (1 + 2**-10, 1 + 2**-10),                   # exactly representable
    (1 + 2**-11, 1.0),                          # a tie: to even (last kept bit 0)
    (1 + 3 * 2**-11, 1 + 2**-9),                # a tie: to even (last kept bit 1 -> up)
    (1 + 2**-11 + 2**-20, 1 + 2**-10),          # above the tie: up
    (1.0001, 1.0),                              # why a TF32 sum of 1024 x 1.0001 gives 1024.0
    (2**-10 * (2 - 2**-10) * 2**5, 2**-10 * (2 - 2**-10) * 2**5),
    (65519.0, 65504.0),                         # same mantissa limit as fp16 ...
    (2.0**100 * (1 + 2**-11 + 2**-12), 2.0**100 * (1 + 2**-10)),  # ... but float32's range
])
def test_tf32_rounding_matches_the_10_bit_mantissa(value: float, expected: float) -> None:
    got = pr.to_tf32(torch.tensor([value]))
    assert got.dtype == torch.float32
    assert f32_bits(float(got[0])) == f32_bits(float(torch.tensor(expected, dtype=torch.float32)))
    assert f32_bits(float(got[0])) & 0x1FFF == 0  # the 13 dropped mantissa bits are zero


def test_truncation_mode_rounds_toward_zero() -> None:
    x = torch.tensor([1 + 2**-10 - 2**-23, -(1 + 2**-10 - 2**-23), 1 + 2**-11 + 2**-20])
    assert pr.to_tf32(x, rounding="truncate").tolist() == [1.0, -1.0, 1.0]
    assert pr.to_tf32(x).tolist() == [1 + 2**-10, -(1 + 2**-10), 1 + 2**-10]


def test_special_values_pass_through() -> None:
    x = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-40, 3.4028235e38])
    got = pr.to_tf32(x)
    assert got[0] == 0 and math.copysign(1, float(got[1])) == -1
    assert got[2] == math.inf and got[3] == -math.inf and math.isnan(float(got[4]))
    assert f32_bits(float(got[5])) & 0x1FFF == 0   # subnormals keep their top 10 stored bits
    assert got[6] == math.inf                       # rounding up past the largest float32 overflows


def test_7_bit_rounding_is_bit_identical_to_torch_bfloat16() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200_000, generator=g) * torch.exp(torch.randn(200_000, generator=g) * 20)
    ties = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 5 + 2**-6])
    for v in (x, ties):
        assert torch.equal(pr.to_bf16(v), v.bfloat16().float())


def test_rounding_argument_checks_and_identity() -> None:
    x = torch.randn(100)
    assert torch.equal(pr.round_mantissa(x, 23), x)
    with pytest.raises(ValueError):
        pr.round_mantissa(x, 24)
    with pytest.raises(ValueError):
        pr.round_mantissa(x, 10, rounding="up")


def test_bit_string_marks_the_tf32_cut() -> None:
    assert pr.bit_string(1.0) == "0 01111111 0000000000|0000000000000"
    assert pr.bit_string(-2.5) == "1 10000000 0100000000|0000000000000"
    assert pr.bit_string(math.pi).split("|")[0] == "0 10000000 1001001000"


def test_formats_from_bit_layout() -> None:
    by = {r["format"]: r for r in pr.formats()}
    assert by["tf32"]["eps"] == 2**-10 and by["bf16"]["eps"] == 2**-7
    assert by["fp16"]["max"] == 65504.0 and by["tf32"]["bits used"] == 19
    assert by["fp32"]["max"] == pytest.approx(3.4028235e38)


# --------------------------------------------------------------------------- the accuracy effect

def test_emulated_error_is_far_above_fp32_and_grows_with_size() -> None:
    rows = pr.emulated_matmul_errors((32, 256, 2048), rows=32)
    err = {(r["n"], r["format"]): r for r in rows}
    for n in (32, 256, 2048):
        assert err[(n, "tf32")]["rel_error"] > 100 * err[(n, "fp32")]["rel_error"]
        assert err[(n, "bf16")]["rel_error"] > 4 * err[(n, "tf32")]["rel_error"]
        assert err[(n, "tf32")]["how"] == "emulated" and err[(n, "fp32")]["how"].startswith("measured")
        # relative error of TF32 inputs: on the order of its unit roundoff 2^-11
        assert 2**-16 < err[(n, "tf32")]["rel_error"] < 2**-9
    assert err[(2048, "tf32")]["max_abs_error"] > 2 * err[(32, "tf32")]["max_abs_error"]


def test_tf32_sum_of_1024_times_1_0001_is_1024() -> None:
    a = torch.full((1, 1024), 1.0001)
    b = torch.ones(1024, 1)
    assert float(pr.emulated_matmul(a, b, "tf32")) == 1024.0
    assert float(a @ b) == pytest.approx(1024.1, abs=0.02)  # float32 keeps the 0.1


def test_emulated_training_learns_and_tf32_stays_close_to_fp32() -> None:
    rows = pr.emulated_training(steps=60, every=20)
    last = {r["format"]: r for r in rows if r["step"] == 59}
    first = {r["format"]: r for r in rows if r["step"] == 0}
    assert set(last) == {"fp32", "tf32", "bf16"}
    for fmt in last:
        assert math.isfinite(last[fmt]["eval_loss"]) and last[fmt]["eval_loss"] < first[fmt]["eval_loss"]
    assert last["tf32"]["eval_loss"] == pytest.approx(last["fp32"]["eval_loss"], rel=0.05)
    assert last["tf32"]["eval_loss"] != last["fp32"]["eval_loss"]  # the rounding really happened
    assert last["tf32"]["how"] == "emulated"


def test_rounded_linear_gradients_match_rounded_math() -> None:
    fn = pr._Rounded.get()
    x = torch.randn(5, 7, requires_grad=True)
    w = torch.randn(3, 7, requires_grad=True)
    out = fn.apply(x, w, 10)
    g = torch.randn(3, 5).t()
    out.backward(g)
    assert torch.equal(out, pr.to_tf32(x) @ pr.to_tf32(w).t())
    assert torch.equal(x.grad, pr.to_tf32(g) @ pr.to_tf32(w))
    assert torch.equal(w.grad, pr.to_tf32(g).t() @ pr.to_tf32(x))


# --------------------------------------------------------------------------- switches and cases

def test_switches_show_the_fp32_precision_api_first_with_live_values() -> None:
    rows = [r["switch"] for r in pr.switches()]
    assert pr.has_fp32_precision()  # the course's torch (2.13) has it: the lesson teaches it first
    assert rows[:3] == ["torch.backends.fp32_precision", "torch.backends.cuda.matmul.fp32_precision",
                        "torch.backends.cudnn.conv.fp32_precision"]
    assert "torch.backends.cuda.matmul.allow_tf32" in rows[3:]
    by = {r["switch"]: r for r in pr.switches()}
    assert by["torch.backends.cuda.matmul.fp32_precision"]["default"] == "none"
    assert by["torch.backends.cudnn.conv.fp32_precision"]["default"] == "tf32"


def _in_a_fresh_python(code: str) -> str:
    """Run ``code`` in a new interpreter (torch's TF32 settings are process-wide) and return its stdout."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_tf32_sets_and_restores_through_the_new_api_without_reading_an_old_flag() -> None:
    """After a program (Lightning, a library) used the new API, reading an old flag raises on
    torch 2.9+: the course's helpers must still work there (issue 39)."""
    out = _in_a_fresh_python(
        "import torch\n"
        "from hpcnb.lessons import precision as pr\n"
        "torch.backends.cuda.matmul.fp32_precision = 'ieee'\n"   # the new API, set first
        "before = pr.tf32_state()\n"
        "with pr.tf32(True):\n"
        "    inside = pr.tf32_state()\n"
        "with pr.tf32(False):\n"
        "    off = pr.tf32_state()\n"
        "rows = {r['switch']: r['value here'] for r in pr.switches()}\n"
        "restore = pr.set_tf32(True); restore()\n"
        "print(before, inside, off, pr.tf32_state() == before, rows['torch.backends.cuda.matmul.fp32_precision'])\n")
    assert out == ("{'matmul': 'ieee', 'conv': 'tf32'} {'matmul': 'tf32', 'conv': 'tf32'} "
                   "{'matmul': 'ieee', 'conv': 'ieee'} True ieee")


def test_switches_say_an_old_flag_is_unreadable_after_the_new_api_instead_of_failing() -> None:
    out = _in_a_fresh_python(
        "import torch\n"
        "from hpcnb.lessons import precision as pr\n"
        "torch.backends.cuda.matmul.fp32_precision = 'tf32'\n"
        "print({r['switch']: r['value here'] for r in pr.switches()}['torch.backends.cuda.matmul.allow_tf32'])\n")
    assert out.startswith("unreadable: ")


def test_gpu_path_is_selected_only_when_cuda_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(pr, "gpu_matmul_benchmark", lambda sizes: calls.append(("gpu", sizes)) or [])
    monkeypatch.setattr(pr, "emulated_matmul_errors", lambda sizes: calls.append(("cpu", sizes)) or [])
    monkeypatch.setattr(pr, "gpu_info", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pr.mode() == "cpu-emulated"
    assert pr.report(quick=True)["mode"] == "cpu-emulated" and calls[-1][0] == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pr.mode() == "gpu"
    assert pr.report(quick=True)["mode"] == "gpu" and calls[-1][0] == "gpu"
    assert [c[0] for c in calls] == ["cpu", "gpu"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_gpu_benchmark_refuses_without_a_gpu() -> None:
    assert pr.gpu_info() is None
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        pr.gpu_matmul_benchmark((64,))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_benchmark_measures_three_formats() -> None:
    rows = pr.gpu_matmul_benchmark((256, 2048), seconds=0.05)
    by = {(r["n"], r["format"]): r for r in rows}
    assert by[(2048, "fp32")]["ms"] > 0 and by[(2048, "fp32")]["rel_error"] < 1e-5
    if (pr.gpu_info() or {}).get("tf32"):
        assert by[(2048, "tf32")]["rel_error"] > 10 * by[(2048, "fp32")]["rel_error"]


def test_fp8_casts_real_bits_scaled_per_tensor() -> None:
    x = torch.tensor([448.0, 1.0, 1.0625, -0.5])            # 1.0625 needs 4 mantissa bits: E4M3 has 3
    assert pr.to_fp8(x, "e4m3").tolist() == [448.0, 1.0, 1.0, -0.5]
    big = torch.tensor([1e6, 1.0])                          # scaled: the largest maps to 448, none overflows
    assert torch.isfinite(pr.to_fp8(big, "e4m3")).all() and pr.to_fp8(big, "e4m3")[0] == 1e6


def test_fp8_matmul_error_is_about_sixteen_times_bf16s() -> None:
    rows = pr.fp8_matmul_errors(sizes=(256,), rows=32)
    by = {r["format"]: r["rel_error"] for r in rows}
    mantissa = {"bf16": 7, "fp8 e4m3": 3, "fp8 e5m2": 2}
    for coarse, fine in (("fp8 e4m3", "bf16"), ("fp8 e5m2", "fp8 e4m3")):
        expected = 2.0 ** (mantissa[fine] - mantissa[coarse])   # each mantissa bit less doubles the error
        ratio = by[coarse] / by[fine]
        assert expected / 1.5 < ratio < expected * 1.5, f"{coarse} against {fine}: {ratio:.2f}, not about {expected:g}"
    assert {r["how"] for r in rows if r["format"].startswith("fp8")} == {
        "cast to torch.float8_e4m3fn, scaled", "cast to torch.float8_e5m2, scaled"}
