#!/usr/bin/env bash
# Runs one command in a throwaway QEMU guest that has two soft-RoCE devices (rdma_rxe: "rxe0" on
# dummy0 192.0.2.1 and "rxe1" on dummy1 198.51.100.1, RoCE MTU 4096: a PBox's two NICs), so the
# verbs code runs on real verbs on a box without RDMA.
# The guest runs Debian's kernel (guest_image.sh) and chroots into this host's root, read-only,
# so host-built binaries and libraries run unchanged; the current directory is the job's
# working directory, and the job directory (under it) is the only thing the guest writes.
#
#   tests/verbs/run_in_guest.sh [--timeout SECONDS] -- COMMAND [ARGS...]
#
# Exit: the command's status; 77 when a guest cannot be had here (not root for the first image
# build, no apt); 124 on timeout; 125 when the guest fails before the command ran. Binaries must
# be built without -march=native (PHUB_NATIVE=OFF): the emulated CPU has AVX2, not AVX-512.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
timeout_s=600
while [[ $# -gt 0 ]]; do
  case $1 in
    --timeout) timeout_s=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -gt 0 ]] || { echo "run_in_guest: give a command: run_in_guest.sh -- COMMAND" >&2; exit 2; }

rc=0
cache=$("$HERE/guest_image.sh") || rc=$?
[[ $rc == 0 ]] || exit "$rc"

job=$(mktemp -d "$PWD/.phub-guest.XXXXXX")  # the guest's only writable share
qemu_pid=""
cleanup() { [[ -n $qemu_pid ]] && kill "$qemu_pid" 2>/dev/null; rm -rf "$job"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# What bash runs in the guest, inside the host's root: bring up rxe0, then the command.
{
  echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  echo 'fail() { echo "run_in_guest: guest: $*" >&2; exit 125; }'
  echo 'ip link set lo up && ip link set dummy0 mtu 9000 up && ip addr add 192.0.2.1/24 dev dummy0 || fail "dummy0 setup"'
  echo 'ip link add dummy1 type dummy && ip link set dummy1 mtu 9000 up && ip addr add 198.51.100.1/24 dev dummy1 || fail "dummy1 setup"'
  echo 'rdma link add rxe0 type rxe netdev dummy0 || fail "rdma link add rxe0"'
  echo 'rdma link add rxe1 type rxe netdev dummy1 || fail "rdma link add rxe1"'
  # Builtins only while waiting: each process start costs ~0.1 s under emulation.
  echo 'for dev in rxe0 rxe1; do port=/sys/class/infiniband/$dev/ports/1'
  echo '  for i in {1..500}; do read -r state < $port/state; read -r gid1 < $port/gids/1'
  echo '    [[ $state == *ACTIVE* && $gid1 != 0000:0000:0000:0000:0000:0000:0000:0000 ]] && break'
  echo '    read -rt 0.02 <> <(:) || :; done'
  echo '  [[ $state == *ACTIVE* ]] || fail "$dev port is $state, not ACTIVE"'
  echo 'done'
  echo 'ulimit -l unlimited'
  echo 'mkdir -p /run/tmp'
  printf 'export PHUB_GUEST=1 PHUB_GUEST_IP=192.0.2.1 PHUB_GUEST_IP2=198.51.100.1 HOME=/run/tmp TMPDIR=/run/tmp'
  for name in GTEST_FILTER GTEST_COLOR SPDLOG_LEVEL ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS \
              OMP_NUM_THREADS; do
    [[ -n ${!name:-} ]] && printf ' %s=%q' "$name" "${!name}"
  done
  echo
  printf 'cd %q || exit 125\n' "$PWD"
  printf 'exec'; printf ' %q' "$@"; echo
} > "$job/job.sh"
: > "$job/output"

accel=(-accel "tcg,thread=multi" -cpu max)  # /dev/kvm here is a nested PVM that cannot boot it
if [[ -d /sys/module/kvm_intel || -d /sys/module/kvm_amd ]] && [[ -w /dev/kvm ]]; then
  accel=(-accel kvm -cpu host)
fi
timeout "$timeout_s" qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
  -M q35 "${accel[@]}" -smp 2 -m 2G -nic none \
  -kernel "$cache/vmlinux" -initrd "$cache/initrd" \
  -append "console=ttyS0 quiet panic=-1 mitigations=off tsc=reliable phub.job=$job" \
  -serial "file:$job/console.log" \
  -fsdev "local,id=host,path=/,security_model=none,readonly=on,multidevs=remap" \
  -device virtio-9p-pci,fsdev=host,mount_tag=host \
  -fsdev "local,id=work,path=$job,security_model=none,multidevs=remap" \
  -device virtio-9p-pci,fsdev=work,mount_tag=work < /dev/null &
qemu_pid=$!
tail -n +1 -f --pid="$qemu_pid" "$job/output" &  # the command's output, as it comes
tail_pid=$!
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=""
wait "$tail_pid" 2>/dev/null || true
if [[ ! -s $job/status ]]; then
  if [[ $qemu_rc == 124 ]]; then echo "run_in_guest: timed out after ${timeout_s} s" >&2; exit 124; fi
  echo "run_in_guest: the guest stopped before the command finished (qemu exit $qemu_rc); its console:" >&2
  tail -n 30 "$job/console.log" >&2 || true
  exit 125
fi
exit "$(tr -dc 0-9 < "$job/status")"
