"""Lesson 6 (and 7): single-device tuning: measure what makes one training process faster, on
CPU or on a GPU.

Everything here is measured, nothing is assumed. A tiny CNN trains on a synthetic image
dataset generated on the fly (no downloads): each sample is drawn from a class prototype
plus noise and then run through a small augmentation pipeline (shifts, flips, blur,
normalisation), so loading a sample costs real CPU time the way decoding a JPEG does.

The helpers return **tidy rows** (one dict per measured configuration, columns
:data:`COLUMNS`) that :func:`write_rows` / :func:`read_rows` store as CSV, that
:func:`markdown_table` formats and :func:`plot_tuning` draws.

* :func:`device` — ``"cuda"`` when PyTorch sees a GPU, else ``"cpu"``.
* :func:`cpus_for_job` / :func:`dataloader_workers` — the CPUs Slurm gave this task
  (``SLURM_CPUS_PER_TASK``), never ``os.cpu_count()`` (that counts the whole node).
* :func:`sweep_batch_size` — model-step throughput vs batch size; it doubles the batch until
  the throughput stops growing beyond its spread (:func:`stopped_growing`) or, on a GPU, its
  memory runs out (the OOM is caught and reported).
* :func:`profile_split` / :func:`profile_ops` — where the time goes: data loading alone vs
  the model step alone vs the training loop, and the top operators from ``torch.profiler``;
  :func:`bottleneck` names the part that holds the loop back.
* :class:`DeviceBatches` — batches made on the device itself (``data_on_device``): the fix when
  CPU workers cannot feed a GPU.
* :func:`sweep_workers`, :func:`sweep_threads` (intra-op threads of the training process),
  :func:`compare_loader_options` (``persistent_workers``,
  ``prefetch_factor``, ``pin_memory`` and ``data_on_device`` on a GPU), :func:`compare_precision`
  (bf16 autocast on CPU; fp16 and bf16 on a GPU), :func:`compare_device_options` (TF32,
  ``channels_last``) — full training loops, one row per setting.
* :func:`measure_compile` — ``torch.compile`` in a separate process under a time budget
  (:func:`compile_budget`: longer on a GPU), skipped with a note when it is unavailable, too
  slow to compile, or not faster.
* :func:`before_after` — the untuned and the tuned configuration, measured alternately.

``import hpcnb.lessons.tuning`` does not import torch; the functions do.

Its rooms: ``rows`` (the columns, :class:`Config`, CSV, tables, plots), ``hardware`` (device, CPUs,
threads, workers), ``data`` (the synthetic dataset and model), ``measure`` (a step, a loop),
``profiling`` (where the time goes), ``sweeps`` (one row per setting, verdicts, before/after),
``compiling`` (``torch.compile`` in a process of its own).
"""
from __future__ import annotations

from .rows import COLUMNS, Config, markdown_table, plot_tuning, read_rows, write_rows
from .hardware import cpus_for_job, dataloader_workers, device, gpu_note, precisions, set_threads
from .data import DeviceBatches, SyntheticImages, make_loader, make_model
from .measure import measure_loop, measure_step
from .profiling import bottleneck, profile_ops, profile_split, trace_summary, write_tensorboard
from .sweeps import (before_after, best_config, compare_device_options, compare_loader_options, compare_precision,
                     pick_batch, speedup, stopped_growing, sweep_batch_size, sweep_threads, sweep_verdict,
                     sweep_workers)
from .compiling import compile_available, compile_budget, measure_compile

__all__ = [
    "COLUMNS", "Config", "SyntheticImages", "device", "cpus_for_job", "dataloader_workers", "set_threads",
    "make_model", "make_loader", "measure_step", "measure_loop", "sweep_batch_size", "stopped_growing",
    "pick_batch", "profile_split", "profile_ops", "bottleneck", "DeviceBatches", "sweep_workers", "sweep_threads",
    "compare_loader_options", "compare_precision", "compare_device_options", "precisions", "compile_available",
    "compile_budget", "measure_compile", "before_after", "speedup", "best_config", "sweep_verdict", "write_rows",
    "read_rows", "markdown_table", "plot_tuning", "gpu_note", "trace_summary", "write_tensorboard",
]
