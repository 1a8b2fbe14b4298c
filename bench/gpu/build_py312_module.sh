#!/usr/bin/env bash
# Builds phub's Python package for the GPU machine's interpreter (Python 3.12 there; Debian 12
# has 3.11, whose extension modules 3.12 cannot import), for phub.torch's figures on a GPU.
#   bash bench/gpu/build_py312_module.sh [HEADERS] [BEFORE_REV]
# Without HEADERS (or with "-"): Python 3.12's own headers from pyenv on this machine
# ($(pyenv root)/versions/3.12.*/include/python3.12, with its pyconfig.h) and Debian's pybind11
# (2.10.3: compiled, imported and exchanging under pyenv's 3.12.1 here, 2026-11-29), so no
# device call is spent fetching headers. HEADERS: a folder with python3.12/ (the GPU machine's
# /usr/include/python3.12) and include/ (its pybind11.get_include()), fetched through the
# device tool:
#   tar czf $OUT/py312-headers.tgz -C /usr/include python3.12
#   tar czf $OUT/pybind11-headers.tgz -C "$(dirname "$(python3 -c 'import pybind11; print(pybind11.get_include())')")" include
# with Debian's python3.11 pyconfig.h standing in for 3.12's platform one (the same x86-64 glibc
# facts). Compiles phub._phub as build-gpu compiles it (the same flags and libraries), into
# build-gpu/python312/phub with this tree's .py files; with BEFORE_REV also
# build-gpu/python312-before/phub: the same module beside that revision's .py files (phub.torch
# as it was), for before/after in one run. bundle_gpu.sh carries both when they exist.
set -euo pipefail
cd "$(dirname "$0")/../.."
before=${2:-}
if [[ -z ${1:-} || ${1:-} == - ]]; then
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  py312=$(ls -d "$root"/versions/3.12*/include/python3.12 2>/dev/null | tail -n 1)
  if [[ -z $py312 || ! -f /usr/include/pybind11/pybind11.h ]]; then
    echo "build_py312_module.sh: no Python 3.12 headers from pyenv (or no pybind11-dev): give" \
         "HEADERS fetched from the GPU machine (see the top of this script)" >&2
    exit 2
  fi
  headers=$(mktemp -d); made_headers=$headers
  trap 'rm -rf "$made_headers"' EXIT
  ln -s "$py312" "$headers/python3.12"
  mkdir -p "$headers/include"
  ln -s /usr/include/pybind11 "$headers/include/pybind11"
else
  headers=$(cd "$1" && pwd)
  mkdir -p "$headers/x86_64-linux-gnu/python3.12"
  cp -n /usr/include/x86_64-linux-gnu/python3.11/pyconfig.h "$headers/x86_64-linux-gnu/python3.12/"
fi
ninja -C build-gpu phub_python >/dev/null
obj=$(mktemp -d)
trap 'rm -rf "$obj" ${made_headers:+"$made_headers"}' EXIT
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
