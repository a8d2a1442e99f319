#!/usr/bin/env bash
# ci/real-course.sh - every lesson and solution notebook, unchanged, on the real Slurm 22.05
# that ci/real-slurm.sh starts, run by an unprivileged user (as on a cluster's login node).
#
#   ci/real-course.sh [NOTEBOOK...]     default: notebooks/ and solutions/
#
# As root: makes the user $COURSE_USER (once), copies the working tree into its home (tracked
# and untracked-but-not-ignored files), sets up its own venv from Debian's /usr/bin/python3
# (`make setup`; the Horovod wheel root built is shared through a readable cache), then runs
# nbval there with HPCNB_SLURM=real and only the real Slurm's commands on PATH. Each cell has
# CELL_LIMIT s, the whole run RUN_LIMIT s. The junit report (per-notebook times, read by
# benchmarks/lesson_times.py) is copied to test-artifacts/real-course.xml.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=ci/course-install.sh
source "$HERE/ci/course-install.sh"
COURSE_USER=${COURSE_USER:-hpcnb-student}
CELL_LIMIT=${CELL_LIMIT:-600}  # a requeued job waits 121 s on a real Slurm by default (lesson 12)
RUN_LIMIT=${RUN_LIMIT:-1500}

log() { course_log "$*"; }
[[ $(id -u) -eq 0 ]] || { log "run me as root (I create a user and run as it with runuser)"; exit 1; }
bash "$HERE/ci/real-slurm.sh" status >/dev/null || { log "the real Slurm is not up: bash ci/real-slurm.sh up"; exit 1; }

course_user "$COURSE_USER"
tree=$(getent passwd "$COURSE_USER" | cut -d: -f6)/hpcnb
log "copying the working tree to $tree"
course_copy "$tree" "$COURSE_USER"
course_setup "$tree" "$COURSE_USER"

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(notebooks solutions)
log "nbval on the real Slurm: ${targets[*]}"
leave_no_jobs() {  # a stopped or failed run must not leave jobs that hold the nodes for the next lane
    local bin left
    bin=$(bash "$HERE/ci/real-slurm.sh" bin)
    "$bin/scancel" -u "$COURSE_USER" 2>/dev/null || true
    for _ in $(seq 60); do
        left=$("$bin/squeue" -h -u "$COURSE_USER" -o %i 2>/dev/null)
        [[ -n $left ]] || return 0
        sleep 1
    done
    log "jobs of $COURSE_USER still in the queue after 60 s: $left"
}
trap leave_no_jobs EXIT
rc=0
as_user "$COURSE_USER" HPCNB_SLURM=real bash -c "cd '$tree' && timeout -k 30 $RUN_LIMIT .venv/bin/python -m pytest -p no:cacheprovider \
    -n 2 --dist loadfile --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg \
    --nbval-cell-timeout=$CELL_LIMIT --durations=30 --junitxml=real-course.xml ${targets[*]}" || rc=$?
mkdir -p "$HERE/test-artifacts"
cp "$tree/real-course.xml" "$HERE/test-artifacts/real-course.xml" 2>/dev/null || true
[[ $rc -ne 124 ]] || log "nbval ran past $RUN_LIMIT s and was stopped"
exit "$rc"
