#!/usr/bin/env bash
# The demo (README's first command): installs and builds what is needed, starts phubd and two
# workers on this box, moves ResNet-50-shaped gradients through the parameter server for a few
# iterations, prints a summary table, and stops everything it started (also on Ctrl-C).
#
# Flags: --workers N (2), --iters K (20), --cores C (2), --chunk-bytes B (phubd's default).
set -euo pipefail
cd "$(dirname "$0")/../.."

WORKERS=2 ITERS=20 CORES=2 CHUNK=""
while (($#)); do
  case "$1" in
    --workers) WORKERS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --cores) CORES=$2; shift 2 ;;
    --chunk-bytes) CHUNK=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done

echo "== installing packages and building (first run takes a few minutes) =="
bash deploy/install-deps.sh
bash deploy/build.sh >/dev/null
BUILD=${PHUB_BUILD_DIR:-build}

RUN_DIR=$(mktemp -d /tmp/phub-demo.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted, stopping everything"; exit 130' INT TERM

chunk_flag=()
[[ -n "$CHUNK" ]] && chunk_flag=(--chunk-bytes "$CHUNK")
"$BUILD/phub/server/phubd" --listen 127.0.0.1 --port 0 --port-file "$RUN_DIR/port" \
  --world-size "$WORKERS" --cores "$CORES" --optimizer momentum --lr 0.01 --one-job \
  "${chunk_flag[@]}" 2>"$RUN_DIR/phubd.log" &
pids+=($!)
for _ in $(seq 100); do [[ -s "$RUN_DIR/port" ]] && break; sleep 0.1; done
[[ -s "$RUN_DIR/port" ]] || { echo "phubd did not start:"; cat "$RUN_DIR/phubd.log"; exit 1; }
PORT=$(cat "$RUN_DIR/port")
echo "== phubd up on 127.0.0.1:$PORT with $CORES cores; starting $WORKERS workers, $ITERS iterations of ResNet-50 gradients =="

for ((r = 0; r < WORKERS; r++)); do
  "$BUILD/bench/demo/phub_demo_worker" --port "$PORT" --rank "$r" --world "$WORKERS" \
    --model resnet50 --iters "$ITERS" >"$RUN_DIR/worker$r.out" 2>"$RUN_DIR/worker$r.err" &
  pids+=($!)
done
status=0
for ((r = 0; r < WORKERS; r++)); do
  wait "${pids[$((r + 1))]}" || { status=1; echo "worker $r failed:"; cat "$RUN_DIR/worker$r.err"; }
done
wait "${pids[0]}" || status=1
grep -E "started|ended" "$RUN_DIR/phubd.log" | sed 's/^/phubd: /'
((status == 0)) || { echo "demo failed; phubd log:"; cat "$RUN_DIR/phubd.log"; exit 1; }

echo
echo "PS exchange of ResNet-50 gradients (25.6 M parameters, 161 tensors) on loopback:"
printf "%-5s %-9s %8s %10s %10s %10s %10s %14s\n" rank model tensors "MiB/push" "median ms" "best ms" "GiB/s*" checksum
cat "$RUN_DIR"/worker*.out
echo "* bytes moved by this worker per iteration (push + pull = 2 x model) / median time"
sums=$(awk '{print $8}' "$RUN_DIR"/worker*.out | sort -u | wc -l)
if [[ "$sums" == 1 ]]; then echo "all $WORKERS workers hold identical weights (checksums match)"
else echo "ERROR: workers' weights differ"; exit 1; fi
