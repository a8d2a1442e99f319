#!/usr/bin/env bash
# ci/portal.sh - a one-machine JupyterHub portal for a workshop, as HPC centres run theirs: a login
# page, and each user's notebook server is a Slurm job submitted as that user (JupyterHub 6,
# batchspawner's SlurmSpawner, configurable-http-proxy). As root.
#
#   ci/portal.sh install   the course for the users (a venv from Debian's python3 under PORTAL_PREFIX,
#                          readable by all), the users and their copy of the lessons, the proxy (npm)
#   ci/portal.sh run       the hub, in the foreground; Ctrl-C (SIGINT/SIGTERM) stops it, the proxy
#                          and every user's server job
#
# Settings (environment; `make portal` passes its variables of the same names):
#   PORTAL_USERS     Unix user names, or a count N for student1 .. studentN (default 3); made if missing
#   PORTAL_PASSWORD  the password they all log in with (8 characters or more); default: one made
#                    once and kept in PORTAL_STATE/password
#   PORTAL_PORT      the login page, http://127.0.0.1:PORT (default 8000); the hub's API and the
#                    proxy's API take the next two ports
#   PORTAL_SLURM     local (default: each user's own local Slurm) or real (the Slurm on PATH)
#   PORTAL_HUB_ADDRESS  where the servers' compute nodes reach the hub's API (default: 127.0.0.1 for
#                    the local Slurm, whose nodes share this machine's network here; for real, the
#                    address `ci/real-slurm.sh address` gives when that Slurm is up, its nodes having
#                    networks of their own; on a real cluster, the login node's address)
#   PORTAL_TIME      each server job's time limit (default 8:00:00)
#   PORTAL_MEM       each server job's memory (sbatch --mem; default 2G)
#   PORTAL_PREFIX    the course install the users run (default /opt/hpcnb-portal)
#   PORTAL_STATE     the hub's database, cookie secret and password (default .portal/state)
# Each user's lessons: ~/hpcnb-course (notebooks/, exercises/), copied once; later installs add new
# files and keep the users' edits. Homes are made (or made again) 0700: no one reads another's work.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=ci/course-install.sh
source "$HERE/ci/course-install.sh"
PREFIX=$(realpath -m "${PORTAL_PREFIX:-/opt/hpcnb-portal}")
STATE=$(realpath -m "${PORTAL_STATE:-$HERE/.portal/state}")
PORT=${PORTAL_PORT:-8000}
SLURM=${PORTAL_SLURM:-local}
COURSE_DIR=hpcnb-course
PROXY_DIR=$HERE/.portal
PROXY=$PROXY_DIR/node_modules/.bin/configurable-http-proxy
COURSE=$PREFIX/course
SLURM_BIN=$PREFIX/slurm-bin  # the local Slurm's commands for the course venv: the same for every user

log() { course_log "$*"; }
die() { log "ERROR: $*"; exit 1; }

portal_users() {
    local users=${PORTAL_USERS:-3}
    if [[ $users =~ ^[0-9]+$ ]]; then
        seq -f 'student%g' 1 "$users"
    else
        printf '%s\n' $users
    fi
}

install_proxy() {
    if [[ -x $PROXY ]] && cmp -s "$HERE/ci/portal/package-lock.json" "$PROXY_DIR/package-lock.json"; then
        return 0
    fi
    log "npm: configurable-http-proxy (ci/portal/package-lock.json) into $PROXY_DIR"
    mkdir -p "$PROXY_DIR"
    printf '*\n' >"$PROXY_DIR/.gitignore"
    cp "$HERE/ci/portal/package.json" "$HERE/ci/portal/package-lock.json" "$PROXY_DIR/"
    (cd "$PROXY_DIR" && npm ci --omit=dev --no-audit --no-fund --loglevel=error) ||
        die "npm ci failed in $PROXY_DIR"
    "$PROXY" --version >/dev/null || die "$PROXY does not run (node $(node --version 2>&1))"
}

install_course() {
    install -d -m 755 "$PREFIX"
    log "copying the working tree to $COURSE"
    course_copy "$COURSE" root
    course_setup "$COURSE" root
    # users cannot write here: compile hpcnb once, so that every local Slurm command starts fast
    "$COURSE/.venv/bin/python" -m compileall -q "$COURSE/hpcnb" >/dev/null
    (cd / && HPCNB_BIN_DIR=$SLURM_BIN "$COURSE/.venv/bin/hpcnb" slurm-path >/dev/null)
    chmod -R a+rX "$PREFIX"
}

install_users() {
    local user home
    for user in $(portal_users); do
        course_user "$user"
        home=$(getent passwd "$user" | cut -d: -f6)
        chmod 0700 "$home"  # useradd's homes are 0755 on Debian: participants would read each other's job output
        as_user "$user" mkdir -p "$home/$COURSE_DIR"
        as_user "$user" cp -rn "$COURSE/notebooks" "$COURSE/exercises" "$home/$COURSE_DIR/"
        log "user $user: lessons in $home/$COURSE_DIR"
    done
}

password() {
    if [[ -n ${PORTAL_PASSWORD:-} ]]; then
        printf '%s' "$PORTAL_PASSWORD"
    elif [[ -s $STATE/password ]]; then
        cat "$STATE/password"
    else
        tr -dc 'a-km-z2-9' </dev/urandom | head -c 12 || true
    fi
}

port_free() { [[ -z $(ss -Htln "sport = :$1") ]]; }

install_ruby() {  # Debian's Ruby: tests/test_ondemand.py renders the OnDemand app's ERB templates with it
    command -v erb >/dev/null && return
    log "apt: ruby (for the OnDemand app's test)"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends ruby \
        >/dev/null || die "apt-get install ruby failed"
}

cmd_install() {
    install_course
    install_users
    install_proxy
    install_ruby
    log "installed: course in $COURSE, users $(portal_users | tr '\n' ' ')"
}

cmd_run() {
    local users pass p path
    [[ -x $COURSE/.venv/bin/jupyterhub-singleuser && -x $PROXY ]] || die "not installed: ci/portal.sh install"
    [[ -x $HERE/.venv/bin/jupyterhub ]] || die "no JupyterHub in $HERE/.venv: make setup"
    users=$(portal_users | tr '\n' ' ')
    for p in "$PORT" $((PORT + 1)) $((PORT + 2)); do
        port_free "$p" || die "port $p on this machine is taken: $(ss -Htlnp "sport = :$p" | head -n 1)"
    done
    case $SLURM in
        local) path=$SLURM_BIN:/usr/local/bin:/usr/bin:/bin ;;
        real)
            path=/usr/local/bin:/usr/bin:/bin
            PATH=$path scontrol ping 2>/dev/null | grep -q 'is UP' ||
                die "PORTAL_SLURM=real: no real Slurm answers (scontrol ping)"
            if [[ -z ${PORTAL_HUB_ADDRESS:-} ]] && bash "$HERE/ci/real-slurm.sh" status >/dev/null 2>&1; then
                PORTAL_HUB_ADDRESS=$(bash "$HERE/ci/real-slurm.sh" address)
            fi
            ;;
        *) die "PORTAL_SLURM=$SLURM: use local or real" ;;
    esac
    install -d -m 700 "$STATE"
    pass=$(password)
    [[ ${#pass} -ge 8 ]] || die "PORTAL_PASSWORD must have 8 characters or more"
    (umask 077 && printf '%s\n' "$pass" >"$STATE/password")
    log "portal: http://127.0.0.1:$PORT  users: $users password: $pass"
    log "servers are Slurm jobs on the $SLURM Slurm; Ctrl-C stops the hub, the proxy and every server"
    cd "$STATE"
    # HPCNB_NODE_NETWORK=shared: the hub (this machine: the login node) and each server (a job on a
    # node) reach each other at 127.0.0.1; the local Slurm's login node does not reach nodes that have a
    # network of their own (its default)
    exec env -i HOME="$HOME" LANG=C.UTF-8 PATH="$path" HPCNB_SLURM="$SLURM" HPCNB_BIN_DIR="$SLURM_BIN" \
        HPCNB_NODE_NETWORK=shared \
        HPCNB_PORTAL_STATE="$STATE" HPCNB_PORTAL_VENV="$COURSE/.venv" HPCNB_PORTAL_USERS="$users" \
        HPCNB_PORTAL_PASSWORD_FILE="$STATE/password" HPCNB_PORTAL_PORT="$PORT" \
        HPCNB_PORTAL_HUB_PORT=$((PORT + 1)) HPCNB_PORTAL_PROXY_API_PORT=$((PORT + 2)) \
        HPCNB_PORTAL_PROXY="$PROXY" HPCNB_PORTAL_TIME="${PORTAL_TIME:-8:00:00}" HPCNB_PORTAL_MEM="${PORTAL_MEM:-2G}" \
        HPCNB_PORTAL_COURSE_DIR="$COURSE_DIR" HPCNB_PORTAL_HUB_ADDRESS="${PORTAL_HUB_ADDRESS:-127.0.0.1}" \
        "$HERE/.venv/bin/jupyterhub" -f "$HERE/ci/portal/jupyterhub_config.py"
}

[[ $(id -u) -eq 0 ]] ||
    die "run me as root: I make Unix users, and the hub submits each one's server job as that user (runuser)"
case ${1:-} in
    install) cmd_install ;;
    run) cmd_run ;;
    *) echo "usage: $0 install|run" >&2; exit 2 ;;
esac
