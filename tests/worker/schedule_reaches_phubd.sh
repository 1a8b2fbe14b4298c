#!/usr/bin/env bash
# phub-worker --lr-schedule with --comm ps: phubd steps every iteration with the schedule's
# values (per_iteration_values), not its own --optimizer flags, so one worker through phubd ends
# with the weights the same worker reaches alone (--comm none) with the same schedule; a
# constant lr ends elsewhere (the schedule is followed at all). Compared from --save-weights.
# Usage: schedule_reaches_phubd.sh PHUBD PHUB_WORKER
set -euo pipefail
phubd=$1 worker=$2
dir=$(mktemp -d /tmp/phub-schedule-test.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT

common=(--rank 0 --world 1 --model fashion-cnn --batch 2 --iters 5 --warmup 0 --log-level warn
        --optimizer momentum --lr 0.05)
schedule=(--lr-schedule cosine --warmup-iters 2 --lr-min 0.001)

# phubd's own optimizer is not the job's: sgd with another lr.
"$phubd" --max-world-size 1 --cores 1 --no-pin --listen 127.0.0.1 --port 0 \
  --port-file "$dir/port" --one-job --optimizer sgd --lr 0.5 >"$dir/phubd.log" 2>&1 &
pid=$! deadline=$((SECONDS + 20))
until [[ -s $dir/port ]]; do
  ((SECONDS < deadline)) || { echo "FAIL: phubd did not start: $(cat "$dir/phubd.log")"; exit 1; }
  sleep 0.05
done
"$worker" --comm ps --ps "127.0.0.1:$(cat "$dir/port")" "${common[@]}" "${schedule[@]}" \
  --save-weights "$dir/ps.f32" >"$dir/ps.log" 2>&1 || { echo "FAIL: ps run: $(cat "$dir/ps.log")"; exit 1; }
wait "$pid" || { echo "FAIL: phubd: $(cat "$dir/phubd.log")"; exit 1; }
"$worker" --comm none "${common[@]}" "${schedule[@]}" --save-weights "$dir/alone.f32" >/dev/null
"$worker" --comm none "${common[@]}" --save-weights "$dir/constant.f32" >/dev/null

# The largest difference relative to the weights' scale (raw float32, parameter order).
python3 - "$dir" <<'EOF'
import array, sys
d = sys.argv[1]
def load(name):
    a = array.array("f")
    with open(f"{d}/{name}.f32", "rb") as f:
        a.frombytes(f.read())
    return a
ps, alone, constant = load("ps"), load("alone"), load("constant")
assert len(ps) == len(alone) == len(constant) > 0, (len(ps), len(alone), len(constant))
scale = max(abs(x) for x in alone)
def worst(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) / scale
through_phubd, unscheduled = worst(ps, alone), worst(constant, alone)
if through_phubd > 1e-5:
    sys.exit(f"FAIL: through phubd the weights differ from the scheduled run alone by "
             f"{through_phubd:.3g} of their scale: phubd did not step with the schedule")
if unscheduled < 1e-4:
    sys.exit(f"FAIL: the constant lr ends within {unscheduled:.3g} of the schedule: "
             f"the schedule was not followed")
print(f"PASS: through phubd within {through_phubd:.2g} of alone; constant lr {unscheduled:.2g} away")
EOF
