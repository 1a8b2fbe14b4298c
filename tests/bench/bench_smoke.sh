#!/usr/bin/env bash
# A bench driver the README names, run in its smallest setting (tests/bench/CMakeLists.txt
# lists them; ctest -L bench_smoke runs them all): it must start its processes, check their
# results and write its tables. Usage:
#   bench_smoke.sh [--needs torch|rack] -- python3 bench/X/run_X.py ... --out @OUT@
# @OUT@ becomes a fresh temporary directory, removed after. Exit 77 (ctest: skipped) where a
# need is not met: --needs torch without python3-torch (deploy/install-deps.sh --torch;
# deploy/test.sh installs it), --needs rack without root, ip/tc, network namespaces, or while
# a rack is up (another test's or a benchmark's: one rack at a time).
set -euo pipefail
needs=()
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --needs) needs+=("${2:?--needs torch|rack}"); shift 2 ;;
    *) echo "bench_smoke.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ ${1:-} == -- ]] || { echo "usage: bench_smoke.sh [--needs torch|rack] -- COMMAND..." >&2; exit 2; }
shift

for need in "${needs[@]}"; do
  case $need in
    torch)
      if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
        echo "SKIP: python3-torch missing (deploy/install-deps.sh --torch)"; exit 77
      fi ;;
    rack)
      if [[ $(id -u) != 0 ]]; then echo "SKIP: emulated racks need root (ip netns, tc)"; exit 77; fi
      if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
        echo "SKIP: ip/tc missing (apt-get install iproute2)"; exit 77
      fi
      if ! ip netns add phub-probe-smoke 2>/dev/null; then
        echo "SKIP: cannot create network namespaces here"; exit 77
      fi
      ip netns del phub-probe-smoke
      if [[ -n $(ip netns list | grep '^phub-' || true) ]]; then
        echo "SKIP: a rack is up (a benchmark may be running); not touching it"; exit 77
      fi ;;
    *) echo "bench_smoke.sh: unknown need $need" >&2; exit 2 ;;
  esac
done

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
argv=()
for a in "$@"; do argv+=("${a//@OUT@/$OUT}"); done
echo "+ ${argv[*]}"
start=$SECONDS
set +e
"${argv[@]}"
rc=$?
set -e
echo "bench_smoke: exit $rc after $((SECONDS - start)) s"
if [[ $rc == 0 ]]; then
  # Every driver writes a Markdown table; an empty one means nothing ran.
  md=$(find "$OUT" -maxdepth 1 -name '*.md' -size +0 | head -n 1)
  [[ -n $md ]] || { echo "FAIL: the driver exited 0 but wrote no .md table in its --out"; exit 1; }
fi
exit $rc
