#!/usr/bin/env bash
# ci/real-slurm.sh - a real Slurm 22.05 on localhost, for the parity suite.
#
#   ci/real-slurm.sh up       install (if missing), configure, start, wait until usable
#   ci/real-slurm.sh down     stop what `up` started (reverse order); packages stay
#   ci/real-slurm.sh status   which daemons run, and sinfo (exit 0 = all up, 3 = not)
#
# Debian 12, as root, no systemd needed. The cluster has the same shape as the local
# Slurm's default profile: ClusterName=hpcnb, node[1-2] (2 CPUs, 8000 MB, gpu:2 each,
# one `slurmd -N nodeX` per node on 127.0.0.1), partitions debug (default) and short.
# Config templates live in ci/real-slurm/ and are installed into /etc/slurm/.
#
# Daemons started, in order: munged, mariadbd (socket only), slurmdbd, slurmctld,
# slurmd node1, slurmd node2. Each one this script starts is recorded by a pid file in
# $STATE_DIR; `down` stops only those. A daemon that was already running without such a
# record (e.g. a munged started by someone else) is used but never stopped.
#
# Logs: /var/log/hpcnb-real-slurm/ (apt, mariadbd, slurmdbd, slurmctld, slurmd-nodeX);
# Slurm state: /var/spool/hpcnb-real-slurm/; both survive `down`, as do packages and DB.
# Fake GPUs: /dev/hpcnb-gpu0 and /dev/hpcnb-gpu1 (null-like character devices); node
# names resolve through a marked line in /etc/hosts. Both are removed by `down`.
#
# Environment: HPCNB_REAL_SLURM_TIMEOUT (seconds per readiness wait, default 60).
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TEMPLATES=$HERE/real-slurm
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
GPU_DEVS=(/dev/hpcnb-gpu0 /dev/hpcnb-gpu1)
HOSTS_MARK='# hpcnb-real-slurm'
HOSTS_LINE="127.0.0.1 ${NODES[*]} $HOSTS_MARK"
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
TIMEOUT=${HPCNB_REAL_SLURM_TIMEOUT:-60}
export DEBIAN_FRONTEND=noninteractive

log() { echo "[real-slurm $(date +%T)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# die, showing the end of every log that may explain it
die_logs() {
  local f
  log "ERROR: $*"
  for f in /var/log/munge/munged.log "$LOG_DIR"/mariadbd.log "$LOG_DIR"/slurm*.log; do
    [ -s "$f" ] || continue
    echo "----- last lines of $f -----" >&2
    tail -n 8 "$f" >&2
  done
  exit 1
}
trap 'die "unexpected failure (line $LINENO): $BASH_COMMAND"' ERR
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

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
  local tmp
  tmp=$(mktemp)
  sed -e "s|@SLURM_USER@|$SLURM_USER|g" -e "s|@STATE_DIR@|$STATE_DIR|g" \
      -e "s|@LOG_DIR@|$LOG_DIR|g" -e "s|@SPOOL_DIR@|$SPOOL_DIR|g" \
      -e "s|@GPU_FILES@|$GPU_FILES|g" -e "s|@DB_NAME@|$DB_NAME|g" \
      -e "s|@DB_USER@|$DB_USER|g" -e "s|@DB_PASS@|$DB_PASS|g" "$TEMPLATES/$1" > "$tmp"
  if grep -v '^#' "$tmp" | grep -q '@[A-Z_]*@'; then rm -f "$tmp"; die "unfilled placeholder in $TEMPLATES/$1"; fi
  if ! cmp -s "$tmp" "$2"; then
    install -m "$3" -o "$4" -g "$4" "$tmp" "$2"
    log "wrote $2"
  else
    chmod "$3" "$2"
    chown "$4:$4" "$2"
  fi
  rm -f "$tmp"
}
# checksum of config files; daemons we start are tagged with it ($STATE_DIR/NAME.sum),
# so a later `up` restarts them when the config changed since (even after a failed run)
conf_sum() { cat "$@" | sha256sum | cut -d' ' -f1; }
stale() { [ "$(cat "$STATE_DIR/$1.sum" 2>/dev/null)" != "$2" ]; }

# a live (non-zombie) process called NAME exists, whoever started it
running_named() {
  local d
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = "$1" ] || continue
    [ "$(awk '{print $3}' "$d/stat" 2>/dev/null)" != Z ] && return 0
  done
  return 1
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
mariadb_ok() { mariadb-admin ping >/dev/null 2>&1; }
ctld_ok() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
dbd_ok() { sacctmgr -n -P list cluster format=cluster >/dev/null 2>&1; }

# every node answers and is usable (idle, or busy with jobs); DOWN/DRAIN nodes left by an
# earlier run are resumed once their slurmd is back
nodes_ready() {
  local states bad n
  states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u) || return 1
  [ "$(printf '%s\n' "$states" | grep -c .)" -eq "${#NODES[@]}" ] || return 1
  bad=$(printf '%s\n' "$states" | awk '$2 ~ /^(down|drain|fail)/ && $2 !~ /\*$/ {print $1}')
  for n in $bad; do scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true; done
  ! printf '%s\n' "$states" | awk '{print $2}' | grep -qvxE 'idle|mixed|allocated|completing'
}
# wait for nodes_ready; fail at once if one of our slurmd has exited (e.g. port in use)
wait_nodes() {
  local end=$((SECONDS + TIMEOUT)) n
  until nodes_ready; do
    for n in "${NODES[@]}"; do
      alive "$STATE_DIR/slurmd-$n.pid" slurmd || die_logs "slurmd $n exited (see $LOG_DIR/slurmd-$n.log)"
    done
    [ "$SECONDS" -lt "$end" ] || die_logs "timed out after ${TIMEOUT}s waiting for every node to be idle (sinfo -N)"
    sleep 0.1
  done
}
# slurmctld has registered with slurmdbd and sacct answers
accounting_ready() {
  [ -n "$(sacctmgr -n -P list cluster "$CLUSTER" format=controlhost 2>/dev/null)" ] &&
    sacct -n -X -a -S now-1hour -o JobID >/dev/null 2>&1
}

install_packages() {
  local missing=() p policy_made=0
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  log "installing: ${missing[*]}"
  # keep the packages' maintainer scripts from starting the services themselves
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    policy_made=1
  fi
  if ! apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" > "$LOG_DIR/apt.log" 2>&1; then
    log "apt-get install failed; running apt-get update and trying again"
    apt-get -o DPkg::Lock::Timeout=600 update -q >> "$LOG_DIR/apt.log" 2>&1 || true
    if ! apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >> "$LOG_DIR/apt.log" 2>&1; then
      [ $policy_made = 0 ] || rm -f /usr/sbin/policy-rc.d
      tail -n 20 "$LOG_DIR/apt.log" >&2
      die "could not install ${missing[*]} (full log: $LOG_DIR/apt.log)"
    fi
  fi
  [ $policy_made = 0 ] || rm -f /usr/sbin/policy-rc.d
}

# two character devices for the fake GPUs (null-like, so harmless if opened); where
# mknod is not allowed, fall back to /dev/tty0 and /dev/tty1
make_gpu_devices() {
  local i
  GPU_FILES='/dev/hpcnb-gpu[0-1]'
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
  grep -qxF -- "$HOSTS_LINE" /etc/hosts && return 0
  tmp=$(mktemp)
  { hosts_without_mark; echo "$HOSTS_LINE"; } > "$tmp"
  cat "$tmp" > /etc/hosts
  rm -f "$tmp"
  log "added to /etc/hosts: $HOSTS_LINE"
}
remove_hosts_line() {
  local tmp
  grep -qF -- "$HOSTS_MARK" /etc/hosts || return 0
  tmp=$(mktemp)
  hosts_without_mark > "$tmp"
  cat "$tmp" > /etc/hosts
  rm -f "$tmp"
  log "removed the $HOSTS_MARK line from /etc/hosts"
}

# record_pid NAME PIDFILE: remember a daemon we started that writes its pid elsewhere
record_pid() {
  local i
  for i in $(seq 1 50); do [ -s "$2" ] && break; sleep 0.1; done
  [ -s "$2" ] || die_logs "$1 started but wrote no pid file $2"
  cat "$2" > "$STATE_DIR/$1.pid"
}

start_munged() {
  if alive "$STATE_DIR/munged.pid" munged && munge_ok; then log "munged: already running"; return; fi
  if munge_ok; then log "munged: running, not started by this script (left alone)"; return; fi
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    mungekey --create --force >/dev/null 2>&1 ||
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  install -d -o munge -g munge -m 755 /run/munge
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged 2>/dev/null ||
    runuser -u munge -- /usr/sbin/munged --force ||
    die_logs "munged did not start"
  record_pid munged /run/munge/munged.pid
  wait_for munged munge_ok
}

start_mariadb() {
  if alive "$STATE_DIR/mariadbd.pid" mariadbd && mariadb_ok; then
    log "mariadbd: already running"
  elif mariadb_ok; then
    log "mariadbd: running, not started by this script (left alone)"
  else
    install -d -o mysql -g mysql -m 755 /run/mysqld
    if [ ! -d /var/lib/mysql/mysql ]; then
      log "initialising the MariaDB data directory"
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql \
        --auth-root-authentication-method=socket > "$LOG_DIR/mariadb-install-db.log" 2>&1 ||
        die_logs "mariadb-install-db failed"
    fi
    rm -f /run/mysqld/mysqld.pid
    log "starting mariadbd (socket only)"
    setsid mariadbd --user=mysql --skip-networking --skip-log-bin \
      --pid-file=/run/mysqld/mysqld.pid --innodb-buffer-pool-size=128M \
      --innodb-flush-log-at-trx-commit=0 --innodb-lock-wait-timeout=900 \
      < /dev/null >> "$LOG_DIR/mariadbd.log" 2>&1 &
    wait_for mariadbd mariadb_ok
    record_pid mariadbd /run/mysqld/mysqld.pid
  fi
  mariadb -e "CREATE DATABASE IF NOT EXISTS $DB_NAME;
    CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
    ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';" ||
    die_logs "could not create the accounting database/user"
}

start_slurmdbd() {
  local sum
  sum=$(conf_sum "$ETC/slurmdbd.conf")
  if alive "$STATE_DIR/slurmdbd.pid" slurmdbd; then
    if stale slurmdbd "$sum"; then
      log "slurmdbd.conf changed since slurmdbd started: restarting it"
      stop "$STATE_DIR/slurmdbd.pid" slurmdbd
    else
      log "slurmdbd: already running"
    fi
  fi
  if ! alive "$STATE_DIR/slurmdbd.pid" slurmdbd; then
    if dbd_ok; then die "a slurmdbd not started by this script answers on port 6819; stop it first"; fi
    log "starting slurmdbd"
    slurmdbd || die_logs "slurmdbd did not start"
    echo "$sum" > "$STATE_DIR/slurmdbd.sum"
  fi
  wait_for "slurmdbd to answer sacctmgr" dbd_ok
  if ! sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER"; then
    log "registering cluster $CLUSTER in accounting"
    sacctmgr -i add cluster "$CLUSTER" >/dev/null || die_logs "sacctmgr add cluster $CLUSTER failed"
  fi
}

start_slurm() {
  local n sum
  sum=$(conf_sum "$ETC/slurm.conf" "$ETC/gres.conf")
  if stale slurm "$sum"; then
    for n in $(printf '%s\n' "${NODES[@]}" | tac); do
      alive "$STATE_DIR/slurmd-$n.pid" slurmd || continue
      log "slurm.conf/gres.conf changed since start: restarting slurmd $n"
      stop "$STATE_DIR/slurmd-$n.pid" slurmd
    done
    if alive "$STATE_DIR/slurmctld.pid" slurmctld; then
      log "slurm.conf/gres.conf changed since start: restarting slurmctld"
      stop "$STATE_DIR/slurmctld.pid" slurmctld
    fi
  fi
  if alive "$STATE_DIR/slurmctld.pid" slurmctld; then
    log "slurmctld: already running"
  else
    if ctld_ok; then die "a slurmctld not started by this script answers on port 6817; stop it first"; fi
    log "starting slurmctld"
    # -i: tolerate unreadable or stale state files from an earlier run
    slurmctld -i || die_logs "slurmctld did not start"
  fi
  wait_for slurmctld ctld_ok
  for n in "${NODES[@]}"; do
    if alive "$STATE_DIR/slurmd-$n.pid" slurmd; then
      log "slurmd $n: already running"
      continue
    fi
    log "starting slurmd $n"
    mkdir -p "$SPOOL_DIR/slurmd/$n"
    slurmd -N "$n" || die_logs "slurmd -N $n did not start"
  done
  echo "$sum" > "$STATE_DIR/slurm.sum"
}

cmd_up() {
  local t0
  t0=$(now)
  need_root up
  [ -d "$TEMPLATES" ] || die "config templates not found in $TEMPLATES"
  install -d -m 755 "$STATE_DIR" "$LOG_DIR"
  install_packages
  getent passwd "$SLURM_USER" >/dev/null || die "user $SLURM_USER missing (should come with the slurm packages)"
  chown "$SLURM_USER:$SLURM_USER" "$LOG_DIR"
  install -d -m 755 -o "$SLURM_USER" -g "$SLURM_USER" "$SPOOL_DIR" "$SPOOL_DIR/slurmctld"
  install -d -m 755 "$ETC" "$SPOOL_DIR/slurmd"

  make_gpu_devices
  render slurm.conf "$ETC/slurm.conf" 644 root
  render gres.conf "$ETC/gres.conf" 644 root
  render slurmdbd.conf "$ETC/slurmdbd.conf" 600 "$SLURM_USER"
  if [ -e "$ETC/cgroup.conf" ]; then log "note: $ETC/cgroup.conf exists but is unused (TaskPlugin=task/none)"; fi
  add_hosts_line

  start_munged
  start_mariadb
  start_slurmdbd
  start_slurm

  wait_nodes
  wait_for "sacct (slurmctld registered with slurmdbd)" accounting_ready
  sinfo
  log "cluster '$CLUSTER' ready in $(since "$t0") s"
}

cmd_down() {
  local t0 n jobs
  t0=$(now)
  need_root down
  if alive "$STATE_DIR/slurmctld.pid" slurmctld && ctld_ok; then
    jobs=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
      log "cancelling jobs: $jobs"
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 1 100); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.1; done
    fi
  fi
  for n in $(printf '%s\n' "${NODES[@]}" | tac); do stop "$STATE_DIR/slurmd-$n.pid" slurmd; done
  stop "$STATE_DIR/slurmctld.pid" slurmctld
  stop "$STATE_DIR/slurmdbd.pid" slurmdbd
  stop "$STATE_DIR/mariadbd.pid" mariadbd
  stop "$STATE_DIR/munged.pid" munged
  remove_hosts_line
  for n in "${GPU_DEVS[@]}"; do if [ -c "$n" ]; then rm -f "$n"; fi; done
  rm -f "$STATE_DIR"/*.sum
  rmdir "$STATE_DIR" 2>/dev/null || true
  log "down in $(since "$t0") s (packages, config, state and logs kept)"
}

cmd_status() {
  local all=0 d f name line
  for d in munged mariadbd slurmdbd slurmctld "${NODES[@]}"; do
    case $d in
      node*) f=$STATE_DIR/slurmd-$d.pid; name=slurmd; line="slurmd $d" ;;
      *) f=$STATE_DIR/$d.pid; name=$d; line=$d ;;
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
  if command -v sinfo >/dev/null && ctld_ok; then
    echo
    sinfo
  else
    echo
    echo "slurmctld does not answer: no sinfo"
    all=3
  fi
  return $all
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) trap - ERR; cmd_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
