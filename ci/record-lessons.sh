#!/usr/bin/env bash
# ci/record-lessons.sh - re-record the lessons' stored outputs as a student sees them: run by an
# unprivileged user ($COURSE_USER, default hpcnb-student) in its own venv, on a fresh local Slurm,
# one lesson at a time, top to bottom (jupyter nbconvert --execute), then copied back into
# notebooks/. Run it as root on a quiet machine: the lessons measure their own timings, and it
# refuses to start while the load average is above LOAD_LIMIT (default 1.0, on 2 cores).
# Lesson 10 with HPCNB_NODE_NETWORK=shared: horovodrun resolves the node names from two threads at
# once, which the libnss-wrapper fallback of the local Slurm answers wrongly about once in 20 fresh
# processes (measured 2 of 40), and horovodrun then tries ssh. With the nodes' own network (the
# default, used here) the fabric's hosts file is each task's /etc/hosts.
#
#   ci/record-lessons.sh [NOTEBOOK...]     default: every notebooks/*.ipynb
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=ci/course-install.sh
source "$HERE/ci/course-install.sh"
COURSE_USER=${COURSE_USER:-hpcnb-student}
LOAD_LIMIT=${LOAD_LIMIT:-1.0}
CELL_LIMIT=${CELL_LIMIT:-600}

log() { course_log "$*"; }
[[ $(id -u) -eq 0 ]] || { log "run me as root (I create a user and run as it with runuser)"; exit 1; }
load=$(cut -d' ' -f1 /proc/loadavg)
awk -v l="$load" -v m="$LOAD_LIMIT" 'BEGIN { exit !(l <= m) }' ||
    { log "load average $load is above $LOAD_LIMIT: not a quiet machine (LOAD_LIMIT=... to override)"; exit 1; }

course_user "$COURSE_USER"
tree=$(getent passwd "$COURSE_USER" | cut -d: -f6)/hpcnb-record
rm -rf "$tree"
course_copy "$tree" "$COURSE_USER"
course_setup "$tree" "$COURSE_USER"

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || mapfile -t targets < <(cd "$HERE" && ls notebooks/*.ipynb)
state=$tree/.record-state
for notebook in "${targets[@]}"; do
    log "recording $notebook (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    start=$SECONDS
    as_user "$COURSE_USER" HPCNB_SLURM=local HPCNB_STATE_DIR="$state" bash -c "cd '$tree/$(dirname "$notebook")' &&
        timeout -k 30 1200 ../.venv/bin/jupyter nbconvert --to notebook --execute --inplace \
        --ExecutePreprocessor.timeout=$CELL_LIMIT '$(basename "$notebook")'" >"$tree/record.log" 2>&1 ||
        { tail -n 40 "$tree/record.log" >&2; log "$notebook failed: not copied back"; exit 1; }
    cp "$tree/$notebook" "$HERE/$notebook"
    log "$notebook: $((SECONDS - start)) s"
done
as_user "$COURSE_USER" HPCNB_STATE_DIR="$state" "$tree/.venv/bin/hpcnb" slurm stop >/dev/null 2>&1 || true
log "done: ${#targets[@]} lesson(s) recorded as $COURSE_USER"
