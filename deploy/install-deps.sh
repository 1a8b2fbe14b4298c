#!/usr/bin/env bash
# Installs every Debian package PHub needs to build, test, run the demo and plot benchmarks.
# Idempotent: packages already present are skipped, `apt-get update` runs at most once.
# --torch also installs PyTorch (Debian's python3-torch, CPU) for bench/train's reference: large,
# so only the benchmark asks for it. --test: that, and the servers the operations tests run
# (Prometheus, Slurm, systemd-analyze); the README's test command asks for it.
# --bare-check installs instead the host tools of deploy/bare-debian-check.sh (CI's bare Debian 12
# run of the README's commands); the project itself needs none of them.
# Each package and why it was chosen: docs/dependencies.md.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libboost-dev             # Boost.Asio (header-only): TCP transport
  libprotobuf-dev protobuf-compiler  # control-plane messages (proto/phub.proto)
  libspdlog-dev libfmt-dev # logging with levels
  libgtest-dev libgmock-dev # unit and integration tests
  libabsl-dev              # absl::Status / StatusOr for expected errors
  libssl-dev               # OpenSSL libcrypto: the Hello's token proof (HMAC-SHA256, RAND_bytes)
  libcli11-dev             # command-line flags with --help
  libhwloc-dev             # core topology and pinning
  libbenchmark-dev         # micro-benchmarks in bench/
  zlib1g-dev               # gzip'd IDX datasets (worker)
  dataset-fashion-mnist    # Fashion-MNIST (IDX .gz): the demo and the training tests
  libdnnl-dev              # oneDNN: the worker's CPU backend (worker/backend/onednn)
  ocl-icd-opencl-dev       # OpenCL headers: oneDNN's CMake config requires them (only a Recommends of libdnnl-dev)
  libibverbs-dev ibverbs-providers # rdma-core verbs: the RDMA transport (phub/transport/verbs)
  perftest                         # ib_write_bw: the reference of bench/exchange/run_verbs_guest.py
  python3 python3-matplotlib # PNG plots of benchmark tables
  python3-dev pybind11-dev # the Python package `phub` (phub/python): PsClient for PyTorch users
  python3-numpy            # its tests' buffers and float64 references (tests/python)
  iproute2 procps          # ss/ip for tests and emulated racks
  libgloo-dev              # Gloo allreduce: a baseline in bench/exchange (phub_gloo_worker)
  openmpi-bin libopenmpi-dev # Open MPI (mpirun, MPI_Allreduce): baseline (phub_mpi_worker)
  libsimgrid-dev           # SimGrid: the exchange's simulator past one machine (phub/sim, phubctl plan)
)

# --fuzz adds what tests/fuzz/run_fuzzers.sh (run by CI) builds and runs the libFuzzer targets
# with: clang-14, its runtime libraries (libclang_rt.fuzzer, ASan, UBSan: only a Recommends of
# clang) and llvm-symbolizer for readable crash stacks.
if [[ "${1:-}" == "--fuzz" ]]; then
  PACKAGES+=(clang-14 libclang-rt-14-dev llvm-14)
  shift
fi

# --test (deploy/test.sh, the README's test command): --torch's packages and the real
# components the operations tests run against; neither the demo nor a PS box needs them.
if [[ "${1:-}" == "--test" ]]; then
  PACKAGES+=(
    prometheus             # a real Prometheus server and promtool: scrape phubd's /metrics
    slurm-wlm munge        # a real Slurm cluster on this machine: deploy/slurm's sbatch script
    systemd                # systemd-analyze verify/security: deploy/systemd's units
    python3-venv python3-pip # `pip install ./phub/python` into a venv, as a user would
  )
  set -- --torch
fi

if [[ "${1:-}" == "--torch" ]]; then
  # libopenblas0-pthread: without it python3-torch's BLAS is the reference one, ~25x slower.
  PACKAGES+=(python3-torch python3-torchvision libopenblas0-pthread)
elif [[ "${1:-}" == "--bare-check" ]]; then
  # Only these: the check's point is that the chroot gets the main list from this very script.
  PACKAGES=(
    mmdebstrap            # builds the throwaway Debian 12 root from Debian's packages
    debian-archive-keyring # the keys mmdebstrap's apt checks bookworm's Release files with
    git                   # clones the checkout's HEAD into the root
    util-linux mount      # findmnt, mount, umount: the root's /proc, /sys, /dev, caches
  )
elif [[ -n "${1:-}" ]]; then
  echo "install-deps: unknown option '$1' (use --fuzz, --test, --torch, --bare-check, or nothing)" >&2
  exit 2
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
