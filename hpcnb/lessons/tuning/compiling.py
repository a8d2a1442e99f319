"""``torch.compile``, measured in a separate process under a time budget."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from .rows import Config, _row
from .hardware import cpus_for_job, device, set_threads
from .data import SyntheticImages, _synthetic_batch
from .measure import _Trainer, _sync, measure_loop


def compile_available() -> tuple[bool, str]:
    """Whether ``torch.compile`` can work here, and why not when it cannot."""
    import torch

    if not hasattr(torch, "compile"):
        return False, f"torch {torch.__version__} has no torch.compile (needs 2.0 or newer)"
    if sys.platform == "win32":
        return False, "torch.compile's default backend does not support Windows here"
    if not torch.cuda.is_available():
        cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
        if not cxx:
            return False, "no C++ compiler (g++) found: inductor compiles CPU kernels with one"
    return True, ""


def compile_budget(dev: str | None = None) -> float:
    """Seconds for compiling and measuring ``torch.compile``: 120 on a GPU (compiling the training
    step alone took 16.7 s on an H200, and the GPU's kernels are tuned too), 30 on a CPU."""
    return 120.0 if (dev or device()) == "cuda" else 30.0


def measure_compile(cfg: Config, dataset, *, dev: str | None = None, epochs: int = 2,
                    budget_s: float | None = None) -> list[dict[str, Any]]:
    """``torch.compile`` vs eager on the training loop, in a separate process limited to ``budget_s``
    (``None``: :func:`compile_budget` of the device).

    Compiling takes seconds to minutes (much less the second time: inductor caches its
    kernels), so it runs in a child process that is stopped when the budget runs out. Rows
    (experiment ``compile``): ``eager`` and ``compiled`` (with the compile time in the note),
    or one ``skipped``/``failed`` row saying why. Whether compiling *helps* is for the caller
    to judge from the rows (:func:`best_config`).
    """
    dev = dev or device()
    budget_s = compile_budget(dev) if budget_s is None else budget_s
    ok, why = compile_available()
    if not ok:
        return [_row("compile", "compiled", "loop", cfg.replace(compile=True), dev, status="skipped",
                     note=f"torch.compile unavailable: {why}")]
    env = dict(os.environ)
    if cpus_for_job() <= 4:  # a pool of compile workers costs more than it saves on few CPUs
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    args = [sys.executable, "-m", "hpcnb.lessons.tuning", "compile-probe", json.dumps(cfg.fields()),
            json.dumps(dataset.spec()), str(epochs), dev]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return [_row("compile", "compiled", "loop", cfg.replace(compile=True), dev, status="skipped",
                     note=(f"compiling and measuring took longer than the {budget_s:g} s budget on {dev}; "
                           "inductor caches compiled kernels, so a second run is faster"))]
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1][:200]
        return [_row("compile", "compiled", "loop", cfg.replace(compile=True), dev, status="failed",
                     note=f"torch.compile failed: {tail}")]
    return json.loads(lines[-1])["rows"]


def _compile_probe(cfg_json: str, data_json: str, epochs: str, dev: str) -> None:
    cfg = Config(**json.loads(cfg_json))
    dataset = SyntheticImages(**json.loads(data_json))
    set_threads()
    eager = measure_loop(cfg.replace(compile=False), dataset, dev=dev, epochs=int(epochs),
                         experiment="compile", setting="eager")
    start = time.perf_counter()
    trainer = _Trainer(cfg.replace(compile=True), dev, size=dataset.size, classes=dataset.classes)
    trainer.step(*_synthetic_batch(cfg.batch_size, dev, dataset.size, dataset.classes))
    _sync(dev)
    compile_s = time.perf_counter() - start
    compiled = measure_loop(cfg.replace(compile=True), dataset, dev=dev, epochs=int(epochs),
                            experiment="compile", setting="compiled", trainer=trainer)
    compiled["note"] = f"compiling took {compile_s:.1f} s (not counted in samples/s)"
    eager["note"] = "same process as the compiled run"
    print(json.dumps({"rows": [eager, compiled], "compile_s": compile_s}), flush=True)
