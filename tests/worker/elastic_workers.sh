#!/usr/bin/env bash
# An elastic job of real phub-worker processes on Fashion-MNIST (docs/design.md "Elastic jobs"):
# 2 -> 4 -> 3 -> 2 workers, then none. Ranks 0 and 1 start it (--min-workers 2 --max-workers 4);
# ranks 2 and 3 join once it runs; rank 3 gets SIGTERM (a scheduler's preemption: it leaves at
# the next iteration boundary and exits 0), rank 2 gets SIGKILL; at last ranks 0 and 1 get
# SIGTERM together (the whole job preempted): both leave at a boundary (the same, or one apart
# when the two requests make two changes), exit 0, and phubd ends the job. Nobody ever stalls. From the workers' --results: every iteration the
# members took distinct global batches, consecutive when every member is recorded, and each
# iteration's batches follow the last one's: no batch is taken twice or skipped while members
# come and go (the killed worker's are not recorded: its iterations are checked for no repeat
# only). The workers run until told to leave, so a slow start (sanitizers) cannot outlast them.
# They follow a cosine schedule with --lr-scaling linear: every member (joiners included) gives
# phubd the same values for each iteration, or phubd stalls the job naming both (it must not).
# Usage: elastic_workers.sh PHUBD PHUB_WORKER [STEPS] (40: rank 0's iterations between events;
# the sanitizer builds give fewer).
set -euo pipefail
phubd=$1 worker=$2 steps=${3:-40}
dir=$(mktemp -d /tmp/phub-elastic-test.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT

"$phubd" --max-world-size 4 --cores 2 --no-pin --listen 127.0.0.1 --port 0 \
  --port-file "$dir/port" --one-job --liveness-timeout-ms 3000 >"$dir/phubd.log" 2>&1 &
phubd_pid=$! deadline=$((SECONDS + 20))
until [[ -s $dir/port ]]; do
  ((SECONDS < deadline)) || { echo "FAIL: phubd did not start: $(cat "$dir/phubd.log")"; exit 1; }
  sleep 0.05
done
common=(--comm ps --ps "127.0.0.1:$(cat "$dir/port")" --model fashion-cnn --batch 16
        --data fashion-mnist --iters 1000000 --warmup 0 --log-every 1 --optimizer momentum --lr 0.02
        --min-workers 2 --max-workers 4 --start-workers 2 --reconnect-timeout-ms 0
        --lr-schedule cosine --warmup-iters 10 --lr-scaling linear)
declare -A pid
start() {
  "$worker" "${common[@]}" --rank "$1" --results "$dir/r$1.json" >"$dir/w$1.log" 2>&1 &
  pid[$1]=$!
}
# Rank 0's last step, from its log ("step N/...").
progress() { grep -o 'step [0-9]*/' "$dir/w0.log" 2>/dev/null | tail -1 | tr -dc 0-9 || true; }
wait_step() {
  local deadline=$((SECONDS + 120))
  local at
  while at=$(progress); (( ${at:-0} < $1 )); do
    ((SECONDS < deadline)) || { echo "FAIL: rank 0 did not reach step $1: $(tail -5 "$dir/w0.log")"; exit 1; }
    kill -0 "${pid[0]}" 2>/dev/null || { echo "FAIL: rank 0 ended early: $(tail -5 "$dir/w0.log")"; exit 1; }
    sleep 0.02
  done
}
# Rank 0's progress now plus `1`.
after() { wait_step $(( $(progress || echo 0) + $1 )); }
start 0; start 1
wait_step 5
start 2; start 3
# Both have joined and trained (their handlers for SIGTERM are in place) before anyone leaves.
for r in 2 3; do
  deadline=$((SECONDS + 300))
  until grep -q 'step [0-9]*/' "$dir/w$r.log" 2>/dev/null; do
    ((SECONDS < deadline)) || { echo "FAIL: rank $r did not join: $(tail -5 "$dir/w$r.log")"; exit 1; }
    kill -0 "${pid[0]}" 2>/dev/null || { echo "FAIL: rank 0 ended early: $(tail -5 "$dir/w0.log")"; exit 1; }
    sleep 0.02
  done
done
after "$steps"
kill -TERM "${pid[3]}"
after "$steps"
kill -KILL "${pid[2]}"
wait "${pid[2]}" 2>/dev/null || true  # reaped here, quietly (ctest reads the output)
after "$steps"
kill -TERM "${pid[0]}" "${pid[1]}"
for r in 0 1 3; do
  wait "${pid[$r]}" || { echo "FAIL: rank $r exited $?: $(tail -5 "$dir/w$r.log")"; exit 1; }
done
deadline=$((SECONDS + 60))
while kill -0 "$phubd_pid" 2>/dev/null; do
  ((SECONDS < deadline)) || { echo "FAIL: phubd did not end the job: $(tail -5 "$dir/phubd.log")"; exit 1; }
  sleep 0.05
done
wait "$phubd_pid" || { echo "FAIL: phubd exited $?: $(tail -5 "$dir/phubd.log")"; exit 1; }
grep -q "leaves the job after iteration" "$dir/w3.log" || { echo "FAIL: rank 3 did not leave at a boundary: $(tail -5 "$dir/w3.log")"; exit 1; }
grep -q "rank 2 was lost" "$dir/phubd.log" || { echo "FAIL: phubd did not report rank 2's loss"; exit 1; }

python3 - "$dir" <<'EOF'
import json, sys
d = sys.argv[1]
runs = {r: json.load(open(f"{d}/r{r}.json"))["elastic"] for r in (0, 1, 3)}
by_it = {}
for r, e in runs.items():
    for it, world, batch in zip(e["iterations"], e["worlds"], e["batches"]):
        by_it.setdefault(it, []).append((r, world, batch))
# The two last TERMs may land in one change or two (then one of them trains one more).
last = {r: runs[r]["iterations"][-1] for r in (0, 1)}
iters = max(last.values())
for r in (0, 1):
    assert runs[r]["iterations"] == list(range(1, last[r] + 1)), f"rank {r} skipped iterations"
assert abs(last[0] - last[1]) <= 1, f"ranks 0 and 1 left {abs(last[0] - last[1])} apart: {last}"
for r in (0, 1, 3):
    assert runs[r]["left"], f"rank {r} was not let go at a boundary"
seen, worlds, start_of = set(), [], {}
for it in sorted(by_it):
    rows = by_it[it]
    world = rows[0][1]
    assert all(w == world for _, w, _ in rows), f"iteration {it}: members told different worlds {rows}"
    batches = [b for _, _, b in rows]
    assert len(set(batches)) == len(batches), f"iteration {it}: two members took one batch {rows}"
    assert not seen & set(batches), f"iteration {it}: batch(es) {seen & set(batches)} taken before"
    seen |= set(batches)
    lo = min(batches)
    assert max(batches) < lo + world, f"iteration {it}: batches {batches} beyond {world} members"
    if len(rows) == world:
        assert sorted(batches) == list(range(lo, lo + world)), f"iteration {it}: {batches}"
    start_of[it] = (lo, world, len(rows) == world)
    if not worlds or worlds[-1] != world:
        worlds.append(world)
for it in range(2, iters + 1):
    (lo0, w0, full0), (lo1, _, full1) = start_of[it - 1], start_of[it]
    if full0 and full1:
        assert lo1 == lo0 + w0, f"iteration {it} starts at batch {lo1}, not {lo0 + w0}: skipped or repeated"
# (A last 1: the two last TERMs in two changes, one rank training a last iteration alone.)
if worlds[-1] == 1:
    worlds.pop()
if worlds not in ([2, 4, 3, 2], [2, 3, 4, 3, 2]):
    sys.exit(f"FAIL: the members went {worlds}, not 2 -> 4 -> 3 -> 2")
print(f"PASS: {iters} iterations, members {' -> '.join(map(str, worlds))}, {len(seen)} batches, "
      f"none taken twice, none skipped")
EOF
kill -TERM "$phubd_pid" 2>/dev/null || true
