#!/usr/bin/env bash
# Configures and builds PHub into build/ (or $PHUB_BUILD_DIR) with Ninja and ccache, -j2 by
# default (this project's machines have 2 cores; override with PHUB_JOBS). Extra arguments go to
# cmake, e.g. deploy/build.sh -DPHUB_SANITIZE=thread.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${PHUB_BUILD_DIR:-build}
JOBS=${PHUB_JOBS:-2}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/phub-ccache}
# Paths under the checkout are hashed relative to it, and the compiler by its content rather than
# its mtime, so a checkout elsewhere (CI's fresh clone each run, deploy/bare-debian-check.sh's
# /phub in a chroot with its own, identical gcc) hits what another checkout compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_COMPILERCHECK=${CCACHE_COMPILERCHECK:-content}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$BUILD_DIR" -j "$JOBS"
