#!/usr/bin/env bash
# The test command (README, .ci/run): installs what is missing, builds, runs every test with
# ctest. With --sanitize address|thread it does the same in build-asan/ or build-tsan/ with
# ASan+UBSan or TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=""
if [[ "${1:-}" == "--sanitize" ]]; then sanitize=${2:?"--sanitize needs address or thread"}; fi

# --test: python3-torch (tests/python checks phub.torch against DDP's own gloo allreduce), and
# Prometheus, Slurm and systemd-analyze, which the operations tests run against.
bash deploy/install-deps.sh --test
if [[ -z "$sanitize" ]]; then
  export PHUB_BUILD_DIR=${PHUB_BUILD_DIR:-build}
  bash deploy/build.sh
else
  case "$sanitize" in
    address) export PHUB_BUILD_DIR=build-asan ;;
    thread) export PHUB_BUILD_DIR=build-tsan ;;
    *) echo "test.sh: --sanitize takes 'address' or 'thread', not '$sanitize'" >&2; exit 2 ;;
  esac
  # Benchmarks are not run under sanitizers; -O1 keeps the instrumented build quick.
  # Portable (no -march=native) so the soft-RoCE guest can run these very binaries (tests/verbs).
  bash deploy/build.sh -DPHUB_SANITIZE="$sanitize" -DPHUB_BUILD_BENCH=OFF -DPHUB_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g"
  # protect_shadow_gap=0: the CUDA driver cannot initialise under ASan otherwise (GPU boxes).
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:protect_shadow_gap=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # Suppressions cover only races inside uninstrumented Debian libraries (reasons in the file).
  # allocator_may_return_null: a malloc TSan cannot serve (over its 1 TiB maximum) returns NULL as
  # glibc's would, so tests of what a failed allocation does see the real behaviour; `new` still
  # ends the process there.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$PWD/tests/sanitizers/tsan.supp"
  # libgomp (oneDNN's thread pool) is not TSan-instrumented: its barriers are invisible to TSan,
  # so every parallel region would read as a race. One OpenMP thread keeps TSan on our threads.
  [[ "$sanitize" == thread ]] && export OMP_NUM_THREADS=1
fi
ctest --test-dir "$PHUB_BUILD_DIR" --output-on-failure -j 2
