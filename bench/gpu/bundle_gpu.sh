#!/usr/bin/env bash
# Builds, here, what bench/gpu/run_gpu.sh runs on a lent GPU machine, and packs it with
# ../shared/tools/gpu-bundle into .gpu/ (ignored by git), to carry in one `device run`:
#   bash bench/gpu/bundle_gpu.sh            # build-gpu (portable Release, CUDA on) + .gpu/
#   run(command="bash .gpu/run.sh bash bench/gpu/run_gpu.sh tests train", carry=[".gpu"])
# The GPU machine has CUDA, cuDNN, NCCL and PyTorch but none of our Debian libraries: the
# bundle holds the programs with those libraries, the Python drivers and Fashion-MNIST.
# PHUB_GPU_ASAN=1 also builds nccl_test and cudnn_ops_test under ASan (build-gpu-asan), for
# the check that the CUDA driver initialises in a sanitized process.
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=${PHUB_JOBS:-2}
targets=(tests/worker/backend/cudnn_ops_test tests/phub/nccl/nccl_test
         tests/phub/exchange/exchange_test tests/phub/exchange/staged_exchange_test
         tests/phub/staging/copy_engine_test bench/gpu/staging_bench
         worker/phub-worker phub/server/phubd
         bench/exchange/phub_exchange_worker bench/exchange/phub_tcp_blaster)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPHUB_NATIVE=OFF \
  -DPHUB_WITH_CUDA=ON -DPHUB_BUILD_BENCH=ON >/dev/null
ninja -C build-gpu -j "$jobs" "${targets[@]}"
files=("${targets[@]/#/build-gpu/}")
# A phub-worker of an earlier commit, for before/after figures in the same call
# (bench/gpu/exchange_gpu.py): PHUB_GPU_BEFORE=DIR holds worker/phub-worker built there.
if [[ -n ${PHUB_GPU_BEFORE:-} ]]; then
  files+=("$PHUB_GPU_BEFORE/worker/phub-worker")
fi
# phub's Python package for the GPU machine's Python 3.12 (bench/gpu/build_py312_module.sh), for
# phub.torch on CUDA (run_gpu.sh's `torch` phase): built now from pyenv's 3.12 headers unless
# one is there already (PHUB_GPU_PY312=0: never); each file named, so the module's libraries
# are found and taken too.
if [[ ${PHUB_GPU_PY312:-1} == 1 && ! -d build-gpu/python312/phub ]]; then
  bash bench/gpu/build_py312_module.sh - >/dev/null ||
    echo "bundle_gpu.sh: no Python 3.12 package (above): run_gpu.sh's torch phase cannot run" >&2
fi
for d in build-gpu/python312/phub build-gpu/python312-before/phub; do
  [[ -d $d ]] && files+=("$d"/*)
done
if [[ ${PHUB_GPU_ASAN:-0} == 1 ]]; then
  cmake -S . -B build-gpu-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPHUB_NATIVE=OFF \
    -DPHUB_WITH_CUDA=ON -DPHUB_BUILD_BENCH=OFF -DPHUB_SANITIZE=address >/dev/null
  ninja -C build-gpu-asan -j "$jobs" tests/phub/nccl/nccl_test tests/worker/backend/cudnn_ops_test
  files+=(build-gpu-asan/tests/phub/nccl/nccl_test build-gpu-asan/tests/worker/backend/cudnn_ops_test)
fi
# Fashion-MNIST (Debian's dataset-fashion-mnist) travels beside the programs.
data=build-gpu/fashion-mnist
mkdir -p "$data"
cp -u /usr/share/datasets/fashion-mnist/*.gz "$data/"
mkdir -p .git/info
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
rm -rf .gpu
# Folders, not scripts: bundle.sh would ldd an executable script. deploy/local/demo.py imports
# the rack's modules (bench/topo, bench/exchange/nets.py) even with --no-rack.
../shared/tools/gpu-bundle/bundle.sh .gpu "${files[@]}" "$data" bench/gpu bench/train \
  bench/benchlib deploy/local bench/topo bench/exchange examples tests/python
