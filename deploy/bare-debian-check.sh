#!/usr/bin/env bash
# Runs the README's demo command on a bare Debian 12, for real, so that a package missing from
# deploy/install-deps.sh fails CI instead of a user's first try (CI's own machine has every
# package already and cannot notice). Steps, each timed:
#   1. base   a minbase Debian 12 (bookworm) root from Debian's packages with mmdebstrap, from the
#             same apt sources as this machine; cached as a tarball per ISO week and options.
#   2. root   unpacks it into a temp dir (a tmpfs where memory allows); clones this checkout's HEAD
#             into it at /phub; mounts /proc, /sys (read-only), /dev, a tmpfs /tmp, the caches.
#   3. deps   inside chroot: bash deploy/install-deps.sh       (the README's set-up)
#   4. build  inside chroot: bash deploy/build.sh
#   5. demo   inside chroot: bash deploy/local/demo.sh --no-rack --epochs 1 --steps N
#             --min-accuracy P (the README's command, on loopback only and shortened to N
#             mini-batches per worker; it runs install-deps and build again, finding both done; it
#             fails if a process fails, the workers' or PS and ring's accuracies disagree, or the
#             accuracy is under P). --no-rack: a chroot shares this host's network, but not its
#             /run/netns, so the demo could not see a rack this host is running, and its rack.sh
#             up would start by deleting that rack's phub-* links; the rack also adds minutes.
#   6. tests  with --tests only: inside chroot, bash deploy/test.sh (the README's other command;
#             every ctest test; too long for every CI run, run by hand before a release)
# Only committed work is tested: the root gets `git clone` of HEAD, uncommitted changes are not
# in it (the check says so when there are some).
#
# Usage (root; host tools: bash deploy/install-deps.sh --bare-check):
#   deploy/bare-debian-check.sh [--steps 300] [--min-accuracy 70] [--cache-dir /var/cache/phub-bare]
#                               [--ccache-dir ~/.cache/phub-ccache] [--tests]
#
# Caches, so CI's later runs neither re-download nor recompile: the base tarball and apt's .deb
# archive under --cache-dir; ccache's dir (default the one CMakeLists.txt's launcher uses here,
# which CI's `deploy/test.sh` has just filled) is bind-mounted at the chroot's ~/.cache/phub-ccache.
# Nothing else of the host is written: mounts are private, /sys is read-only, and on any exit
# (failure, Ctrl-C) every mount is undone in reverse order and the temp root is removed; if a
# mount cannot be undone the root is left in place and the check fails saying so.
# Not covered: other Debian releases or Ubuntu, a non-root user with sudo, the test command
# unless --tests, and hardware (RDMA NICs, GPUs). docs/operations.md "Bare-machine check".
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
STEPS=300
# 300 steps x 2 workers x 32 images (19,200 images, a third of an epoch) reach 80.5 % here;
# chance is 10 %, and a PS or ring that drops or garbles updates stays near it, so 70 % fails
# only a demo that does not learn while leaving room for other CPUs' rounding.
MIN_ACCURACY=70
RUN_TESTS=0
CACHE_DIR=/var/cache/phub-bare
CCACHE_HOST=${CCACHE_DIR:-$HOME/.cache/phub-ccache}
SUITE=bookworm
# minbase: Essential + priority required + apt, what the debian:12 container image holds: the
# barest Debian 12 a user starts from. Nothing is added to it (mmdebstrap --include): the clone
# is made from the host, so the root needs neither git nor ca-certificates. What any installed
# or containerised Debian has beyond the packages, /etc/hosts and resolv.conf, is written below.
VARIANT=minbase
INCLUDE=""

usage() { sed -n '2,34p' "$0"; }
while (($#)); do
  case "$1" in
    --steps) STEPS=${2:?--steps needs a number}; shift 2 ;;
    --min-accuracy) MIN_ACCURACY=${2:?--min-accuracy needs a percentage}; shift 2 ;;
    --cache-dir) CACHE_DIR=${2:?--cache-dir needs a directory}; shift 2 ;;
    --ccache-dir) CCACHE_HOST=${2:?--ccache-dir needs a directory}; shift 2 ;;
    --tests) RUN_TESTS=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bare-debian-check: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done

T0=$(date +%s)
STEP_NAMES=() STEP_SECONDS=()
log() { echo "[$(date +%H:%M:%S) +$(($(date +%s) - T0))s] bare-debian-check: $*"; }
die() { log "FAILED: $*" >&2; exit 1; }

if [[ $(id -u) -ne 0 ]]; then
  echo "bare-debian-check: needs root (chroot, mount): run it with sudo" >&2
  exit 2
fi
for tool in mmdebstrap findmnt chroot git flock; do
  command -v "$tool" >/dev/null ||
    die "'$tool' is not installed on this host: run 'bash deploy/install-deps.sh --bare-check'"
done

# --- the base root, cached --------------------------------------------------------------------
# Debian's own entries only (deb822 debian.sources, or the classic sources.list): a third-party
# repository would make the root not a bare Debian, and its key is not in the root anyway.
SOURCES=""
if [[ -s /etc/apt/sources.list.d/debian.sources ]]; then
  SOURCES=/etc/apt/sources.list.d/debian.sources
elif grep -qs '^deb ' /etc/apt/sources.list; then
  SOURCES=/etc/apt/sources.list
fi
[[ -n "$SOURCES" ]] ||
  die "no Debian apt sources on this host (/etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list): the root is built from the same mirror as this host"

mkdir -p "$CACHE_DIR/apt-archives" "$CCACHE_HOST"
# One check at a time per cache: two apt runs in one shared archive dir would fight over its lock.
exec 9>"$CACHE_DIR/lock"
if ! flock -n 9; then
  log "another bare check holds $CACHE_DIR/lock; waiting (at most 30 minutes)"
  flock -w 1800 9 || die "$CACHE_DIR/lock still held after 30 minutes: is a check stuck? (fuser $CACHE_DIR/lock)"
fi

MMDEBSTRAP_ARGS=(--variant="$VARIANT" ${INCLUDE:+--include="$INCLUDE"} "$SUITE")
# The key changes when the options, the sources or mmdebstrap change, and every ISO week, so the
# base is never more than a week behind Debian's point updates (the rest comes from apt anyway).
KEY=$( { echo "${MMDEBSTRAP_ARGS[*]}"; cat "$SOURCES"; mmdebstrap --version; } | sha256sum | cut -c1-12)
BASE="$CACHE_DIR/base-$SUITE-$VARIANT-$(date +%G-W%V)-$KEY.tar.gz"

step_begin() { STEP=$1; STEP_T=$(date +%s); log "step '$STEP': $2"; }
step_end() {
  STEP_NAMES+=("$STEP") STEP_SECONDS+=($(($(date +%s) - STEP_T)))
  log "step '$STEP' done in ${STEP_SECONDS[-1]} s"
  STEP=""
}

STEP=""
ROOT=""
MOUNTS=()  # in mount order; cleanup undoes them in reverse

# Processes whose root is our chroot (a demo left behind by Ctrl-C, a hung worker): they keep
# mounts busy. Only those are ended: the check started them all.
chroot_pids() {
  local pid
  for pid in /proc/[0-9]*; do
    [[ "$(readlink "$pid/root" 2>/dev/null)" == "$ROOT" ]] && echo "${pid#/proc/}"
  done
  return 0
}
end_chroot_processes() {
  local pids i
  pids=$(chroot_pids)
  [[ -z "$pids" ]] && return 0
  log "stopping what still runs in the root: $(echo $pids)"
  kill -TERM $pids 2>/dev/null
  for ((i = 0; i < 10; i++)); do
    sleep 0.5
    pids=$(chroot_pids)
    [[ -z "$pids" ]] && return 0
  done
  kill -KILL $pids 2>/dev/null
  sleep 0.5
  return 0
}

mounted_under_root() { findmnt -rn -o TARGET | awk -v r="$ROOT" '$0 == r || index($0, r "/") == 1'; }

cleanup() {
  local code=$? i left
  trap '' INT TERM  # a second Ctrl-C must not stop the clean-up half-way
  set +e
  rm -f "$CACHE_DIR/.new-$$.tar.gz"  # a base tarball that mmdebstrap did not finish
  if [[ -n "$STEP" ]]; then
    log "FAILED at step '$STEP' (exit $code); its output is above" >&2
    ((code == 0)) && code=1
    STEP_NAMES+=("$STEP") STEP_SECONDS+=($(($(date +%s) - STEP_T)))
  fi
  if [[ -n "$ROOT" && -d "$ROOT" ]]; then
    end_chroot_processes
    log "unmounting ${#MOUNTS[@]} mounts, removing $ROOT"
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
      umount "${MOUNTS[i]}" 2>/dev/null || { sleep 1; umount "${MOUNTS[i]}"; } ||
        umount --lazy "${MOUNTS[i]}"
    done
    left=$(mounted_under_root)
    if [[ -n "$left" ]]; then
      # Never rm -rf through a mount: the ccache and apt binds are on the host's own filesystem.
      log "FAILED to unmount (left in place, remove by hand after umount): $left" >&2
      code=1
    else
      rm -rf --one-file-system "$ROOT"
    fi
  fi
  if ((${#STEP_NAMES[@]})); then
    log "step times:"
    for i in "${!STEP_NAMES[@]}"; do
      printf '  %-6s %5d s%s\n' "${STEP_NAMES[i]}" "${STEP_SECONDS[i]}" \
        "$([[ "${STEP_NAMES[i]}" == "$STEP" ]] && echo '  (failed)')"
    done
  fi
  log "$( ((code == 0)) && echo passed || echo failed ) in $(($(date +%s) - T0)) s"
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step_begin base "Debian 12 $VARIANT root from $SOURCES"
if [[ -s "$BASE" ]]; then
  log "cached: $BASE"
else
  log "building $BASE with mmdebstrap (a few minutes; cached for the week)"
  tmp="$CACHE_DIR/.new-$$.tar.gz"
  mmdebstrap --quiet "${MMDEBSTRAP_ARGS[@]}" "$tmp" "$SOURCES" ||
    { rm -f "$tmp"; die "mmdebstrap could not build the $SUITE root (its messages above): is the mirror in $SOURCES reachable?"; }
  mv "$tmp" "$BASE"
  find "$CACHE_DIR" -maxdepth 1 -name 'base-*.tar.gz' ! -path "$BASE" -delete  # last week's
fi
step_end

step_begin root "unpack, clone HEAD, mount"
# realpath: the clean-up finds the root's processes by comparing /proc/PID/root with it.
ROOT=$(realpath "$(mktemp -d "${TMPDIR:-/var/tmp}/phub-bare.XXXXXX")")
# The root (about 3 GiB once built) lives in memory where there is room: dpkg's syncs cost
# nothing there, and the clean-up is an unmount instead of a 2-minute rm -rf on this VM's disk.
if (($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) >= 12 * 1024 * 1024)); then
  mount -t tmpfs -o size=8g,mode=755 phub-bare "$ROOT" || die "mount tmpfs on $ROOT failed"
  MOUNTS+=("$ROOT")
  mount --make-private "$ROOT"
  log "root in memory (tmpfs, at most 8 GiB): $ROOT"
else
  log "root on disk (under 12 GiB of memory available): $ROOT"
fi
tar --numeric-owner -xzpf "$BASE" -C "$ROOT"
git clone --quiet --no-hardlinks "$REPO" "$ROOT/phub"
log "testing commit $(git -C "$ROOT/phub" log -1 --format='%h %s' | cut -c1-100)"
if [[ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ]]; then
  log "note: $REPO has uncommitted changes; they are NOT tested (the root has HEAD only)"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"  # this host's resolver, as of now
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$ROOT/etc/hosts"
# As in Debian's container images (debuerreotype's docker-apt-speedup): dpkg skips fsync, which
# on a throwaway root only costs time. It changes how files are written, not which.
echo force-unsafe-io >"$ROOT/etc/dpkg/dpkg.cfg.d/phub-bare-unsafe-io"

# mount_in TARGET MOUNT-ARGS...: mounts, records it for clean-up, and makes it private so that
# nothing mounted beneath it (the root's /dev/shm) can propagate back to the host.
mount_in() {
  local target="$ROOT$1"
  shift
  mkdir -p "$target"
  mount "$@" "$target" || die "mount $* $target failed"
  MOUNTS+=("$target")
  mount --make-private "$target"
}
mount_in /proc -t proc proc
mount_in /sys --bind -o ro /sys
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts  # apt and dpkg log through a pty
mount_in /dev/shm -t tmpfs -o mode=1777,nosuid,nodev shm  # the root's own, not the host's
mount_in /tmp -t tmpfs -o mode=1777,nosuid,nodev tmp
mount_in /var/cache/apt/archives --bind "$CACHE_DIR/apt-archives"
mount_in /root/.cache/phub-ccache --bind "$CCACHE_HOST"
step_end

# ccache hashes LANG: the root's must equal this host's for CI's build here to hit what
# deploy/test.sh has just compiled. The host's is passed on when it names a locale built into
# glibc (C.UTF-8 on CI), the only kind the bare root has; otherwise C.UTF-8.
ROOT_LANG=C.UTF-8
[[ "${LANG:-}" =~ ^(C|POSIX|C\.UTF-8|C\.utf8)$ ]] && ROOT_LANG=$LANG

# in_root STEP WHAT COMMAND: runs COMMAND as a bare root login would, in /phub: a clean
# environment (nothing of this host's or CI's but LANG), the default PATH, HOME=/root. In the
# background with `wait`, because bash runs a trap only once a foreground command ends: a CI
# timeout's SIGTERM must reach the clean-up now, not after a 20-minute build.
in_root() {
  step_begin "$1" "$2"
  chroot "$ROOT" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
    LANG="$ROOT_LANG" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /phub && $3" &
  wait $!
  step_end
}
in_root deps "bash deploy/install-deps.sh" "bash deploy/install-deps.sh"
# Ninja's progress: every 25th line (and every error in full) is enough for a log.
in_root build "bash deploy/build.sh (ccache: $CCACHE_HOST)" \
  "bash deploy/build.sh | awk '/^\[[0-9]+\/[0-9]+\]/ { if (++n % 25) next } { print; fflush() }'; exit \${PIPESTATUS[0]}"
DEMO="bash deploy/local/demo.sh --no-rack --epochs 1 --steps $STEPS"
DEMO+=" --min-accuracy $MIN_ACCURACY"
in_root demo "$DEMO" "$DEMO"
if ((RUN_TESTS)); then
  in_root tests "bash deploy/test.sh" "bash deploy/test.sh"
  log "the README's test command works on a bare Debian 12 too"
fi
log "the README's demo command works on a bare Debian 12 (commit $(git -C "$ROOT/phub" rev-parse --short HEAD))"
