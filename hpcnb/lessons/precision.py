"""Lesson 7: TF32 and friends: what the PyTorch switches do, and what reduced precision costs
and buys.

TF32 ("TensorFloat-32") is how NVIDIA tensor cores (Ampere, compute capability 8.0, and
later) multiply float32 matrices fast: the inputs keep float32's 8 exponent bits but only
**10 of its 23 mantissa bits**; products are accumulated in float32. Since PyTorch 1.12 it is
**off for matrix multiplications** and **on for cuDNN convolutions** by default.

Two cases, chosen by :func:`mode`:

* ``"gpu"`` — PyTorch sees a CUDA GPU: :func:`gpu_matmul_benchmark` *measures* FP32, TF32
  and BF16 matmuls of growing size (time, TFLOP/s, error against float64).
* ``"cpu-emulated"`` — no GPU: CPUs have no TF32 unit, so :func:`round_mantissa` *emulates*
  TF32 by rounding float32 values to a 10-bit mantissa with integer bit operations, and
  :func:`emulated_matmul_errors` / :func:`emulated_training` show the accuracy effect.
  Every such row says ``"emulated"``; no speed is claimed for it.

``import hpcnb.lessons.precision`` does not import torch; the functions do.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = [
    "FORMATS", "formats", "mode", "gpu_info", "has_fp32_precision", "switches", "tf32_state", "set_tf32",
    "tf32", "round_mantissa", "to_tf32", "to_bf16", "bit_string", "emulated_matmul", "emulated_matmul_errors", "emulated_training",
    "gpu_matmul_benchmark", "report", "FP8_FORMATS", "to_fp8", "fp8_matmul_errors",
]

# name: (exponent bits, mantissa bits, what it is)
FORMATS: dict[str, tuple[int, int, str]] = {
    "fp32": (8, 23, "IEEE single precision: PyTorch's default dtype"),
    "tf32": (8, 10, "tensor-core math mode for float32 matmuls/convolutions (not a storage type)"),
    "bf16": (8, 7, "bfloat16: float32's range, 3 significant digits"),
    "fp16": (5, 10, "IEEE half precision: small range (max 65504), needs loss scaling"),
}
_MANTISSA = {name: m for name, (_, m, _) in FORMATS.items()}


def formats() -> list[dict[str, Any]]:
    """One row per format, computed from its bit layout: precision (eps), digits and range."""
    rows = []
    for name, (e, m, what) in FORMATS.items():
        bias = 2 ** (e - 1) - 1
        rows.append({
            "format": name, "sign": 1, "exponent": e, "mantissa": m,
            "bits used": 1 + e + m,
            "eps": 2.0 ** -m,                       # gap between 1 and the next number
            "decimal digits": round(math.log10(2) * (m + 1), 1),
            "max": (2 - 2.0 ** -m) * 2.0 ** bias,
            "what": what,
        })
    return rows


# --------------------------------------------------------------------------- which case applies

def mode() -> str:
    """``"gpu"`` when PyTorch can use a CUDA GPU here, else ``"cpu-emulated"``."""
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu-emulated"


def gpu_info() -> dict[str, Any] | None:
    """Name, compute capability and TF32/BF16 support of GPU 0, or None without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(0)
    return {"name": torch.cuda.get_device_name(0), "capability": f"{major}.{minor}",
            "tf32": (major, minor) >= (8, 0), "bf16": bool(torch.cuda.is_bf16_supported())}


# --------------------------------------------------------------------------- the switches

_NEW_API = {  # PyTorch >= 2.9, the documented API: per-backend fp32_precision ('ieee', 'tf32', 'none' = inherit)
    "torch.backends.fp32_precision": ("none", "the global level the others inherit"),
    "torch.backends.cuda.matmul.fp32_precision": ("none", "TF32 in float32 matmuls (cuBLAS): 'tf32' allows it"),
    "torch.backends.cudnn.conv.fp32_precision": ("tf32", "TF32 in cuDNN convolutions"),
}
_LEGACY = {  # PyTorch 1.12 to 2.8, and the seeds' guides; PyTorch 2.9+ warns they will be deprecated
    "torch.backends.cuda.matmul.allow_tf32": (False, "TF32 in float32 matmuls (cuBLAS), older API"),
    "torch.backends.cudnn.allow_tf32": (True, "TF32 in cuDNN convolutions, older API"),
    "torch.get_float32_matmul_precision()": ("highest", "the matmul switch as a level, older API: "
                                              "'highest' = fp32, 'high' = TF32 allowed, 'medium' = bf16 allowed"),
}


def _read(expr: str) -> Any:
    import torch

    if expr.endswith("()"):
        return getattr(torch, expr.split(".")[1].removesuffix("()"))()
    obj: Any = torch
    for part in expr.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def has_fp32_precision() -> bool:
    """Whether this PyTorch has the ``fp32_precision`` API (2.9+), the one to use where it exists."""
    import torch

    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def switches() -> list[dict[str, Any]]:
    """The TF32 switches with their **live** values here and PyTorch's defaults.

    The ``fp32_precision`` settings (PyTorch 2.9+) come first when this PyTorch has them; the
    older ``allow_tf32`` flags follow. A value that cannot be read is shown as the reason:
    PyTorch 2.9+ refuses to read an old flag once the new API has set that backend.
    """
    rows = []
    tables = (_NEW_API, _LEGACY) if has_fp32_precision() else (_LEGACY,)
    for table in tables:
        for expr, (default, what) in table.items():
            try:
                value = _read(expr)
            except Exception as exc:  # noqa: BLE001 - show the reason instead of failing
                value = f"unreadable: {str(exc).split(',')[0]}"
            rows.append({"switch": expr, "value here": value, "default": default,
                         "is default": value == default, "controls": what})
    return rows


def tf32_state() -> dict[str, Any]:
    """The matmul and convolution TF32 settings, read through the API this PyTorch documents
    (never an old flag after the new API was used: PyTorch 2.9+ raises on that)."""
    import torch

    if has_fp32_precision():
        return {"matmul": torch.backends.cuda.matmul.fp32_precision,
                "conv": torch.backends.cudnn.conv.fp32_precision}
    return {"matmul": torch.backends.cuda.matmul.allow_tf32, "conv": torch.backends.cudnn.allow_tf32}


def set_tf32(enabled: bool) -> Callable[[], None]:
    """Allow (or forbid) TF32 for matmuls and cuDNN convolutions, process-wide; returns what
    puts the previous settings back. PyTorch 2.9+: ``fp32_precision = "tf32"`` / ``"ieee"`` per
    backend; older: the ``allow_tf32`` flags."""
    import torch

    if has_fp32_precision():
        backends = (torch.backends.cuda.matmul, torch.backends.cudnn.conv)
        saved = [b.fp32_precision for b in backends]
        for backend in backends:
            backend.fp32_precision = "tf32" if enabled else "ieee"

        def restore_new() -> None:
            for backend, value in zip(backends, saved):
                backend.fp32_precision = value

        return restore_new
    saved_level, saved_cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled

    def restore() -> None:
        torch.set_float32_matmul_precision(saved_level)
        torch.backends.cudnn.allow_tf32 = saved_cudnn

    return restore


@contextlib.contextmanager
def tf32(enabled: bool = True) -> Iterator[None]:
    """Allow (or forbid) TF32 for matmuls *and* cuDNN convolutions inside a ``with`` block, then
    restore the previous settings (:func:`set_tf32`). On a CPU the settings change nothing: CPUs
    have no TF32 unit."""
    restore = set_tf32(enabled)
    try:
        yield
    finally:
        restore()


# --------------------------------------------------------------------------- emulation by rounding

def round_mantissa(x, bits: int = 10, rounding: str = "nearest"):
    """float32 values rounded to ``bits`` mantissa bits (10: TF32, 7: BF16), still as float32.

    Works on the IEEE bit pattern: the low ``23 - bits`` mantissa bits are cleared, after
    adding half of the last kept bit (``rounding="nearest"``: round to nearest, ties to even,
    like the conversion to bfloat16) or not (``"truncate"``: round toward zero). The exponent
    is untouched, so the range stays float32's; infinities and NaN pass through.
    """
    import torch

    if not 0 <= bits <= 23:
        raise ValueError("bits must be between 0 and 23 (float32 has 23 mantissa bits)")
    if rounding not in ("nearest", "truncate"):
        raise ValueError("rounding must be 'nearest' or 'truncate'")
    x = torch.as_tensor(x, dtype=torch.float32)
    drop = 23 - bits
    if drop == 0:
        return x.clone()
    i = x.contiguous().view(torch.int32)
    if rounding == "nearest":
        # half an ulp of the kept part, minus one, plus the lowest kept bit: ties go to even
        i = i + ((1 << (drop - 1)) - 1) + ((i >> drop) & 1)
    i = i & ~((1 << drop) - 1)  # clear the dropped bits (two's complement: also for negatives)
    out = i.view(torch.float32)
    return torch.where(torch.isfinite(x), out, x)


def to_tf32(x, rounding: str = "nearest"):
    """float32 values at a TF32 tensor core's precision (10-bit mantissa), emulated.

    The same precision, not necessarily the same bits: depending on the GPU and library the
    hardware truncates or rounds the dropped bits differently from ``rounding`` here.
    """
    return round_mantissa(x, 10, rounding)


def to_bf16(x):
    """float32 values rounded to bfloat16's 7-bit mantissa, kept as float32 (emulated)."""
    return round_mantissa(x, 7)


def bit_string(value: float, bits: int = 10) -> str:
    """``sign exponent mantissa`` of a float32, with a ``|`` after the first ``bits`` mantissa bits."""
    import struct

    (n,) = struct.unpack(">I", struct.pack(">f", value))
    s = f"{n:032b}"
    return f"{s[0]} {s[1:9]} {s[9:9 + bits]}|{s[9 + bits:]}"


class _Rounded:
    """An autograd function: a @ b.T with both inputs rounded, forward and backward."""

    _fn = None

    @classmethod
    def get(cls):
        if cls._fn is None:
            import torch

            class RoundedLinear(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, w, bits):
                    xr, wr = round_mantissa(x, bits), round_mantissa(w, bits)
                    ctx.save_for_backward(xr, wr)
                    ctx.bits = bits
                    return xr @ wr.t()

                @staticmethod
                def backward(ctx, grad):
                    xr, wr = ctx.saved_tensors
                    g = round_mantissa(grad, ctx.bits)
                    return g @ wr, g.t() @ xr, None

            cls._fn = RoundedLinear
        return cls._fn


def emulated_matmul(a, b, fmt: str = "tf32"):
    """``a @ b`` at a tensor core's precision in ``fmt``: inputs rounded, float32 accumulation.

    Approximates the hardware (its input rounding and summation order differ), not bit for bit.
    """
    bits = _MANTISSA[fmt]
    return round_mantissa(a, bits) @ round_mantissa(b, bits)


def _errors(out, ref) -> tuple[float, float]:
    diff = (out.double() - ref).abs()
    return float(diff.max()), float(diff.norm() / ref.norm())


def emulated_matmul_errors(sizes: Sequence[int] = (64, 128, 256, 512, 1024, 2048, 4096), *,
                           rows: int = 64, seed: int = 0,
                           fmts: Sequence[str] = ("fp32", "tf32", "bf16")) -> list[dict[str, Any]]:
    """Error of ``A @ B`` (``n x n`` standard-normal matrices) in each format, against float64.

    ``fp32`` is the real float32 matmul of this CPU; ``tf32``/``bf16`` are emulated (inputs
    rounded by :func:`round_mantissa`, float32 accumulation: the precision of tensor cores, not
    their exact bits). To stay cheap at large ``n`` only the first ``rows`` rows of the
    product are computed (each row of a product depends only on that row of ``A``, so its
    error is what the full product has).
    Rows: ``n``, ``format``, ``how``, ``max_abs_error``, ``rel_error`` (Frobenius norm).
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        a = torch.randn(min(rows, n), n, generator=g)
        b = torch.randn(n, n, generator=g)
        ref = a.double() @ b.double()
        for fmt in fmts:
            got = a @ b if fmt == "fp32" else emulated_matmul(a, b, fmt)
            max_abs, rel = _errors(got, ref)
            out.append({"n": n, "format": fmt, "how": "measured (CPU float32)" if fmt == "fp32" else "emulated",
                        "max_abs_error": max_abs, "rel_error": rel})
    return out


FP8_FORMATS = {"e4m3": ("float8_e4m3fn", 448.0), "e5m2": ("float8_e5m2", 57344.0)}   # torch dtype, largest value


def to_fp8(x, fmt: str = "e4m3"):
    """``x`` through an FP8 format and back to float32, scaled per tensor as FP8 training does
    (torchao's "tensorwise" recipe): the largest magnitude maps to the format's largest value."""
    import torch

    name, largest = FP8_FORMATS[fmt]
    scale = largest / x.abs().max().clamp(min=torch.finfo(torch.float32).tiny)
    return (x * scale).to(getattr(torch, name)).to(torch.float32) / scale


def fp8_matmul_errors(sizes: Sequence[int] = (256, 1024), *, rows: int = 64,
                      seed: int = 0) -> list[dict[str, Any]]:
    """Error of ``A @ B`` against float64 with the inputs in FP8 (E4M3, E5M2: real casts to
    PyTorch's float8 types, per-tensor scaled, float32 accumulation as the tensor cores of
    H100/H200/GH200 do), beside bf16 (emulated). Rows as :func:`emulated_matmul_errors`."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        a, b = torch.randn(min(rows, n), n, generator=g), torch.randn(n, n, generator=g)
        ref = a.double() @ b.double()
        results = {"bf16": ("emulated", emulated_matmul(a, b, "bf16"))}
        for fmt, (name, _) in FP8_FORMATS.items():
            results[f"fp8 {fmt}"] = (f"cast to torch.{name}, scaled", to_fp8(a, fmt) @ to_fp8(b, fmt))
        for fmt, (how, got) in results.items():
            max_abs, rel = _errors(got, ref)
            out.append({"n": n, "format": fmt, "how": how, "max_abs_error": max_abs, "rel_error": rel})
    return out


def emulated_training(steps: int = 200, *, fmts: Sequence[str] = ("fp32", "tf32", "bf16"), batch: int = 128,
                      width: int = 128, lr: float = 0.05, seed: int = 0, every: int = 10) -> list[dict[str, Any]]:
    """A short training run per format: same data, same initial weights, only the matmuls differ.

    An MLP (32 -> ``width`` -> ``width`` -> 1) learns a fixed random "teacher" function with
    SGD. In ``tf32``/``bf16`` every matmul of every linear layer (forward *and* both backward
    matmuls) rounds its inputs to a tensor core's precision (emulated); ``fp32`` is plain float32.
    Rows every ``every`` steps: ``step``, ``format``, ``how``, ``loss`` (training loss of that
    batch), ``eval_loss`` (on a fixed held-out batch). The matrices are tiny, so this runs on
    one intra-op thread (more only add waiting, badly so on a busy machine).
    """
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _emulated_training(steps, fmts, batch, width, lr, seed, every)
    finally:
        torch.set_num_threads(saved)


def _emulated_training(steps, fmts, batch, width, lr, seed, every) -> list[dict[str, Any]]:
    import torch

    fn = _Rounded.get()
    g = torch.Generator().manual_seed(seed)
    teacher = [torch.randn(32, 64, generator=g) / 32 ** 0.5, torch.randn(64, 1, generator=g) / 8]
    xs = torch.randn(steps, batch, 32, generator=g)
    x_eval = torch.randn(1024, 32, generator=g)

    def target(x):
        return torch.tanh(x @ teacher[0]) @ teacher[1]

    y_eval = target(x_eval)
    init = [torch.randn(width, 32, generator=g) / 32 ** 0.5, torch.zeros(width),
            torch.randn(width, width, generator=g) / width ** 0.5, torch.zeros(width),
            torch.randn(1, width, generator=g) / width ** 0.5, torch.zeros(1)]
    out = []
    for fmt in fmts:
        params = [p.clone().requires_grad_(True) for p in init]

        def linear(x, w, b):
            if fmt == "fp32":
                return x @ w.t() + b
            return fn.apply(x, w, _MANTISSA[fmt]) + b

        def forward(x):
            h = torch.relu(linear(x, params[0], params[1]))
            h = torch.relu(linear(h, params[2], params[3]))
            return linear(h, params[4], params[5])

        for step in range(steps):
            loss = torch.nn.functional.mse_loss(forward(xs[step]), target(xs[step]))
            for p in params:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p -= lr * p.grad
            if step % every == 0 or step == steps - 1:
                with torch.no_grad():
                    ev = float(torch.nn.functional.mse_loss(forward(x_eval), y_eval))
                out.append({"step": step, "format": fmt, "how": "plain float32" if fmt == "fp32" else "emulated",
                            "loss": loss.item(), "eval_loss": ev})
    return out


# --------------------------------------------------------------------------- the GPU path

def gpu_matmul_benchmark(sizes: Sequence[int] = (512, 1024, 2048, 4096, 8192), *, seconds: float = 0.2,
                         check_rows: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """FP32 vs TF32 vs BF16 matmuls of ``n x n`` matrices on GPU 0: time, TFLOP/s, speed-up, error.

    fp32: TF32 forbidden; tf32: allowed (``tf32(True)``); bf16: both inputs in bfloat16.
    Times are medians of CUDA-event-timed repeats after a warm-up; the error is measured
    against float64 on ``check_rows`` rows of the product. TF32 only differs from FP32 on
    GPUs of compute capability 8.0 or newer (see :func:`gpu_info`).
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU here: use the emulated CPU functions instead")
    info = gpu_info() or {}
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(seed)
    rows = []
    for n in sizes:
        a = torch.randn(n, n, device=dev, generator=g)
        b = torch.randn(n, n, device=dev, generator=g)
        k = min(check_rows, n)
        ref = a[:k].double() @ b.double()
        results = {}
        for fmt in ("fp32", "tf32", "bf16"):
            if fmt == "bf16" and not info.get("bf16"):
                continue
            x, y = (a.bfloat16(), b.bfloat16()) if fmt == "bf16" else (a, b)
            with tf32(fmt == "tf32"):
                ms = _time_cuda(lambda: x @ y, seconds)
                c = x[:k] @ y
            max_abs, rel = _errors(c.float(), ref)
            results[fmt] = ms
            rows.append({"n": n, "format": fmt, "how": "measured on " + info.get("name", "GPU"), "ms": ms,
                         "tflops": 2 * n ** 3 / (ms / 1e3) / 1e12, "speedup_vs_fp32": results["fp32"] / ms,
                         "max_abs_error": max_abs, "rel_error": rel})
        del a, b, ref
        torch.cuda.empty_cache()
    return rows


def _time_cuda(fn, seconds: float) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


# --------------------------------------------------------------------------- one call for either case

def report(quick: bool = False) -> dict[str, Any]:
    """Everything this module measures, for the case that applies here (see :func:`mode`)."""
    m = mode()
    result: dict[str, Any] = {"mode": m, "switches": switches(), "gpu": gpu_info()}
    if m == "gpu":
        sizes = (1024, 4096) if quick else (512, 1024, 2048, 4096, 8192)
        result["matmul"] = gpu_matmul_benchmark(sizes)
    else:
        sizes = (64, 512, 4096) if quick else (64, 128, 256, 512, 1024, 2048, 4096)
        result["matmul"] = emulated_matmul_errors(sizes)
    return result


def _main(argv: Sequence[str]) -> int:
    import json

    quick = "--quick" in argv
    result = report(quick=quick)
    if "--json" in argv:
        print(json.dumps(result, default=str))
        return 0
    print(f"mode: {result['mode']}" + (f" ({result['gpu']['name']}, capability {result['gpu']['capability']})"
                                       if result["gpu"] else " (no GPU: TF32 and BF16 emulated by rounding)"))
    for r in result["matmul"]:
        extra = f"  {r['ms']:.3f} ms  {r['tflops']:.1f} TFLOP/s" if "ms" in r else ""
        print(f"n={r['n']:5d} {r['format']:4s} {r['how']:24s} rel. error {r['rel_error']:.2e}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
