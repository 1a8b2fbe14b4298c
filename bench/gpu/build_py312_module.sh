#!/usr/bin/env bash
# Builds phub's Python package for the GPU machine's interpreter (Python 3.12 there; Debian 12
# has 3.11, whose extension modules 3.12 cannot import), for phub.torch's figures on a GPU.
#   bash bench/gpu/build_py312_module.sh HEADERS [BEFORE_REV]
# HEADERS: a folder with python3.12/ (the GPU machine's /usr/include/python3.12) and include/
# (its pybind11.get_include()), fetched once through the device tool:
#   tar czf $OUT/py312-headers.tgz -C /usr/include python3.12
#   tar czf $OUT/pybind11-headers.tgz -C "$(dirname "$(python3 -c 'import pybind11; print(pybind11.get_include())')")" include
# Debian's python3.11 pyconfig.h stands in for 3.12's platform one (the same x86-64 glibc
# facts). Compiles phub._phub as build-gpu compiles it (the same flags and libraries), into
# build-gpu/python312/phub with this tree's .py files; with BEFORE_REV also
# build-gpu/python312-before/phub: the same module beside that revision's .py files (phub.torch
# as it was), for before/after in one run. bundle_gpu.sh carries both when they exist.
set -euo pipefail
cd "$(dirname "$0")/../.."
headers=$(cd "${1:?usage: build_py312_module.sh HEADERS [BEFORE_REV]}" && pwd)
before=${2:-}
mkdir -p "$headers/x86_64-linux-gnu/python3.12"
cp -n /usr/include/x86_64-linux-gnu/python3.11/pyconfig.h "$headers/x86_64-linux-gnu/python3.12/"
ninja -C build-gpu phub_python >/dev/null
obj=$(mktemp -d); trap 'rm -rf "$obj"' EXIT
mkdir -p build-gpu/python312/phub
(cd build-gpu && ninja -t commands phub_python_module) |
  grep -E 'phub_python_module\.dir/.*\.cc\.o -c|-shared' |
  sed -e "s#-isystem /usr/include/python3.11#-isystem $headers/python3.12 -I$headers/include -isystem $headers#" \
      -e "s#phub/python/CMakeFiles/phub_python_module.dir/#$obj/#g" \
      -e 's#-MD -MT [^ ]* -MF [^ ]*##' \
      -e 's#python/phub/_phub.cpython-311-x86_64-linux-gnu.so#python312/phub/_phub.cpython-312-x86_64-linux-gnu.so#' |
  while read -r cmd; do (cd build-gpu && eval "$cmd"); done
cp phub/python/phub/*.py build-gpu/python312/phub/
if [[ -n $before ]]; then
  mkdir -p build-gpu/python312-before/phub
  cp build-gpu/python312/phub/_phub.cpython-312-x86_64-linux-gnu.so build-gpu/python312-before/phub/
  for f in $(git ls-tree --name-only "$before" phub/python/phub/ | grep '\.py$'); do
    git show "$before:$f" >"build-gpu/python312-before/phub/$(basename "$f")"
  done
fi
ls -la build-gpu/python312/phub
