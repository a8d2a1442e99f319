# ci/course-install.sh - sourced (as root) by ci/real-course.sh and ci/portal.sh: the course
# installed where an unprivileged user can run it, as on a cluster. The image's Python lives in
# root's home, which other users cannot read, so the venv is made from Debian's /usr/bin/python3.
#
#   course_user NAME              make the Unix user NAME (once, with a home)
#   as_user NAME [VAR=VAL...] CMD CMD as NAME in a clean environment (HOME, USER, a plain PATH,
#                                 this machine's PIP_* settings, umask 022) plus VAR=VAL
#   course_copy DEST OWNER        the working tree (tracked and untracked-but-not-ignored files) -> DEST
#   course_setup DEST OWNER       `make setup` in DEST as OWNER with /usr/bin/python3 (log: DEST/setup.log)

COURSE_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COURSE_WHEELS=/var/cache/hpcnb/wheels  # readable by an unprivileged owner: the Horovod build is not redone

course_log() { echo "[$(basename "$0" .sh) $(date +%T)] $*" >&2; }

course_user() {
    id "$1" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$1"
}

as_user() {
    local name=$1 home pip_settings=() var
    shift
    home=$(getent passwd "$name" | cut -d: -f6)
    for var in $(compgen -e | grep '^PIP_' || true); do pip_settings+=("$var=${!var}"); done
    # shellcheck disable=SC2016
    runuser -u "$name" -- env -i HOME="$home" USER="$name" LOGNAME="$name" PATH=/usr/local/bin:/usr/bin:/bin \
        LANG=C.UTF-8 "${pip_settings[@]}" bash -c 'umask 022; exec env "$@"' as_user "$@"
}

course_copy() {
    local dest=$1 owner=$2
    mkdir -p "$dest"
    (cd "$COURSE_SRC" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) |
        tar -xf - -C "$dest"
    rm -rf "$dest/notebooks/work" "$dest/solutions/work" "$dest/exercises/work"
    chown -R "$owner": "$dest"
}

course_setup() {
    local dest=$1 owner=$2 cache=()
    if [[ $owner != root ]]; then  # root uses its own cache; the wheel root built is shared, read-only
        mkdir -p "$COURSE_WHEELS"
        [[ -d $HOME/.cache/hpcnb/wheels ]] && cp -a "$HOME/.cache/hpcnb/wheels/." "$COURSE_WHEELS/"
        chown -R "$owner" "$COURSE_WHEELS"
        cache=(HPCNB_WHEEL_CACHE="$COURSE_WHEELS")
    fi
    course_log "make setup in $dest as $owner (Debian's python3)"
    local start=$SECONDS
    as_user "$owner" "${cache[@]}" make -C "$dest" --no-print-directory setup PYTHON=/usr/bin/python3 \
        >"$dest/setup.log" 2>&1 || { tail -n 30 "$dest/setup.log" >&2; course_log "setup failed"; return 1; }
    course_log "setup: $((SECONDS - start)) s"
}
