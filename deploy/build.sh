#!/usr/bin/env bash
# Configures and builds PHub into build/ (or $PHUB_BUILD_DIR) with Ninja and ccache, -j2 by
# default (this project's machines have 2 cores; override with PHUB_JOBS). Extra arguments go to
# cmake, e.g. deploy/build.sh -DPHUB_SANITIZE=thread.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${PHUB_BUILD_DIR:-build}
JOBS=${PHUB_JOBS:-2}
# ccache and its settings: CMakeLists.txt's launcher (a checkout elsewhere hits this one's cache).
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$BUILD_DIR" -j "$JOBS"
