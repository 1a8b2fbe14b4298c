#!/usr/bin/env bash
# ctest's VerbsTestsInSoftRoceGuest: builds the verbs tests for the guest's CPU (no
# -march=native: the emulated CPU has no AVX-512) into BUILD_DIR, then runs them in the
# soft-RoCE guest (run_in_guest.sh): verbs_test (devices, queue pairs, VerbsConnection, the
# Connection conformance suite on TCP and verbs) and the integration tests' verbs cases (phubd
# and real worker processes on verbs: N workers against float64, the colocated PS, ring
# allreduce on verbs, a dying worker) and the recovery tests' verbs case (workers rejoining and
# phubd resuming from a checkpoint, bitwise against an uninterrupted run). Exit 77 (ctest:
# skipped) where no guest can be had.
#
#   tests/verbs/run_verbs_tests.sh BUILD_DIR [--prebuilt]
#
# --prebuilt: BUILD_DIR is a portable (PHUB_NATIVE=OFF) build whose tests are built already —
# the sanitizer builds of deploy/test.sh — so its own ASan/TSan binaries run in the guest.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
build=$(realpath -m "${1:?give the build directory for the guest binaries}")
shift
prebuilt=false
[[ ${1:-} == --prebuilt ]] && prebuilt=true
rc=0
"$HERE/guest_image.sh" >/dev/null || rc=$?
[[ $rc == 0 ]] || exit "$rc"
if ! $prebuilt; then
  cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPHUB_NATIVE=OFF \
    -DPHUB_WITH_CUDA=OFF -DPHUB_BUILD_BENCH=OFF >/dev/null
  ninja -C "$build" -j "${PHUB_JOBS:-2}" verbs_test integration_test recovery_test | tail -n 1
fi
cd "$build"
exec "$HERE/run_in_guest.sh" --timeout 900 -- bash -c "
  '$build/tests/phub/transport/verbs_test' &&
  '$build/tests/integration/integration_test' --gtest_filter='*verbs*' &&
  '$build/tests/integration/recovery_test' --gtest_filter='*verbs*'"
