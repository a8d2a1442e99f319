#!/usr/bin/env bash
# Build the course's Charliecloud image: a directory image with Debian 12, python3 and the CPU
# build of torch, without any container registry.
#
#   usage: ci/build-container.sh [--path]
#
#   --path   print where the image is (or would be) and exit: 0 if it is built, 1 if not
#
# The image is the root of `debootstrap --variant=minbase bookworm` (from the Debian mirror,
# HPCNB_DEBIAN_MIRROR) with python3, python3-pip and python3-venv, plus torch==2.13.0 (CPU) and
# numpy installed by pip from this machine's own wheels only (/opt/wheels, /opt/pypi/files,
# /opt/pypi-more/files, bound read-only into the build; pip runs with --no-index, so nothing is
# downloaded but Debian's packages).  It lands in
#
#   ${HPCNB_CONTAINER_CACHE:-/var/cache/hpcnb/containers}/torch-cpu-<key>
#
# (<key> is a hash of the recipe below), with the link torch-cpu -> torch-cpu-<key> beside it.
# It is built in a temporary folder and renamed into place, so a half-built image is never
# seen; a second run finds it and returns at once (0.1 s).  Run it as root (debootstrap and
# chroot); the image is world-readable, so `ch-run` works for every user.  A cold build takes
# about a minute on 2 cores (debootstrap 30-40 s, pip 16 s) and makes a 1.2 GB image.
#
# The image is read-only under ch-run, and ch-run (0.31) binds only onto folders that exist in
# it: /scratch and /localscratch are made for that, e.g.
#
#   srun ch-run -b "$PWD:/scratch" -b "$SLURM_TMPDIR:/localscratch" -c /scratch IMAGE -- python3 x.py
#
# (ch-run needs $USER set; without -c it starts in /.)
set -euo pipefail

NAME=torch-cpu
SUITE=bookworm
MIRROR=${HPCNB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=(python3 python3-pip python3-venv ca-certificates)
PIP_REQUIREMENTS=(torch==2.13.0 numpy==2.4.6)
WHEEL_DIRS=(/opt/wheels /opt/pypi/files /opt/pypi-more/files)
RECIPE=2  # bump when the steps below change in a way the variables above do not show
CACHE=${HPCNB_CONTAINER_CACHE:-/var/cache/hpcnb/containers}
CACHE=${CACHE%/}
LOCK_TIMEOUT_S=1800

die() { echo "build-container: error: $*" >&2; exit 1; }
log() { echo "build-container: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

recipe_key() {
  echo "name=$NAME suite=$SUITE mirror=$MIRROR packages=${PACKAGES[*]}" \
    "pip=${PIP_REQUIREMENTS[*]} recipe=$RECIPE" | sha256sum | cut -c1-16
}

KEY=$(recipe_key)
IMAGE=$CACHE/$NAME-$KEY
is_built() { [ "$(cat "$IMAGE/.hpcnb-image-key" 2>/dev/null)" = "$KEY" ]; }

case ${1:-} in
  --path) echo "$IMAGE"; is_built; exit ;;
  '') ;;
  *) die "unknown argument '$1' (usage: $0 [--path])" ;;
esac

T0=$(now)
if is_built; then
  log "cached: $IMAGE ($(du -sh "$IMAGE" 2>/dev/null | cut -f1)), nothing to build ($(since "$T0") s)"
  echo "$IMAGE"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot); the image $IMAGE is not built"
for cmd in debootstrap chroot unshare flock; do
  command -v "$cmd" >/dev/null || die "$cmd not found (ci/install-system-deps.sh installs debootstrap)"
done
have_wheels=()
for d in "${WHEEL_DIRS[@]}"; do [ -d "$d" ] && have_wheels+=("$d"); done
[ ${#have_wheels[@]} -gt 0 ] || die "none of ${WHEEL_DIRS[*]} exists: no local wheels for torch"

install -d -m 755 "$CACHE"
exec 9>"$CACHE/.$NAME.lock"
flock -w "$LOCK_TIMEOUT_S" 9 || die "another build holds $CACHE/.$NAME.lock for over $LOCK_TIMEOUT_S s"
if is_built; then  # built by the run we waited for
  log "built meanwhile by another run: $IMAGE"
  echo "$IMAGE"
  exit 0
fi

TMP=$CACHE/.$NAME-$KEY.building
BUILD_LOG=$CACHE/$NAME-$KEY.build.log
rm -rf --one-file-system "$TMP"
trap 'rm -rf --one-file-system "$TMP"' EXIT
: > "$BUILD_LOG"
log "building $IMAGE (log: $BUILD_LOG)"

t=$(now)
install -d "$CACHE/debs"
if ! debootstrap --variant=minbase --cache-dir="$CACHE/debs" \
    --include="$(IFS=,; echo "${PACKAGES[*]}")" "$SUITE" "$TMP" "$MIRROR" >> "$BUILD_LOG" 2>&1; then
  tail -n 20 "$BUILD_LOG" >&2
  die "debootstrap failed (full log: $BUILD_LOG)"
fi
log "debootstrap $SUITE: $(since "$t") s"

# pip inside the root, in a private mount namespace (its read-only binds vanish with it)
t=$(now)
binds='' links=()
for d in "${have_wheels[@]}"; do
  binds+="mkdir -p '$TMP$d' && mount --bind '$d' '$TMP$d' && mount -o remount,bind,ro '$TMP$d' && "
  links+=(--find-links "$d")
done
if ! unshare --mount --propagation private sh -euc "$binds mount -t proc proc '$TMP/proc' &&
    exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root PIP_CONFIG_FILE=/dev/null \
    '$(command -v chroot)' '$TMP' python3 -m pip install --break-system-packages --no-cache-dir --no-index \
    --disable-pip-version-check --root-user-action=ignore ${links[*]} ${PIP_REQUIREMENTS[*]}" \
    >> "$BUILD_LOG" 2>&1; then
  tail -n 20 "$BUILD_LOG" >&2
  die "pip install ${PIP_REQUIREMENTS[*]} in the image failed (full log: $BUILD_LOG)"
fi
log "pip install ${PIP_REQUIREMENTS[*]}: $(since "$t") s"

# smaller: no package lists, caches, docs, man pages or logs
chroot "$TMP" apt-get clean
rm -rf "$TMP"/var/lib/apt/lists/* "$TMP"/var/cache/apt/*.bin "$TMP"/var/cache/debconf/*-old \
  "$TMP"/usr/share/doc/* "$TMP"/usr/share/man/* "$TMP"/usr/share/info/* "$TMP"/var/log/* \
  "$TMP"/root/.cache
# what ch-run binds over must exist in the (read-only) image: `ch-run -b SRC:/scratch` for a shared
# folder, `-b "$SLURM_TMPDIR:/localscratch"` for the node's own disk
install -d -m 755 "$TMP/scratch" "$TMP/localscratch"
touch "$TMP/etc/hosts" "$TMP/etc/resolv.conf"
chroot "$TMP" python3 -c 'import torch, numpy; print(torch.__version__, numpy.__version__)' \
  > "$TMP/.hpcnb-image-versions"
echo "$KEY" > "$TMP/.hpcnb-image-key"
chmod 755 "$TMP"

mv -T "$TMP" "$IMAGE"
trap - EXIT
ln -sfn "$NAME-$KEY" "$CACHE/.$NAME.link" && mv -T "$CACHE/.$NAME.link" "$CACHE/$NAME"
for old in "$CACHE/$NAME"-*; do  # images of older recipes, and their build logs
  case $old in "$IMAGE" | "$BUILD_LOG") continue ;; esac
  if [ -d "$old" ]; then log "removing the older image $old"; fi
  rm -rf --one-file-system "$old"
done
log "built $IMAGE in $(since "$T0") s ($(du -sh "$IMAGE" | cut -f1); torch, numpy: $(cat "$IMAGE/.hpcnb-image-versions"))"
echo "$IMAGE"
