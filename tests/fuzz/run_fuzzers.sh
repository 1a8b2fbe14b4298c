#!/usr/bin/env bash
# Builds the libFuzzer targets (PHUB_FUZZ=ON: clang++, ASan+UBSan, build-fuzz/) and runs each on
# a copy of its seed corpus (tests/fuzz/corpus/<target>/) for a while; fails on any crash, leak,
# timeout or out-of-memory, pointing at the reproducer. CI runs it (.ci/run); tests/fuzz/README.md
# says how to reproduce and minimise what it finds.
#
# Usage: tests/fuzz/run_fuzzers.sh [seconds per target, default 60] [target ...]
# Environment: PHUB_FUZZ_BUILD_DIR (build-fuzz), PHUB_FUZZ_BUILD_JOBS (2), PHUB_FUZZ_JOBS
#              (targets fuzzed at once, default the CPUs),
#              PHUB_FUZZ_FLAGS (extra libFuzzer flags, e.g. "-max_len=16384"; with -jobs the
#              statistics are in fuzz-N.log, not in the table).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then targets=(wire_header_fuzzer control_frame_fuzzer shard_fuzzer checkpoint_fuzzer metrics_text_fuzzer
  rendezvous_frame_fuzzer topology_fuzzer shm_stream_fuzzer); fi
build=${PHUB_FUZZ_BUILD_DIR:-build-fuzz}

bash deploy/install-deps.sh --fuzz
# Only the libraries the targets link; no worker/, tests or CUDA. -O1 -g without NDEBUG: quick
# to build, fast enough to fuzz, assertions on, readable stacks.
cmake -S . -B "$build" -G Ninja -DPHUB_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14 \
  -DPHUB_WITH_CUDA=OFF -DPHUB_BUILD_TESTS=OFF -DPHUB_BUILD_BENCH=OFF -DPHUB_NATIVE=OFF \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" >/dev/null
cmake --build "$build" --target "${targets[@]}" -j "${PHUB_FUZZ_BUILD_JOBS:-2}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-14/bin/llvm-symbolizer}

run_dir="$build/fuzz-run"
# One target on its seed corpus copy; its rc goes to $dir/rc. Targets run side by side, up to
# PHUB_FUZZ_JOBS at once (default: the CPUs): each still fuzzes for its whole `seconds` on one
# core, so the depth is the same and the wall time a fraction.
fuzz_one() {
  local target=$1 dir="$run_dir/$1" rc=0
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  # A copy: what the run adds to the corpus stays out of the checkout.
  cp tests/fuzz/corpus/"$target"/* "$dir/corpus/"
  # shellcheck disable=SC2086  # PHUB_FUZZ_FLAGS is a list of flags
  "$build/tests/fuzz/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -detect_leaks=1 -timeout=10 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
    ${PHUB_FUZZ_FLAGS:-} "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}
jobs_at_once=${PHUB_FUZZ_JOBS:-$(nproc)}
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs_at_once)); do wait -n || true; done
  fuzz_one "$target" &
done
wait

failed=()
printf '%-22s %8s %12s %10s %8s %8s  %s\n' target seconds executions exec/s cov ft result
for target in "${targets[@]}"; do
  dir="$run_dir/$target"
  log="$dir/log"
  rc=$(cat "$dir/rc" 2>/dev/null || echo "?")
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  per_second=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  result=ok
  artifacts=$(ls "$dir/artifacts" 2>/dev/null || true)
  if [[ "$rc" != 0 ]] || [[ -n "$artifacts" ]]; then
    result="FAILED (exit $rc)"
    failed+=("$target")
  fi
  printf '%-22s %8s %12s %10s %8s %8s  %s\n' "$target" "$seconds" "${executions:-?}" \
    "${per_second:-?}" "${cov:-?}" "${ft:-?}" "$result"
  if [[ "$result" != ok ]]; then
    echo "---- $target: last lines of $log ----"
    tail -n 60 "$log"
    for a in $artifacts; do
      echo "reproduce: $build/tests/fuzz/$target $dir/artifacts/$a"
    done
    echo "----"
  fi
done

if ((${#failed[@]} > 0)); then
  echo "run_fuzzers: ${failed[*]} failed (reproducers above; tests/fuzz/README.md)" >&2
  exit 1
fi
echo "run_fuzzers: all ${#targets[@]} targets ran ${seconds} s each without a crash, leak or timeout"
