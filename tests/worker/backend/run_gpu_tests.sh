#!/usr/bin/env bash
# The cuDNN backend's tests on a GPU box that has our Debian packages (deploy/install-deps.sh);
# for the device tool's lent GPU machine, which has none, use bench/gpu/ (built here, carried
# there). Run from anywhere in the repository:
#   bash tests/worker/backend/run_gpu_tests.sh [gtest flags, e.g. --gtest_filter=*Lstm*]
# Configures a fresh build directory ($PHUB_GPU_BUILD_DIR, default build-gpu) with the CUDA parts
# required (PHUB_WITH_CUDA=ON; PHUB_WITH_CUDA=AUTO in the environment where NCCL is missing),
# portable flags and no benchmarks, builds cudnn_ops_test on every core and runs it. Fails if the
# tests skipped for want of a GPU: on this machine that would hide a broken setup.
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${PHUB_GPU_BUILD_DIR:-build-gpu}
nvidia-smi -L || echo "run_gpu_tests.sh: nvidia-smi failed (no driver?)" >&2
rm -rf "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPHUB_NATIVE=OFF \
  -DPHUB_BUILD_BENCH=OFF -DPHUB_WITH_CUDA="${PHUB_WITH_CUDA:-ON}"
ninja -C "$build" -j "$(nproc)" cudnn_ops_test
log="$build/cudnn_ops_test.log"
"$build/tests/worker/backend/cudnn_ops_test" "$@" 2>&1 | tee "$log"
if grep -q "no CUDA device" "$log"; then
  echo "run_gpu_tests.sh: the GPU tests skipped: no CUDA device visible" >&2
  exit 1
fi
