#!/usr/bin/env bash
# Install the Debian/Ubuntu packages the course and its tests need.
#
#   usage: ci/install-system-deps.sh [PACKAGE...]   (the packages given instead of the list below)
#
# Idempotent and quick when everything is there: it asks dpkg first and only
# runs `apt-get update` / `apt-get install` for what is missing.  As non-root
# it prints what is missing and the sudo command to run, and fails only when
# something is missing.
set -euo pipefail

# One package per line; add what new parts of the course need.
PACKAGES=(
    python3-venv      # python3 -m venv on Debian's own python3
    openssh-server    # ssh tests (a local sshd on 127.0.0.1)
    openssh-client
    chromium          # headless browser tests (Playwright drives /usr/bin/chromium)
    fonts-liberation  # so that pages rendered by chromium have real fonts
    libnss-wrapper    # fake users/hosts for the local Slurm and ssh tests
    bubblewrap        # the grader's sandbox for student code (hpcnb/course/sandbox.py)
    iproute2          # ip: the virtual nodes' own network (hpcnb/localslurm/network.py)
    lmod              # environment modules (Lmod 8.6) for lesson 3b's module tree
    charliecloud      # ch-run: job steps in the course's container image (ci/build-container.sh)
    debootstrap       # the image's Debian root (ci/build-container.sh)
    cmake             # Horovod build (ci/build-horovod.sh)
    g++
    make
    git
    curl
)

[[ $# -eq 0 ]] || PACKAGES=("$@")  # the student kit's Makefile names only what the lessons need

log() { echo "install-system-deps: $*" >&2; }

if ! command -v dpkg-query >/dev/null 2>&1; then
    log "not a Debian/Ubuntu system (no dpkg); install these by hand: ${PACKAGES[*]}"
    exit 0
fi

is_installed() {
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

missing=()
for pkg in "${PACKAGES[@]}"; do
    is_installed "$pkg" || missing+=("$pkg")
done
# Ubuntu ships chromium as chromium-browser (a snap wrapper); accept either.
if [[ " ${missing[*]-} " == *" chromium "* ]] && is_installed chromium-browser; then
    missing=("${missing[@]/chromium}")
    read -r -a missing <<<"${missing[*]}"
fi

if [[ ${#missing[@]} -eq 0 ]]; then
    log "all system packages present"
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    log "missing packages: ${missing[*]}"
    log "install them with:"
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
log "installing: ${missing[*]}"
# Wait for other apt/dpkg runs (unattended upgrades, a parallel setup) rather
# than failing on their locks.
APT_OPTS=(-o DPkg::Lock::Timeout=600)
for try in 1 2 3 4 5 6; do
    apt-get "${APT_OPTS[@]}" update -qq && break
    [[ $try -lt 6 ]] || { log "apt-get update failed"; exit 1; }
    log "apt-get update failed (try $try), retrying in 10 s"
    sleep 10
done
# Ubuntu has no 'chromium' deb, only 'chromium-browser'.
if [[ " ${missing[*]} " == *" chromium "* ]] \
        && ! apt-cache show chromium >/dev/null 2>&1 \
        && apt-cache show chromium-browser >/dev/null 2>&1; then
    missing=("${missing[@]/#chromium/chromium-browser}")
fi
apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "done"
