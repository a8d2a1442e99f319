#!/usr/bin/env bash
# Build Horovod 0.28.1 (PyTorch + Gloo; NCCL too where torch is a CUDA build and nvcc is at
# hand; no MPI/TF/MXNet) for the torch that is
# installed in VENV, and install it there.
#
#   usage: ci/build-horovod.sh VENV
#
# The built wheel is cached in ${HPCNB_WHEEL_CACHE:-$HOME/.cache/hpcnb/wheels},
# in a folder keyed on the Horovod version, the torch version and the Python
# tag (Horovod's C++ extension is tied to the exact torch it was compiled
# against), so later runs only install the cached wheel (seconds).  A first
# build takes about 5 minutes on 2 cores and needs cmake and g++
# (ci/install-system-deps.sh installs them).
#
# Why not just `pip install horovod==0.28.1`:
#   * Horovod 0.28.1 (the latest release) sets CMAKE_CXX_STANDARD 14, both in
#     its root CMakeLists.txt and in horovod/torch/CMakeLists.txt, but torch
#     >= 2.1 needs C++17 ("#error You need C++17 to compile PyTorch").  Upstream
#     fixed it after the release (horovod/horovod#3998, issues #3996, #3941,
#     #4014); we apply the same change to the sdist with sed.
#   * The extension must be compiled against the torch in VENV, so the build
#     runs with --no-build-isolation (torch, packaging, wheel and setuptools
#     must be importable from VENV) and --no-deps.
#   * Horovod's setup.py lists its runtime requirements (cloudpickle, psutil,
#     pyyaml, packaging, cffi) as setup_requires for build actions; if they are
#     missing, setuptools tries to fetch them with the long-gone easy_install
#     machinery, so we install them into VENV first.
#   * setup.py passes -j8 to make unless MAKEFLAGS is set; on a small machine
#     eight parallel compiles of torch headers use a lot of memory, so we set
#     MAKEFLAGS=-j<ncpu>.
#   * The extension is built RelWithDebInfo; we strip the debug info from the
#     shared objects before caching (the wheel shrinks several-fold).
set -euo pipefail

HOROVOD_VERSION=0.28.1

die() { echo "build-horovod: error: $*" >&2; exit 1; }
log() { echo "build-horovod: $*" >&2; }

[[ $# -eq 1 ]] || die "usage: $0 VENV"
VENV=$(cd "$1" 2>/dev/null && pwd) || die "no such venv: $1"
PY="$VENV/bin/python"
[[ -x "$PY" ]] || die "$PY not found (is $1 a virtualenv?)"
PIP=("$PY" -m pip --disable-pip-version-check)

CHECK_CMD='import horovod, horovod.torch; assert horovod.__version__.startswith("'"$HOROVOD_VERSION"'"), horovod.__version__'

# Already installed and importable against this torch: nothing to do.
if "$PY" -c "$CHECK_CMD" >/dev/null 2>&1; then
    log "horovod $HOROVOD_VERSION already installed in $VENV"
    exit 0
fi

TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
    || die "torch is not installed in $VENV; install it first (pip install -e '.[dl]')"
PYTAG=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
ARCH=$(uname -m)
# GPU operations: with a CUDA build of torch and the CUDA compiler (a GPU node or a login node
# with the toolkit loaded), Horovod is built with NCCL, so GPU tensors can be reduced; otherwise
# it is a CPU build and hpcnb/scripts/horovod_train.py keeps its tensors on the CPU (Horovod
# without NCCL fails on CUDA tensors: "Requested ReadyEvent with GPU device but not compiled
# with CUDA"). NCCL comes from torch's own nvidia-nccl wheel when no HOROVOD_NCCL_HOME is set.
TORCH_CUDA=$("$PY" -c 'import torch; print(torch.version.cuda or "")')
FLAVOUR=cpu
if [[ -n "$TORCH_CUDA" ]] && command -v nvcc >/dev/null 2>&1; then
    FLAVOUR=nccl
    if [[ -z "${HOROVOD_NCCL_HOME:-}" ]]; then
        HOROVOD_NCCL_HOME=$("$PY" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' \
            2>/dev/null) || die "torch is a CUDA build but NCCL is not found: set HOROVOD_NCCL_HOME"
        export HOROVOD_NCCL_HOME
    fi
elif [[ -n "$TORCH_CUDA" ]]; then
    log "torch is a CUDA $TORCH_CUDA build but nvcc is not on PATH: building Horovod for the CPU only" \
        "(load the site's CUDA module first for GPU operations)"
fi

CACHE_ROOT=${HPCNB_WHEEL_CACHE:-$HOME/.cache/hpcnb/wheels}
CACHE_DIR="$CACHE_ROOT/horovod-$HOROVOD_VERSION-torch$TORCH_VERSION-$PYTAG-$ARCH$([[ $FLAVOUR == cpu ]] || echo "-$FLAVOUR")"
mkdir -p "$CACHE_DIR"

find_wheel() { compgen -G "$CACHE_DIR/horovod-$HOROVOD_VERSION-*.whl" | head -n1 || true; }

install_wheel() {
    log "installing $1"
    # Install Horovod's own small runtime requirements normally, but never let
    # pip touch torch.
    "${PIP[@]}" install --quiet "$1"
    "$PY" -c "$CHECK_CMD" || die "horovod installed but 'import horovod.torch' fails"
    log "horovod $HOROVOD_VERSION installed in $VENV (torch $TORCH_VERSION)"
}

# Serialise concurrent builds that share a cache.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE_DIR/.lock"
    flock 9
fi

WHEEL=$(find_wheel)
if [[ -n "$WHEEL" ]]; then
    log "using cached wheel"
    install_wheel "$WHEEL"
    exit 0
fi

for tool in cmake g++ make; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is needed to build Horovod (run ci/install-system-deps.sh)"
done

log "building horovod $HOROVOD_VERSION ($FLAVOUR) for torch $TORCH_VERSION ($PYTAG, $ARCH); takes a few minutes"
START=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hpcnb-horovod.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Build-time requirements, and Horovod's setup_requires (see above).
"${PIP[@]}" install --quiet packaging wheel setuptools cloudpickle psutil pyyaml 'cffi>=1.4.0'

"${PIP[@]}" download --quiet --no-deps --no-binary :all: \
    "horovod==$HOROVOD_VERSION" -d "$WORK/sdist"
tar -xzf "$WORK/sdist/horovod-$HOROVOD_VERSION.tar.gz" -C "$WORK"
SRC="$WORK/horovod-$HOROVOD_VERSION"

# C++14 -> C++17 (torch >= 2.1 needs it).
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
    "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"
grep -q 'set(CMAKE_CXX_STANDARD 17)' "$SRC/CMakeLists.txt" \
    && grep -q 'set(CMAKE_CXX_STANDARD 17)' "$SRC/horovod/torch/CMakeLists.txt" \
    || die "could not patch CMAKE_CXX_STANDARD in the Horovod sources"

NCPU=$(nproc 2>/dev/null || echo 2)
(
    cd "$SRC"
    export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
           HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
           MAKEFLAGS="-j$NCPU"
    if [[ $FLAVOUR == nccl ]]; then export HOROVOD_GPU_OPERATIONS=NCCL; fi
    "${PIP[@]}" wheel --no-build-isolation --no-deps -w "$WORK/wheel" . \
        > "$WORK/build.log" 2>&1 \
        || { tail -n 60 "$WORK/build.log" >&2; die "horovod build failed (log above)"; }
)
BUILT=$(compgen -G "$WORK/wheel/horovod-$HOROVOD_VERSION-*.whl" | head -n1 || true)
[[ -n "$BUILT" ]] || die "pip wheel produced no horovod wheel"

# Strip debug info from the extension modules (RelWithDebInfo build).
if command -v strip >/dev/null 2>&1; then
    "$PY" - "$BUILT" <<'EOF'
import os, subprocess, sys, tempfile, zipfile, pathlib
from wheel.wheelfile import WheelFile
whl = pathlib.Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    with zipfile.ZipFile(whl) as z:
        z.extractall(tmp)
    for so in pathlib.Path(tmp).rglob("*.so"):
        subprocess.run(["strip", "--strip-debug", str(so)], check=True)
    outdir = pathlib.Path(tempfile.mkdtemp(dir=whl.parent))
    out = outdir / whl.name
    with WheelFile(out, "w") as wf:
        # write_files regenerates RECORD with the new hashes
        wf.write_files(tmp)
    os.replace(out, whl)
    outdir.rmdir()
EOF
fi

# Publish to the cache atomically.
cp "$BUILT" "$CACHE_DIR/.tmp-$(basename "$BUILT")"
mv "$CACHE_DIR/.tmp-$(basename "$BUILT")" "$CACHE_DIR/$(basename "$BUILT")"
log "built in $((SECONDS - START)) s, cached as $CACHE_DIR/$(basename "$BUILT")"

install_wheel "$CACHE_DIR/$(basename "$BUILT")"
