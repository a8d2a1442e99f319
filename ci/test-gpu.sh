#!/bin/bash
# make test-gpu: the course's GPU paths on one GPU (hpcnb/course/gpucheck.py says what runs), then
# test-artifacts/gpu-report.md. Run it on the site's GPU node before a workshop. Without a GPU it
# says so and exits 0 (--rehearse: its steps anyway, on the CPU). The Python: GPU_PYTHON if set
# (e.g. a site module's python3 with torch), else the course's venv (VENV, default .venv) if it has
# torch, else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
has_torch() { [[ -x "$(command -v "$1" 2>/dev/null)" ]] && "$1" -c 'import torch' 2>/dev/null; }
venv_python="${VENV:-.venv}/bin/python"
if [[ -n "${GPU_PYTHON:-}" ]]; then
    python=$GPU_PYTHON
elif has_torch "$venv_python"; then
    python=$venv_python
else
    python=python3
fi
echo "make test-gpu: $python ($("$python" --version 2>&1))"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # a site's Python runs this copy without installing it
exec "$python" -m hpcnb.course.gpucheck "$@"
