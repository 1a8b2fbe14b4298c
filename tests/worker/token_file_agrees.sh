#!/usr/bin/env bash
# phubd and phub-worker read one --token-file as one token (phub/common/token_file.h): a file
# whose token ends in a space and a tab (the case the two used to trim differently) lets the
# worker join, and an empty token file is refused by both, naming the file.
# Usage: token_file_agrees.sh PHUBD PHUB_WORKER
set -euo pipefail
phubd=$1 worker=$2
dir=$(mktemp -d /tmp/phub-token-test.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT

printf 's3cret \t\n' >"$dir/token"
"$phubd" --world-size 1 --cores 1 --no-pin --listen 127.0.0.1 --port 0 \
  --port-file "$dir/port" --one-job --token-file "$dir/token" >"$dir/phubd.log" 2>&1 &
pid=$! deadline=$((SECONDS + 20))
until [[ -s $dir/port ]]; do
  ((SECONDS < deadline)) || { echo "FAIL: phubd did not start: $(cat "$dir/phubd.log")"; exit 1; }
  sleep 0.05
done
"$worker" --comm ps --ps "127.0.0.1:$(cat "$dir/port")" --rank 0 --world 1 \
  --token-file "$dir/token" --reconnect-timeout-ms 0 --model fashion-cnn --batch 2 --iters 1 \
  --warmup 0 --log-level warn >"$dir/worker.log" 2>&1 ||
  { echo "FAIL: the worker was refused: $(cat "$dir/worker.log")"; exit 1; }
wait "$pid"

: >"$dir/empty"
for program in "$phubd --world-size 1 --port 0" "$worker --comm ps --ps 127.0.0.1:1"; do
  status=0
  $program --token-file "$dir/empty" >"$dir/empty.log" 2>&1 || status=$?
  [[ $status == 2 ]] || { echo "FAIL: '$program' exited $status on an empty token file"; exit 1; }
  grep -q "$dir/empty' holds no token" "$dir/empty.log" ||
    { echo "FAIL: '$program' did not name the empty file: $(cat "$dir/empty.log")"; exit 1; }
done
echo "PASS: one token for both; an empty file refused by both"
