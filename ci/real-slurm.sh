#!/usr/bin/env bash
# ci/real-slurm.sh - a real Slurm on localhost, for the parity suite: 22.05 (Debian 12's own
# packages, on the host) or 24.11 (Debian 13's packages, in a chroot), side by side.
#
#   ci/real-slurm.sh up [VERSION]       install (if missing), configure, start, wait until usable
#   ci/real-slurm.sh down [VERSION]     stop what `up` started (reverse order); packages stay
#   ci/real-slurm.sh status [VERSION]   which daemons run, and sinfo (exit 0 = all up, 3 = not)
#   ci/real-slurm.sh bin [VERSION]      print the folder that holds this version's commands
#   ci/real-slurm.sh address [VERSION]  print this host's address on the nodes' network (the login node's)
#
# VERSION is 22.05 (the default, or $HPCNB_REAL_SLURM) or 24.11. As root, no systemd needed.
# Both clusters have the same shape as the local Slurm's default profile: ClusterName=hpcnb,
# node[1-2] (2 CPUs, 8000 MB, gpu:v100:2 and features gpu,v100 each, one `slurmd -N nodeX` per node,
# each in network, UTS and mount namespaces of its own: a job step on node2 has node2's address
# (10.78.0.2; 24.11: 10.78.1.2) and `localhost`, `hostname` says node2, and its /tmp and /dev/shm
# are its job's own on node2 (ci/real-slurm/job_tmp.c); this host, the login node, is 10.78.0.254
# to them (`ci/real-slurm.sh address`); see node_network, node_tmp and build_job_tmp below),
# partitions debug (default), short and long (each with its own limits), accounts course (default)
# and research enforced for every CI user, a reservation years ahead (accounts_and_reservation
# below). Config templates live in ci/real-slurm/ and are installed into /etc/slurm/ (of the host,
# or of the chroot).
#
#   version  where                       slurmctld  slurmdbd  slurmd        commands
#   22.05    the host (Debian 12)        6817       6819      6821-6822     /usr/bin
#   24.11    chroot $HPCNB_SLURM_2411_ROOT 7817     7819      7821-7822     /run/hpcnb-real-slurm-24.11/bin
#            (default /var/cache/hpcnb/slurm-24.11)
#
# Daemons started, in order: munged, mariadbd (socket only), slurmdbd, slurmctld,
# slurmd node1, slurmd node2. Each one this script starts is recorded by a pid file in
# $STATE_DIR; `down` stops only those. A daemon that was already running without such a
# record (e.g. a munged started by someone else) is used but never stopped.
#
# Logs: /var/log/hpcnb-real-slurm/ (apt, mariadbd, slurmdbd, slurmctld, slurmd-nodeX);
# Slurm state: /var/spool/hpcnb-real-slurm/; both survive `down`, as do packages and DB.
# Fake GPUs: /dev/hpcnb-gpu0 and /dev/hpcnb-gpu1 (null-like character devices; 24.11:
# /dev/hpcnb-2411-gpu0-1); node names resolve to their addresses through marked lines in
# /etc/hosts. Both, and the nodes' networks, are removed by `down`. For 24.11 every path above is
# inside the chroot.
#
# Slurm 24.11 (Debian 13 "trixie", slurm-wlm 24.11.5) on this Debian 12 host:
#   - The root is built once with `debootstrap --variant=minbase --include=<packages> trixie`
#     from Debian's own archive (3-4 min on 2 cores, 650 MB) and kept in $HPCNB_SLURM_2411_ROOT with
#     the key of what it holds (suite, mirror, packages, recipe) in .hpcnb-rootfs-key: a later
#     `up` reuses it, a changed recipe rebuilds it (only while nothing is mounted in it).
#   - `up` bind-mounts /proc, /sys, /dev (+ pts, shm), /tmp, /root and this project into it at
#     the same paths (plus $HPCNB_REAL_SLURM_BINDS, colon-separated), so job scripts, their
#     outputs and the project's venv (its interpreter under /root/.pyenv included) are where the
#     chroot's slurmd sees them; `down` unmounts them all (and ends what still runs in it).
#     It gets its own /etc/hosts (the host's + node1 node2) and the host's /etc/localtime.
#   - Its own munged (its munge user has another uid than the host's), its own MariaDB 11.8
#     (socket only, in the chroot's /run) and its own ports, so the two clusters never talk.
#   - Its commands: `up` writes one wrapper per client command (sbatch, srun, squeue, sacct, ...)
#     into /run/hpcnb-real-slurm-24.11/bin: `chroot ROOT env -C "$PWD" -a CMD /usr/bin/CMD "$@"`
#     (environment kept; no `cd` in a shell, which would add OLDPWD to every job's environment;
#     argv[0] as typed, as getopt's messages show it). Put that folder first in PATH (root only).
#   - Pitfalls met: minbase has no /etc/hosts (getaddrinfo fails everywhere, munged sets a null
#     origin); a gres.conf `File=/dev/null Count=2` is fatal in 24.11 (one file per GPU here);
#     the chroot needs libffi8 for the venv's Python (ctypes).
#   - Accounting: slurmdbd 24.11.5 with the chroot's own MariaDB works with trixie's current
#     mariadb/libmariadb3 1:11.8.9+ds-0+deb13u1 (checked 2026-11-25). An earlier probe of trixie
#     stopped at start-up with `mysql_query failed: 5027 Number of columns in result (=1) set
#     execeeds maxmimum ...` / `fatal: _check_mysql_concat_is_sane: null result`: a client-side
#     error of MariaDB Connector/C; 11.8.9's changelog backports a Connector/C fix (CONC-821,
#     Debian #1139473), most likely that one. If it comes back (an older mirror snapshot), the
#     slurmdbd timeout names the libmariadb3 version in use; the host's MariaDB 10.11 over a TCP
#     port is the fallback to try.
#
# Environment: HPCNB_REAL_SLURM_TIMEOUT (seconds per readiness wait, default 60),
# HPCNB_SLURM_2411_ROOT, HPCNB_REAL_SLURM_BINDS, HPCNB_DEBIAN_MIRROR (24.11's build).
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROJECT=$(dirname "$HERE")
TEMPLATES=$HERE/real-slurm
# paths as the daemons see them (for 24.11: inside the chroot)
STATE_DIR=/run/hpcnb-real-slurm
LOG_DIR=/var/log/hpcnb-real-slurm
SPOOL_DIR=/var/spool/hpcnb-real-slurm
ETC=/etc/slurm
CLUSTER=hpcnb
NODES=(node1 node2)
SLURM_USER=slurm
DB_NAME=hpcnb_slurm_acct_db
DB_USER=slurm
DB_PASS=hpcnb-ci-only
HOSTS_MARK='# hpcnb-real-slurm'
TIMEOUT=${HPCNB_REAL_SLURM_TIMEOUT:-60}
export DEBIAN_FRONTEND=noninteractive

# select_version VERSION: everything that differs between the two clusters
select_version() {
  VERSION=$1
  case $VERSION in
    22.05)
      ROOTFS=''                      # the host itself
      IN=()                          # how to run a command where the daemons run
      PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
      CTLD_PORT=6817 DBD_PORT=6819 NODE_PORTS='[6821-6822]'
      FIRST_JOB_ID=14751             # see FirstJobId in real-slurm/slurm.conf
      GPU_DEVS=(/dev/hpcnb-gpu0 /dev/hpcnb-gpu1) GPU_GLOB='/dev/hpcnb-gpu[0-1]'
      BIN_DIR=/usr/bin
      NET=10.78.0 TAG=2205           # the nodes' network: NET.1, NET.2; this host NET.254
      ;;
    24.11)
      ROOTFS=${HPCNB_SLURM_2411_ROOT:-/var/cache/hpcnb/slurm-24.11}
      ROOTFS=${ROOTFS%/}
      IN=(chroot "$ROOTFS")
      SUITE=trixie
      MIRROR=${HPCNB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
      PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server libffi8)
      CTLD_PORT=7817 DBD_PORT=7819 NODE_PORTS='[7821-7822]'
      FIRST_JOB_ID=7601
      GPU_DEVS=(/dev/hpcnb-2411-gpu0 /dev/hpcnb-2411-gpu1) GPU_GLOB='/dev/hpcnb-2411-gpu[0-1]'
      BIN_DIR=/run/hpcnb-real-slurm-24.11/bin
      NET=10.78.1 TAG=2411
      ;;
    *) echo "unknown Slurm version '$VERSION' (known: 22.05, 24.11)" >&2; exit 2 ;;
  esac
  # the host's view of a path of the daemons
  S=$ROOTFS$STATE_DIR
  LOGIN_ADDR=$NET.254 BRIDGE=hpcnb-br$TAG
}

log() { echo "[real-slurm ${VERSION:-} $(date +%T)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# die, showing the end of every log that may explain it
die_logs() {
  local f
  log "ERROR: $*"
  for f in "$ROOTFS"/var/log/munge/munged.log "$ROOTFS$LOG_DIR"/mariadbd.log "$ROOTFS$LOG_DIR"/slurm*.log; do
    [ -s "$f" ] || continue
    echo "----- last lines of $f -----" >&2
    tail -n 8 "$f" >&2
  done
  exit 1
}
trap 'die "unexpected failure (line $LINENO): $BASH_COMMAND"' ERR
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# close every descriptor above 2 that the caller passed on: the daemons would inherit them, and
# an inherited lock (`flock /tmp/real-slurm.lock ci/real-slurm.sh up`) would then be held by
# munged, mariadbd and slurmdbd for as long as they run
close_inherited_fds() {
  local fd fds
  fds=$(ls /proc/$$/fd)
  for fd in $fds; do
    [ "$fd" -gt 2 ] 2>/dev/null || continue
    eval "exec $fd>&-" 2>/dev/null || true
  done
}

need_root() {
  [ "$(id -u)" = 0 ] || die "must be run as root (it installs packages and starts system daemons); try: sudo $0 $*"
}

# alive PIDFILE NAME: the pid in PIDFILE runs, is not a zombie, and is called NAME
alive() {
  local pid
  [ -r "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/stat" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

# wait_for DESC CMD...: poll CMD until it succeeds; after TIMEOUT s fail with log tails
wait_for() {
  local desc=$1 end
  shift
  end=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || die_logs "timed out after ${TIMEOUT}s waiting for $desc"
    sleep 0.1
  done
}

# stop PIDFILE NAME: SIGTERM the daemon we started, wait up to 20 s, then SIGKILL
stop() {
  local f=$1 name=$2 pid
  if ! alive "$f" "$name"; then rm -f "$f"; return 0; fi
  pid=$(cat "$f")
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do alive "$f" "$name" || break; sleep 0.1; done
  if alive "$f" "$name"; then
    log "$name did not exit after 20 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$f"
}

# render TEMPLATE DEST MODE OWNER: fill in the placeholders; install DEST only if it differs
render() {
  local tmp dest=$ROOTFS$2
  tmp=$(mktemp)
  sed -e "s|@SLURM_USER@|$SLURM_USER|g" -e "s|@STATE_DIR@|$STATE_DIR|g" \
      -e "s|@LOG_DIR@|$LOG_DIR|g" -e "s|@SPOOL_DIR@|$SPOOL_DIR|g" \
      -e "s|@GPU_FILES@|$GPU_FILES|g" -e "s|@DB_NAME@|$DB_NAME|g" \
      -e "s|@DB_USER@|$DB_USER|g" -e "s|@DB_PASS@|$DB_PASS|g" \
      -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
      -e "s|@NODE_PORTS@|$NODE_PORTS|g" -e "s|@FIRST_JOB_ID@|$FIRST_JOB_ID|g" \
      -e "s|@LOGIN_ADDR@|$LOGIN_ADDR|g" -e "s|@NODE_ADDRS@|$NET.[1-${#NODES[@]}]|g" "$TEMPLATES/$1" > "$tmp"
  if grep -v '^#' "$tmp" | grep -q '@[A-Z_]*@'; then rm -f "$tmp"; die "unfilled placeholder in $TEMPLATES/$1"; fi
  if ! cmp -s "$tmp" "$dest"; then
    install -m "$3" "$tmp" "$dest"
    log "wrote $dest"
  else
    chmod "$3" "$dest"
  fi
  # the owner as the daemons know it (the chroot's users have their own uids)
  "${IN[@]}" chown "$4:$4" "$2"
  rm -f "$tmp"
}
# checksum of config files; daemons we start are tagged with it ($STATE_DIR/NAME.sum),
# so a later `up` restarts them when the config changed since (even after a failed run)
conf_sum() { cat "$@" | sha256sum | cut -d' ' -f1; }
stale() { [ "$(cat "$S/$1.sum" 2>/dev/null)" != "$2" ]; }

# a live (non-zombie) process called NAME runs on this version's root, whoever started it
running_named() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = "$1" ] || continue
    [ "$(readlink "$d/root" 2>/dev/null)" = "${ROOTFS:-/}" ] || continue
    [ "$(awk '{print $3}' "$d/stat" 2>/dev/null)" != Z ] && return 0
  done
  return 1
}

munge_ok() { "${IN[@]}" munge -n 2>/dev/null | "${IN[@]}" unmunge >/dev/null 2>&1; }
mariadb_ok() { "${IN[@]}" mariadb-admin ping >/dev/null 2>&1; }
ctld_ok() { "${IN[@]}" scontrol ping 2>/dev/null | grep -q 'is UP'; }
dbd_ok() { "${IN[@]}" sacctmgr -n -P list cluster format=cluster >/dev/null 2>&1; }

# every node answers and is usable (idle, or busy with jobs); DOWN/DRAIN nodes left by an
# earlier run are resumed once their slurmd is back
nodes_ready() {
  local states bad n
  states=$("${IN[@]}" sinfo -h -N -o '%N %T' 2>/dev/null | sort -u) || return 1
  [ "$(printf '%s\n' "$states" | grep -c .)" -eq "${#NODES[@]}" ] || return 1
  bad=$(printf '%s\n' "$states" | awk '$2 ~ /^(down|drain|fail)/ && $2 !~ /\*$/ {print $1}')
  for n in $bad; do "${IN[@]}" scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true; done
  ! printf '%s\n' "$states" | awk '{print $2}' | grep -qvxE 'idle|mixed|allocated|completing'
}
# wait for nodes_ready; fail at once if one of our slurmd has exited (e.g. port in use)
wait_nodes() {
  local end=$((SECONDS + TIMEOUT)) n
  until nodes_ready; do
    for n in "${NODES[@]}"; do
      alive "$S/slurmd-$n.pid" slurmd || die_logs "slurmd $n exited (see $ROOTFS$LOG_DIR/slurmd-$n.log)"
    done
    [ "$SECONDS" -lt "$end" ] || die_logs "timed out after ${TIMEOUT}s waiting for every node to be idle (sinfo -N)"
    sleep 0.1
  done
}
# slurmctld has registered with slurmdbd and sacct answers
accounting_ready() {
  [ -n "$("${IN[@]}" sacctmgr -n -P list cluster "$CLUSTER" format=controlhost 2>/dev/null)" ] &&
    "${IN[@]}" sacct -n -X -a -S now-1hour -o JobID >/dev/null 2>&1
}

# -- accounts and a reservation, as a centre has them -------------------------------------------
# AccountingStorageEnforce=associations (slurm.conf): a job runs only under an account its user is
# associated with. Every user that submits here in CI gets the accounts course (its default: jobs
# without --account run there) and research: root (the parity suite), the course's user
# (ci/real-course.sh) and the portal's (ci/portal.sh; $HPCNB_REAL_SLURM_USERS, space-separated, adds
# more). A maintenance reservation on node2, years ahead, is there to be seen (scontrol show
# reservation); no job of the tests reaches it (an INFINITE time limit counts as one year).
ACCOUNTS=(course research) DEFAULT_ACCOUNT=course
RESERVATION=(ReservationName=maint StartTime=2036-01-05T08:00:00 Duration=08:00:00 Nodes=node2 Users=root Flags=MAINT)
ci_users() { echo root hpcnb-student hpcnb-student2 student1 student2 student3 ${HPCNB_REAL_SLURM_USERS:-}; }

# slurmctld resolves its associations' user names to uids when it loads them (then hourly): a CI
# user whose Unix account comes later has no default account there, and its jobs are refused
# ("Invalid account or account/partition combination specified") until slurmctld restarts. So on a
# fresh machine the CI users (the host's: the 24.11 chroot's only submitter is root) exist first.
ci_unix_users() {
  local u
  # shellcheck source=ci/course-install.sh
  source "$HERE/course-install.sh"  # course_user: the Unix user, once, as ci/real-course.sh makes it
  for u in $(ci_users); do course_user "$u" || die "useradd $u failed"; done
}

accounts_and_reservation() {
  local a u have
  have=$("${IN[@]}" sacctmgr -n -P list account format=account 2>/dev/null)
  for a in "${ACCOUNTS[@]}"; do
    printf '%s\n' "$have" | grep -qx "$a" ||
      "${IN[@]}" sacctmgr -i add account "$a" cluster="$CLUSTER" description="$a" organization=hpcnb >/dev/null ||
      die_logs "sacctmgr add account $a failed"
  done
  have=$("${IN[@]}" sacctmgr -n -P list assoc cluster="$CLUSTER" format=user,account 2>/dev/null)
  for u in $(ci_users); do
    for a in "${ACCOUNTS[@]}"; do
      printf '%s\n' "$have" | grep -qx "$u|$a" ||
        "${IN[@]}" sacctmgr -i add user "$u" account="$a" cluster="$CLUSTER" >/dev/null ||
        die_logs "sacctmgr add user $u account=$a failed"
    done
    "${IN[@]}" sacctmgr -i modify user "$u" set defaultaccount="$DEFAULT_ACCOUNT" >/dev/null 2>&1 || true
  done
  # root's built-in association with the account root: gone, so root has the accounts every user has
  if printf '%s\n' "$have" | grep -qx 'root|root'; then
    "${IN[@]}" sacctmgr -i remove user root account=root cluster="$CLUSTER" >/dev/null ||
      die_logs "sacctmgr remove user root account=root failed"
  fi
  if ! "${IN[@]}" scontrol show reservation "${RESERVATION[0]#*=}" >/dev/null 2>&1; then
    "${IN[@]}" scontrol create reservation "${RESERVATION[@]}" >/dev/null ||
      die_logs "scontrol create reservation ${RESERVATION[*]} failed"
  fi
  log "accounts ${ACCOUNTS[*]} (default $DEFAULT_ACCOUNT) for: $(ci_users); reservation ${RESERVATION[0]#*=}"
}

# apt_install LOG PACKAGE...: install on the host, keeping maintainer scripts from starting services
apt_install() {
  local log_file=$1 policy_made=0
  shift
  log "installing: $*"
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    policy_made=1
  fi
  if ! apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" > "$log_file" 2>&1; then
    log "apt-get install failed; running apt-get update and trying again"
    apt-get -o DPkg::Lock::Timeout=600 update -q >> "$log_file" 2>&1 || true
    if ! apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >> "$log_file" 2>&1; then
      [ $policy_made = 0 ] || rm -f /usr/sbin/policy-rc.d
      tail -n 20 "$log_file" >&2
      die "could not install $* (full log: $log_file)"
    fi
  fi
  [ $policy_made = 0 ] || rm -f /usr/sbin/policy-rc.d
}

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  apt_install "$LOG_DIR/apt.log" "${missing[@]}"
}

# -- 24.11: the Debian 13 root ------------------------------------------------------------------
# bump when the build steps below change: a cached root of another recipe is rebuilt
ROOTFS_RECIPE=1
rootfs_key() { echo "suite=$SUITE mirror=$MIRROR packages=${PACKAGES[*]} recipe=$ROOTFS_RECIPE" | sha256sum | cut -c1-16; }
# mount points under DIR (deepest first)
mounts_under() { findmnt -rn -o TARGET | awk -v r="$1/" 'index($0, r) == 1' | sort -r; }

# remove_tree DIR: delete an unmounted root (refuses while anything is mounted in it)
remove_tree() {
  [ -e "$1" ] || return 0
  [ -z "$(mounts_under "$1")" ] || die "$1 still has mounts ($(mounts_under "$1" | tr '\n' ' ')): run \`$0 down $VERSION\` first"
  rm -rf --one-file-system "$1"
}

# build_rootfs: debootstrap the chroot once; reuse it while its key matches
build_rootfs() {
  local key t0 tmp=$ROOTFS.building build_log=$ROOTFS.build.log
  key=$(rootfs_key)
  if [ "$(cat "$ROOTFS/.hpcnb-rootfs-key" 2>/dev/null)" = "$key" ]; then return 0; fi
  t0=$(now)
  mkdir -p "$(dirname "$ROOTFS")"
  command -v debootstrap >/dev/null || apt_install "$ROOTFS.apt.log" debootstrap
  if [ -e "$ROOTFS" ]; then
    log "the cached root $ROOTFS is of another recipe (key $(cat "$ROOTFS/.hpcnb-rootfs-key" 2>/dev/null || echo none), want $key): rebuilding"
    remove_tree "$ROOTFS"
  fi
  for m in $(mounts_under "$tmp"); do umount "$m" || umount -l "$m"; done  # left by a failed build
  remove_tree "$tmp"
  log "building the Debian $SUITE root in $ROOTFS (debootstrap, a few minutes; log: $build_log)"
  if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" "$SUITE" "$tmp" "$MIRROR" \
      > "$build_log" 2>&1; then
    tail -n 20 "$build_log" >&2
    die "debootstrap failed (full log: $build_log)"
  fi
  chroot "$tmp" apt-get clean >> "$build_log" 2>&1
  chroot "$tmp" dpkg-query -W -f='${Package} ${Version}\n' "${PACKAGES[@]}" libmariadb3 > "$tmp/.hpcnb-rootfs-packages"
  echo "$key" > "$tmp/.hpcnb-rootfs-key"
  mv "$tmp" "$ROOTFS"
  log "built $ROOTFS in $(since "$t0") s ($(du -sh "$ROOTFS" | cut -f1)): $(grep -E '^(slurmctld|libmariadb3) ' "$ROOTFS/.hpcnb-rootfs-packages" | tr '\n' ' ')"
}

# bind SRC: mount SRC at the same path inside the root (once)
bind() {
  local dst=$ROOTFS$1
  [ -d "$1" ] || { log "not binding $1 (no such directory)"; return 0; }
  mountpoint -q "$dst" && return 0
  mkdir -p "$dst"
  mount --bind "$1" "$dst"
}

mount_rootfs() {
  local p extra=()
  for p in /proc /sys /dev /dev/pts /dev/shm /tmp /root; do bind "$p"; done
  IFS=: read -r -a extra <<< "${HPCNB_REAL_SLURM_BINDS:-}"
  for p in "$PROJECT" "${extra[@]}"; do
    [ -n "$p" ] || continue
    case $p in /tmp/* | /root/*) ;; *) bind "$p" ;; esac
  done
}

# end what still runs in the root (jobs' processes; the daemons are stopped before)
end_rootfs_processes() {
  local d pids=()
  for d in /proc/[0-9]*; do
    [ "$(readlink "$d/root" 2>/dev/null)" = "$ROOTFS" ] && pids+=("${d#/proc/}")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  log "ending processes still running in $ROOTFS: ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  sleep 2
  kill -KILL "${pids[@]}" 2>/dev/null || true
  sleep 0.5
}

unmount_rootfs() {
  local m
  for m in $(mounts_under "$ROOTFS"); do
    umount "$m" 2>/dev/null || { log "$m busy: lazy unmount"; umount -l "$m"; }
  done
}

# the chroot's /etc/hosts (the host's own names + the nodes) and time zone
rootfs_etc() {
  local tmp
  tmp=$(mktemp)
  { grep -vF -- "$HOSTS_MARK" /etc/hosts || true; hosts_lines; } > "$tmp"
  cmp -s "$tmp" "$ROOTFS/etc/hosts" || install -m 644 "$tmp" "$ROOTFS/etc/hosts"
  rm -f "$tmp"
  if [ -e /etc/localtime ] && ! cmp -s /etc/localtime "$ROOTFS/etc/localtime"; then
    rm -f "$ROOTFS/etc/localtime"
    cp -L /etc/localtime "$ROOTFS/etc/localtime"
  fi
}

# one wrapper per client command in BIN_DIR: runs it in the root, in the caller's directory
write_wrappers() {
  local cmd
  install -d -m 755 "$BIN_DIR"
  for cmd in $("${IN[@]}" dpkg -L slurm-client | grep -E '^/usr/bin/[a-z0-9_]+$' | xargs -n1 basename); do
    cat > "$BIN_DIR/$cmd.tmp" <<EOF
#!/bin/sh
# Slurm $VERSION's $cmd, run in its chroot in the caller's directory (made by ci/real-slurm.sh up $VERSION)
[ "\$(/usr/bin/id -u)" = 0 ] || { echo "$cmd: error: Slurm $VERSION runs in a chroot ($ROOTFS): its commands need root" >&2; exit 1; }
[ -d "$ROOTFS\$PWD" ] || { echo "$cmd: error: \$PWD is not visible in the Slurm $VERSION chroot (ci/real-slurm.sh binds /tmp, /root, the project and \\\$HPCNB_REAL_SLURM_BINDS)" >&2; exit 1; }
exec /usr/sbin/chroot $ROOTFS /usr/bin/env -C "\$PWD" -a $cmd /usr/bin/$cmd "\$@"
EOF
    chmod 755 "$BIN_DIR/$cmd.tmp"
    mv "$BIN_DIR/$cmd.tmp" "$BIN_DIR/$cmd"
  done
}

# -- both versions --------------------------------------------------------------------------------
# two character devices for the fake GPUs (null-like, so harmless if opened); where
# mknod is not allowed, fall back to /dev/tty0 and /dev/tty1
make_gpu_devices() {
  local i
  GPU_FILES=$GPU_GLOB
  for i in 0 1; do
    [ -c "${GPU_DEVS[$i]}" ] && continue
    rm -f "${GPU_DEVS[$i]}"
    if ! mknod -m 666 "${GPU_DEVS[$i]}" c 1 $((3 + 2 * i)) 2>/dev/null; then
      if [ ! -c /dev/tty0 ] || [ ! -c /dev/tty1 ]; then
        die "cannot create ${GPU_DEVS[$i]} (mknod) and /dev/tty0-1 are missing"
      fi
      log "mknod not permitted: the fake GPUs are /dev/tty0 and /dev/tty1"
      rm -f "${GPU_DEVS[@]}"
      GPU_FILES='/dev/tty[0-1]'
      return 0
    fi
  done
}

# rewrite /etc/hosts in place (it may be a bind mount, so no sed -i / rename)
hosts_without_mark() { grep -vF -- "$HOSTS_MARK" /etc/hosts || true; }
add_hosts_line() {
  local tmp
  tmp=$(mktemp)
  { hosts_without_mark; hosts_lines; } > "$tmp"
  if ! cmp -s "$tmp" /etc/hosts; then
    cat "$tmp" > /etc/hosts
    log "added to /etc/hosts: $(hosts_lines | grep -v '^::' | cut -d' ' -f1,2 | tr '\n' ' ')"
  fi
  rm -f "$tmp"
}
remove_hosts_line() {
  local tmp
  grep -qF -- "$HOSTS_MARK" /etc/hosts || return 0
  tmp=$(mktemp)
  hosts_without_mark > "$tmp"
  cat "$tmp" > /etc/hosts
  rm -f "$tmp"
  log "removed the $HOSTS_MARK lines from /etc/hosts"
}

# record_pid NAME PIDFILE: remember a daemon we started that writes its pid elsewhere
# (PIDFILE as the daemon sees it)
record_pid() {
  local i
  for i in $(seq 1 50); do [ -s "$ROOTFS$2" ] && break; sleep 0.1; done
  [ -s "$ROOTFS$2" ] || die_logs "$1 started but wrote no pid file $ROOTFS$2"
  cat "$ROOTFS$2" > "$S/$1.pid"
}

start_munged() {
  if alive "$S/munged.pid" munged && munge_ok; then log "munged: already running"; return; fi
  if munge_ok; then log "munged: running, not started by this script (left alone)"; return; fi
  if [ ! -s "$ROOTFS/etc/munge/munge.key" ]; then
    log "creating munge key"
    "${IN[@]}" mungekey --create --force >/dev/null 2>&1 ||
      dd if=/dev/urandom of="$ROOTFS/etc/munge/munge.key" bs=1024 count=1 status=none
  fi
  "${IN[@]}" chown munge:munge /etc/munge/munge.key
  chmod 400 "$ROOTFS/etc/munge/munge.key"
  "${IN[@]}" install -d -o munge -g munge -m 755 /run/munge
  log "starting munged"
  rm -f "$ROOTFS/run/munge/munged.pid"
  "${IN[@]}" runuser -u munge -- /usr/sbin/munged 2>/dev/null ||
    "${IN[@]}" runuser -u munge -- /usr/sbin/munged --force ||
    die_logs "munged did not start"
  record_pid munged /run/munge/munged.pid
  wait_for munged munge_ok
}

start_mariadb() {
  if alive "$S/mariadbd.pid" mariadbd && mariadb_ok; then
    log "mariadbd: already running"
  elif mariadb_ok; then
    log "mariadbd: running, not started by this script (left alone)"
  else
    "${IN[@]}" install -d -o mysql -g mysql -m 755 /run/mysqld
    if [ ! -d "$ROOTFS/var/lib/mysql/mysql" ]; then
      log "initialising the MariaDB data directory"
      "${IN[@]}" mariadb-install-db --user=mysql --datadir=/var/lib/mysql \
        --auth-root-authentication-method=socket > "$ROOTFS$LOG_DIR/mariadb-install-db.log" 2>&1 ||
        die_logs "mariadb-install-db failed"
    fi
    rm -f "$ROOTFS/run/mysqld/mysqld.pid"
    log "starting mariadbd (socket only)"
    setsid "${IN[@]}" mariadbd --user=mysql --skip-networking --skip-log-bin \
      --pid-file=/run/mysqld/mysqld.pid --innodb-buffer-pool-size=128M \
      --innodb-flush-log-at-trx-commit=0 --innodb-lock-wait-timeout=900 \
      < /dev/null >> "$ROOTFS$LOG_DIR/mariadbd.log" 2>&1 &
    wait_for mariadbd mariadb_ok
    record_pid mariadbd /run/mysqld/mysqld.pid
  fi
  "${IN[@]}" mariadb -e "CREATE DATABASE IF NOT EXISTS $DB_NAME;
    CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
    ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';" ||
    die_logs "could not create the accounting database/user"
}

# what to say when slurmdbd does not come up: the client library it runs with
dbd_hint() {
  local lib
  lib=$("${IN[@]}" dpkg-query -W -f='${Version}' libmariadb3 2>/dev/null || echo unknown)
  echo "slurmdbd did not answer (libmariadb3 $lib; 1:11.8.9+ds-0+deb13u1 works, see the header of $0)"
}

start_slurmdbd() {
  local sum
  sum=$(conf_sum "$ROOTFS$ETC/slurmdbd.conf")
  if alive "$S/slurmdbd.pid" slurmdbd; then
    if stale slurmdbd "$sum"; then
      log "slurmdbd.conf changed since slurmdbd started: restarting it"
      stop "$S/slurmdbd.pid" slurmdbd
    else
      log "slurmdbd: already running"
    fi
  fi
  if ! alive "$S/slurmdbd.pid" slurmdbd; then
    if dbd_ok; then die "a slurmdbd not started by this script answers on port $DBD_PORT; stop it first"; fi
    log "starting slurmdbd"
    rm -f "$S/slurmdbd.pid"
    "${IN[@]}" slurmdbd || die_logs "slurmdbd did not start"
    echo "$sum" > "$S/slurmdbd.sum"
  fi
  wait_for "slurmdbd to answer sacctmgr ($(dbd_hint))" dbd_ok
  if ! "${IN[@]}" sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER"; then
    log "registering cluster $CLUSTER in accounting"
    "${IN[@]}" sacctmgr -i add cluster "$CLUSTER" >/dev/null || die_logs "sacctmgr add cluster $CLUSTER failed"
  fi
}

# -- each node's own network ---------------------------------------------------------------------
# Each slurmd runs in a network namespace of its own (hpcnb-TAG-NODE), linked by a veth pair to a
# bridge on this host: node i has NET.i, this host (the login node) NET.254. So `localhost` on node2
# is node2, ports on the two nodes do not collide, a node reaches another by its name (the hosts
# lines below), and this host reaches the nodes as a login node does. Nothing else is reached.
node_index() { local i; for i in "${!NODES[@]}"; do if [ "${NODES[$i]}" = "$1" ]; then echo $((i + 1)); fi; done; }
node_addr() { echo "$NET.$(node_index "$1")"; }
netns_name() { echo "hpcnb-$TAG-$1"; }
# the /etc/hosts lines naming the nodes (the host's for 22.05, the chroot's for 24.11), each also at
# `::ffff:ADDR` under a name of its own, as the local Slurm's (hosts_text in
# hpcnb/localslurm/network.py says why: torch's dual-stack TCPStore names its clients so)
hosts_lines() {
  local n
  for n in "${NODES[@]}"; do echo "$(node_addr "$n") $n $HOSTS_MARK"; done
  for n in "${NODES[@]}"; do echo "::ffff:$(node_addr "$n") $n.ipv4-mapped $HOSTS_MARK"; done
}

bridge_up() {
  ip link show "$BRIDGE" >/dev/null 2>&1 && return 0
  ip link add "$BRIDGE" type bridge || die "cannot make the bridge $BRIDGE (ip link add ... type bridge)"
  ip addr add "$LOGIN_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  log "bridge $BRIDGE: this host is $LOGIN_ADDR to the nodes"
}

# node_network NODE: a fresh network namespace for the node's slurmd, linked to the bridge
node_network() {
  local ns veth=h$TAG$1
  ns=$(netns_name "$1")
  ip netns del "$ns" 2>/dev/null || true  # one left by an earlier slurmd (its jobs keep theirs)
  ip link del "$veth" 2>/dev/null || true
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$BRIDGE" up
  ip -n "$ns" addr add "$(node_addr "$1")/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  # no default route: nothing else is reached (a name server is unreachable at once, not after a timeout)
}

remove_networks() {
  local n
  for n in "${NODES[@]}"; do
    ip netns del "$(netns_name "$n")" 2>/dev/null || true
    ip link del "h$TAG$n" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
}

# -- each node's own /tmp ----------------------------------------------------------------------
# A node's /tmp is $SPOOL_DIR/tmp/NODE, emptied when its slurmd starts (as a node's /tmp at boot)
# and mounted over /tmp in that slurmd's mount namespace, so every job step on node2 sees node2's
# /tmp and not node1's. What a test or a course run keeps under this host's /tmp and its jobs must
# reach stays reachable at the same path: the project (when it lies under /tmp), root's pytest
# folders (/tmp/pytest-of-root) and the /tmp paths of $HPCNB_REAL_SLURM_BINDS.
kept_tmp_paths() {
  local p extra=()
  IFS=: read -r -a extra <<< "${HPCNB_REAL_SLURM_BINDS:-}"
  for p in "$PROJECT" /tmp/pytest-of-root "${extra[@]}"; do
    case $p in /tmp/?*) echo "${p#/tmp/}" ;; esac
  done
}

# node_tmp NODE: empty the node's /tmp and its jobs' (job_tmp.so's); make sure each kept path
# exists on this host
node_tmp() {
  local dir=$ROOTFS$SPOOL_DIR/tmp/$1 rel
  rm -rf --one-file-system "$dir" "$ROOTFS$SPOOL_DIR/job-tmp/$1"
  install -d -m 1777 "$dir"
  install -d -m 755 "$S/host-tmp-$1"
  [ -d /tmp/pytest-of-root ] || install -d -m 700 /tmp/pytest-of-root
  for rel in $(kept_tmp_paths); do [ -d "/tmp/$rel" ] || log "note: /tmp/$rel does not exist (yet): $1 will not see it"; done
}

# node_shell NODE: what runs in the node's new namespaces, then becomes its slurmd
node_shell() {
  local n=$1 hold=$STATE_DIR/host-tmp-$1 rel
  echo "set -e; echo $n > /proc/sys/kernel/hostname"
  echo "mount --bind /tmp $hold; mount --bind $SPOOL_DIR/tmp/$n /tmp"
  for rel in $(kept_tmp_paths); do
    echo "if [ -d '$hold/$rel' ]; then mkdir -p '/tmp/$rel'; mount --bind '$hold/$rel' '/tmp/$rel'; fi"
  done
  echo "umount $hold; exec slurmd -N $n"
}

# -- each job's own /tmp and /dev/shm on each node ----------------------------------------------
# ci/real-slurm/job_tmp.c, a SPANK plugin (see its head), built for this slurmd's version into
# $SPOOL_DIR/job_tmp.so and named in plugstack.conf: every task of a job on node2 sees that job's
# /tmp (the kept paths above carried into it) and /dev/shm on node2, removed when the job ends.
version_number() {  # "slurm 24.11.5" -> 0x180b05
  "${IN[@]}" slurmd -V | awk '{ split($2, v, "."); printf "0x%02x%02x%02x\n", v[1], v[2], v[3] }'
}

build_job_tmp() {
  local tmp dest=$ROOTFS$SPOOL_DIR/job_tmp.so
  command -v gcc >/dev/null || apt_install "$ROOTFS$LOG_DIR/apt.log" gcc libc6-dev
  tmp=$(mktemp)
  gcc -Wall -Werror -O2 -shared -fPIC -DSLURM_VERSION_NUMBER="$(version_number)" \
      -o "$tmp" "$TEMPLATES/job_tmp.c" || die "building $TEMPLATES/job_tmp.c failed"
  if ! cmp -s "$tmp" "$dest"; then install -m 755 "$tmp" "$dest"; log "built $dest"; fi
  rm -f "$tmp"
}

start_slurm() {
  local n sum kept confs=("$ROOTFS$ETC/slurm.conf" "$ROOTFS$ETC/gres.conf" "$ROOTFS$ETC/plugstack.conf"
                          "$ROOTFS$SPOOL_DIR/job_tmp.so")
  [ -z "$ROOTFS" ] || confs+=("$ROOTFS$ETC/cgroup.conf")
  sum=$(conf_sum "${confs[@]}")
  kept=$(kept_tmp_paths | sha256sum | cut -d' ' -f1)
  if stale slurmd "$kept"; then  # a slurmd's /tmp keeps what was kept when it started
    for n in "${NODES[@]}"; do
      alive "$S/slurmd-$n.pid" slurmd || continue
      log "the /tmp paths the nodes keep changed since start (another project): restarting slurmd $n"
      stop "$S/slurmd-$n.pid" slurmd
    done
  fi
  if stale slurm "$sum"; then
    for n in $(printf '%s\n' "${NODES[@]}" | tac); do
      alive "$S/slurmd-$n.pid" slurmd || continue
      log "slurm.conf/gres.conf/plugstack.conf changed since start: restarting slurmd $n"
      stop "$S/slurmd-$n.pid" slurmd
    done
    if alive "$S/slurmctld.pid" slurmctld; then
      log "slurm.conf/gres.conf/plugstack.conf changed since start: restarting slurmctld"
      stop "$S/slurmctld.pid" slurmctld
    fi
  fi
  if alive "$S/slurmctld.pid" slurmctld; then
    log "slurmctld: already running"
  else
    if ctld_ok; then die "a slurmctld not started by this script answers on port $CTLD_PORT; stop it first"; fi
    log "starting slurmctld"
    rm -f "$S/slurmctld.pid"
    # -i: tolerate unreadable or stale state files from an earlier run
    "${IN[@]}" slurmctld -i || die_logs "slurmctld did not start"
  fi
  wait_for slurmctld ctld_ok
  for n in "${NODES[@]}"; do
    if alive "$S/slurmd-$n.pid" slurmd; then
      log "slurmd $n: already running"
      continue
    fi
    log "starting slurmd $n"
    mkdir -p "$ROOTFS$SPOOL_DIR/slurmd/$n"
    rm -f "$S/slurmd-$n.pid"  # one left by a run that was killed would pass for the new one
    node_tmp "$n"
    node_network "$n"
    # its own network, UTS and mount namespaces: a job step on node2 has node2's address and
    # `localhost`, is told "node2" by hostname and has node2's /tmp, as on a cluster
    # (made before the chroot: in it, / is no mount point and its propagation cannot change)
    nsenter --net="/run/netns/$(netns_name "$n")" -- \
      unshare --uts --mount --propagation slave -- "${IN[@]}" sh -c "$(node_shell "$n")" ||
      die_logs "slurmd -N $n did not start"
    # 24.11's slurmd returns before its daemon has written the pid file
    wait_for "slurmd $n to write $S/slurmd-$n.pid" test -s "$S/slurmd-$n.pid"
  done
  echo "$sum" > "$S/slurm.sum"
  echo "$kept" > "$S/slurmd.sum"
}

cmd_up() {
  local t0
  t0=$(now)
  need_root up
  close_inherited_fds
  [ -d "$TEMPLATES" ] || die "config templates not found in $TEMPLATES"
  if [ -n "$ROOTFS" ]; then
    build_rootfs
    mount_rootfs
    rootfs_etc
  fi
  install -d -m 755 "$S" "$ROOTFS$LOG_DIR"
  [ -n "$ROOTFS" ] || { install_packages; ci_unix_users; }
  "${IN[@]}" getent passwd "$SLURM_USER" >/dev/null || die "user $SLURM_USER missing (should come with the slurm packages)"
  "${IN[@]}" chown "$SLURM_USER:$SLURM_USER" "$LOG_DIR"
  "${IN[@]}" install -d -m 755 -o "$SLURM_USER" -g "$SLURM_USER" "$SPOOL_DIR" "$SPOOL_DIR/slurmctld"
  "${IN[@]}" install -d -m 755 "$ETC" "$SPOOL_DIR/slurmd"

  make_gpu_devices
  render slurm.conf "$ETC/slurm.conf" 644 root
  render gres.conf "$ETC/gres.conf" 644 root
  render plugstack.conf "$ETC/plugstack.conf" 644 root
  build_job_tmp
  render slurmdbd.conf "$ETC/slurmdbd.conf" 600 "$SLURM_USER"
  if [ -n "$ROOTFS" ]; then
    render cgroup.conf "$ETC/cgroup.conf" 644 root
  else
    if [ -e "$ETC/cgroup.conf" ]; then log "note: $ETC/cgroup.conf exists but is unused (TaskPlugin=task/none)"; fi
    add_hosts_line
  fi

  bridge_up  # this host's address on the nodes' network: slurmctld's and slurmdbd's in slurm.conf
  start_munged
  start_mariadb
  start_slurmdbd
  start_slurm

  wait_nodes
  wait_for "sacct (slurmctld registered with slurmdbd)" accounting_ready
  accounts_and_reservation
  [ -z "$ROOTFS" ] || write_wrappers
  "${IN[@]}" sinfo
  log "cluster '$CLUSTER' (Slurm $VERSION) ready in $(since "$t0") s; its commands: $BIN_DIR"
}

cmd_down() {
  local t0 n jobs
  t0=$(now)
  need_root down
  if alive "$S/slurmctld.pid" slurmctld && ctld_ok; then
    jobs=$("${IN[@]}" squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
      log "cancelling jobs: $jobs"
      # shellcheck disable=SC2086
      "${IN[@]}" scancel $jobs 2>/dev/null || true
      for _ in $(seq 1 100); do [ -z "$("${IN[@]}" squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.1; done
    fi
  fi
  for n in $(printf '%s\n' "${NODES[@]}" | tac); do stop "$S/slurmd-$n.pid" slurmd; done
  stop "$S/slurmctld.pid" slurmctld
  stop "$S/slurmdbd.pid" slurmdbd
  stop "$S/mariadbd.pid" mariadbd
  stop "$S/munged.pid" munged
  remove_networks
  if [ -n "$ROOTFS" ]; then
    rm -rf "$BIN_DIR"
    rmdir "$(dirname "$BIN_DIR")" 2>/dev/null || true
    if [ -d "$ROOTFS" ]; then
      end_rootfs_processes
      unmount_rootfs
    fi
  else
    remove_hosts_line
  fi
  for n in "${GPU_DEVS[@]}"; do if [ -c "$n" ]; then rm -f "$n"; fi; done
  rm -f "$S"/*.sum
  rmdir "$S"/host-tmp-* "$S" 2>/dev/null || true
  log "down in $(since "$t0") s (packages, config, state and logs kept)"
}

cmd_status() {
  local all=0 d f name line
  for d in munged mariadbd slurmdbd slurmctld "${NODES[@]}"; do
    case $d in
      node*) f=$S/slurmd-$d.pid; name=slurmd; line="slurmd $d" ;;
      *) f=$S/$d.pid; name=$d; line=$d ;;
    esac
    if alive "$f" "$name"; then
      printf '%-14s running (pid %s, started by real-slurm.sh)\n' "$line" "$(cat "$f")"
    elif [ "$name" != slurmd ] && running_named "$name"; then
      printf '%-14s running (not started by real-slurm.sh)\n' "$line"
    else
      printf '%-14s stopped\n' "$line"
      all=3
    fi
  done
  if [ -n "$ROOTFS" ]; then
    echo
    echo "root $ROOTFS: $(cat "$ROOTFS/.hpcnb-rootfs-key" 2>/dev/null || echo 'not built'); mounts: $(mounts_under "$ROOTFS" | wc -l); commands: $BIN_DIR"
  fi
  if [ -x "$ROOTFS/usr/bin/sinfo" ] && { [ -z "$ROOTFS" ] || [ -e "$ROOTFS/proc/self" ]; } && ctld_ok; then
    echo
    "${IN[@]}" sinfo
  else
    echo
    echo "slurmctld does not answer: no sinfo"
    all=3
  fi
  return $all
}

select_version "${2:-${HPCNB_REAL_SLURM:-22.05}}"
case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) trap - ERR; cmd_status ;;
  bin) echo "$BIN_DIR" ;;
  address) echo "$LOGIN_ADDR" ;;
  *) echo "usage: $0 up|down|status|bin|address [22.05|24.11]" >&2; exit 2 ;;
esac
