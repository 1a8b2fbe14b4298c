#!/usr/bin/env bash
# deploy/slurm/phub.sbatch against a real Slurm cluster on this machine (deploy/slurm/
# local-cluster.sh: munged, slurmctld, slurmd): a PS job and a ring job of 2 workers each run to
# the end through sbatch --wait. Checked: both exit 0; within each job every rank ends with the
# same weights (bitwise); the PS and the ring end with the same weights within float32 rounding
# (two mechanisms, one result); phubd aggregated every chunk of every step and exited with the
# job (--one-job). An elastic PS job (PHUB_MAX_WORKERS): a job step added with srun --jobid joins
# it running and leaves on scancel --signal=TERM, the job's workers training to the end. NCCL
# needs a GPU per rank: its variant is not run here (said so).
# Usage: slurm_test.sh PHUBD PHUB_WORKER. Exit 77 (skipped) where a cluster cannot start.
set -euo pipefail
phubd=$(realpath "$1")
worker=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=$(mktemp -d /tmp/phub-slurm-test.XXXXXX)
cleanup() {
  bash "$repo/deploy/slurm/local-cluster.sh" stop "$dir/cluster" || true
  rm -rf "$dir"
}
trap cleanup EXIT

status=0
bash "$repo/deploy/slurm/local-cluster.sh" start "$dir/cluster" || status=$?
if ((status == 77)); then exit 77; fi
((status == 0)) || { echo "FAIL: local-cluster start exited $status"; exit 1; }
export SLURM_CONF=$dir/cluster/slurm.conf

mkdir -p "$dir/out"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
steps=5  # warm-up + timed
# The optimizer named: the ring runs it on the workers, and the PS job asks phubd for it.
args=(--model fashion-cnn --batch 8 --warmup 1 --iters $((steps - 1)) --seed 3 --log-every 5
      --optimizer momentum --lr 0.05)

run_job() {  # run_job NAME COMM [PHUBD_ARGS]
  local name=$1 comm=$2 rc=0
  echo "== sbatch $comm job ($name)"
  PHUB_COMM=$comm PHUBD=$phubd PHUB_WORKER=$worker PHUB_PORT=$(free_port) PHUBD_ARGS=${3:-} \
    timeout 300 sbatch --wait --ntasks=2 --overcommit --job-name="phub-$name" \
    --output="$dir/out/$name.log" "$repo/deploy/slurm/phub.sbatch" "${args[@]}" \
    --save-weights "$dir/out/$name-{rank}.bin" || rc=$?
  sed 's/^/   | /' "$dir/out/$name.log"
  ((rc == 0)) || { echo "FAIL: the $name job exited $rc"; exit 1; }
  cmp "$dir/out/$name-0.bin" "$dir/out/$name-1.bin" ||
    { echo "FAIL: $name: ranks 0 and 1 ended with different weights"; exit 1; }
  echo "   $name: both ranks hold the same $(stat -c %s "$dir/out/$name-0.bin") bytes of weights"
}

run_job ps ps "--cores 2 --no-pin"
# The job is named after the Slurm job (phub-worker's default: $SLURM_JOB_ID).
chunks=$(grep -oP "job '[0-9]+' started: .*?, \K[0-9]+(?= chunks)" "$dir/out/ps.log")
grep -qP "job '[0-9]+' ended: $((chunks * steps)) chunk aggregations" "$dir/out/ps.log" ||
  { echo "FAIL: phubd did not log $((chunks * steps)) aggregations ($chunks chunks x $steps steps)"; exit 1; }
grep -q "phubd stopped" "$dir/out/ps.log" || { echo "FAIL: phubd did not exit with the job"; exit 1; }

# An elastic PS job (PHUB_MAX_WORKERS): 2 workers start it; a job step added from outside
# (srun --jobid) joins it running; scancel --signal=TERM of that step makes its worker leave at
# an iteration boundary (exit 0); the job's own workers train to the end.
echo "== sbatch elastic ps job, a step added, then TERMed"
port=$(free_port)
elastic=(--model fashion-cnn --batch 8 --warmup 0 --iters 150 --log-every 1 --min-workers 1
         --max-workers 3 --start-workers 2 --reconnect-timeout-ms 0)
# Submitted from $dir: the job's token file is $dir/.phub-token-JOB (SLURM_SUBMIT_DIR).
job=$(cd "$dir" && PHUB_COMM=ps PHUBD=$phubd PHUB_WORKER=$worker PHUB_PORT=$port \
  PHUB_MAX_WORKERS=3 PHUBD_ARGS="--cores 2 --no-pin" sbatch --parsable --ntasks=2 --overcommit \
  --job-name=phub-elastic --output="$dir/out/elastic.log" "$repo/deploy/slurm/phub.sbatch" \
  "${elastic[@]}")
job=${job%%;*}
deadline=$((SECONDS + 120))
until grep -q 'step 20/' "$dir/out/elastic.log" 2>/dev/null; do
  ((SECONDS < deadline)) || { sed 's/^/   | /' "$dir/out/elastic.log"; echo "FAIL: the elastic job did not train"; exit 1; }
  sleep 0.2
done
timeout 200 srun --jobid="$job" --overlap --ntasks=1 "$worker" --comm ps --ps "127.0.0.1:$port" \
  --token-file "$dir/.phub-token-$job" --rank 2 "${elastic[@]}" >"$dir/out/added.log" 2>&1 &
added=$!
deadline=$((SECONDS + 120))
until grep -q 'step [0-9]*/' "$dir/out/added.log" 2>/dev/null; do
  ((SECONDS < deadline)) || { cat "$dir/out/added.log"; echo "FAIL: the added step did not join"; exit 1; }
  sleep 0.2
done
scancel --signal=TERM "$job.2"
wait "$added" || { cat "$dir/out/added.log"; echo "FAIL: the added step did not exit 0 on TERM"; exit 1; }
grep -q "leaves the job after iteration" "$dir/out/added.log" ||
  { cat "$dir/out/added.log"; echo "FAIL: the added step did not leave at a boundary"; exit 1; }
deadline=$((SECONDS + 200))
while squeue -h -j "$job" 2>/dev/null | grep -q .; do
  ((SECONDS < deadline)) || { echo "FAIL: the elastic job did not end"; exit 1; }
  sleep 0.5
done
sed 's/^/   | /' "$dir/out/elastic.log" | grep -E "joined|leaving|started|ended|error" || true
grep -q "joined: 2" "$dir/out/elastic.log" || { echo "FAIL: phubd did not log rank 2 joining"; exit 1; }
grep -q "leaving after iteration" "$dir/out/elastic.log" || { echo "FAIL: phubd did not log the leave"; exit 1; }
[[ $(grep -c "step 150/" "$dir/out/elastic.log") == 2 ]] ||
  { echo "FAIL: the job's 2 workers did not both train 150 iterations"; exit 1; }
echo "   elastic: a step joined and left by TERM; the job's workers trained all 150 iterations"

run_job ring ring
python3 - "$dir/out/ps-0.bin" "$dir/out/ring-0.bin" <<'PY'
import array, sys
a, b = (array.array("f", open(p, "rb").read()) for p in sys.argv[1:])
assert len(a) == len(b) > 0, (len(a), len(b))
scale = max(abs(x) for x in a)
worst = max(abs(x - y) for x, y in zip(a, b)) / scale
print(f"   ps vs ring: {len(a)} weights, largest difference {worst:.2e} of the largest weight")
sys.exit(0 if worst < 1e-4 else "FAIL: the PS and the ring trained to different weights")
PY
echo "   nccl: not run (one GPU per rank needed; the GPU machine runs NCCL at N = 1: bench/gpu)"
echo "PASS"
