#!/usr/bin/env bash
# phub-worker --comm ps: an optimizer named on its command line is the one phubd runs for the
# job (sent in the Hello); without one, phubd's own --optimizer flags apply. Read from phubd's
# "job 'NAME' started: ..." line. Usage: optimizer_reaches_phubd.sh PHUBD PHUB_WORKER
set -euo pipefail
phubd=$1 worker=$2
dir=$(mktemp -d /tmp/phub-optimizer-test.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT

run() {  # run NAME [phub-worker optimizer flags...]: the optimizer phubd ran
  local name=$1; shift
  "$phubd" --max-world-size 1 --cores 1 --no-pin --listen 127.0.0.1 --port 0 \
    --port-file "$dir/$name.port" --one-job --optimizer sgd --lr 0.01 >"$dir/$name.log" 2>&1 &
  local pid=$! deadline=$((SECONDS + 20))
  until [[ -s $dir/$name.port ]]; do
    ((SECONDS < deadline)) || { echo "FAIL: phubd did not start: $(cat "$dir/$name.log")"; exit 1; }
    sleep 0.05
  done
  "$worker" --comm ps --ps "127.0.0.1:$(cat "$dir/$name.port")" --rank 0 --world 1 \
    --model fashion-cnn --batch 2 --iters 1 --warmup 0 --log-level warn "$@" >/dev/null
  wait "$pid"
  grep -oP "job '[^']+' started: .*?chunks of \d+ bytes over \d+ cores, \K[a-z]+\([^)]*\)" "$dir/$name.log"
}

named=$(run named --optimizer adam --lr 0.002)
[[ $named == "adam(lr=0.002,"* ]] || { echo "FAIL: the worker asked for adam lr 0.002, phubd ran '$named'"; exit 1; }
default=$(run default)
[[ $default == "sgd(lr=0.01,"* ]] || { echo "FAIL: no optimizer flag, yet phubd ran '$default', not its own sgd lr 0.01"; exit 1; }
echo "PASS: named -> $named; none -> phubd's $default"
