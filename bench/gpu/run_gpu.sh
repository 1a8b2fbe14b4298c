#!/usr/bin/env bash
# The project's GPU checks and benchmarks, run on a lent GPU machine from the bundle that
# bench/gpu/bundle_gpu.sh made here:
#   bash .gpu/run.sh bash bench/gpu/run_gpu.sh [tests] [alone] [train] [bench] [r50] ...
# exchange: the exchange before/after on one GPU and the staging pipeline's cost (issue 39).
# torch, psrate: phub.torch against DDP + NCCL, and one worker's exchange rate (issue 39).
# pytests: phub.torch's own tests (CPU tensors) under this machine's PyTorch 2.x; the hook and
#          ServerOptimizer on CUDA models (test_torch_staged.py, PHUB_TEST_DEVICE=cuda).
# tests: cuDNN ops and whole models vs oneDNN, NCCL vs float64, the exchange, and (where bundled)
#        the same under ASan, whose CUDA driver needs protect_shadow_gap=0.
# alone: Fashion-MNIST on the GPU, one worker. train: that, then 2 and 4 workers sharing GPU 0
#        through phubd and the ring (deploy/local/demo.py --device cuda); NCCL at N = 1 (1 GPU).
# bench: bench/train/run_train.py --device cuda, phub-worker vs this machine's PyTorch, strict
#        float32 on both sides; r50: ResNet-50 b64 alone; hostbatch: that with PyTorch copying
#        each batch from host memory as phub-worker does. tf32, r50tf32: TF32 on both sides.
# Each step's log goes to $OUT/logs/ (packed into $OUT/gpu-logs.tar.gz at the end, also on
# failure); a line per step to $OUT/summary.txt; exit 1 if any step failed.
set -uo pipefail
out=${OUT:-/tmp/phub-gpu-out}
mkdir -p "$out/logs"
B=build-gpu
ALL=resnet50:64,resnet56:128,alexnet:128,lstm:128
py=$(command -v python3)
failed=0
pack() { tar -C "$out" -czf "$out/gpu-logs.tar.gz" logs summary.txt 2>/dev/null; }
trap pack EXIT

step() {  # step NAME COMMAND...: runs it, logs it, records rc and seconds
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name: $*" | tee -a "$out/summary.txt"
  "$@" >"$out/logs/$name.log" 2>&1
  local rc=$?
  if grep -q "no CUDA device" "$out/logs/$name.log"; then
    echo "   $name: a test skipped for want of a GPU: counted as a failure here" | tee -a "$out/summary.txt"
    rc=99
  fi
  ((rc == 0)) || failed=1
  echo "   $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  tail -n 4 "$out/logs/$name.log" | sed 's/^/   | /'
}

phase_tests() {
  step gtest-cudnn-ops $B/tests/worker/backend/cudnn_ops_test
  step gtest-nccl $B/tests/phub/nccl/nccl_test
  step gtest-exchange $B/tests/phub/exchange/exchange_test
  step gtest-staged-exchange $B/tests/phub/exchange/staged_exchange_test
  step gtest-copy-engine $B/tests/phub/staging/copy_engine_test
  if [[ -x build-gpu-asan/tests/phub/nccl/nccl_test ]]; then
    ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 step asan-nccl build-gpu-asan/tests/phub/nccl/nccl_test
    ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 step asan-cudnn-ops \
      build-gpu-asan/tests/worker/backend/cudnn_ops_test --gtest_filter='*Model*:*Conv2d*'
  fi
}

phase_alone() {
  step alone-fashion-cnn $B/worker/phub-worker --device cuda --model fashion-cnn --data fashion-mnist \
    --data-dir $B/fashion-mnist --epochs 2 --batch 64 --lr 0.05 --optimizer momentum --seed 1
}

phase_nccl1() {
  local rdv
  rdv=$(mktemp -d)
  step nccl-n1-fashion-cnn $B/worker/phub-worker --device cuda --comm nccl --rank 0 --world 1 \
    --rendezvous "$rdv" --model fashion-cnn --data fashion-mnist --data-dir $B/fashion-mnist --epochs 2 \
    --batch 64 --lr 0.05 --optimizer momentum --seed 1
}

phase_train() {
  local data=$B/fashion-mnist
  phase_alone
  phase_nccl1
  # --no-rack: loopback only, whole epochs, as measured before the demo had a rack.
  step demo-n2 "$py" deploy/local/demo.py --device cuda --build $B --data-dir $data --workers 2 \
    --epochs 2 --no-rack --out "$out/logs/demo-n2"
  step demo-n4 "$py" deploy/local/demo.py --device cuda --build $B --data-dir $data --workers 4 \
    --epochs 2 --batch 16 --no-kill --no-rack --out "$out/logs/demo-n4"
}

# exchange: issue 39's figures. The exchange before and after (bench/gpu/exchange_gpu.py; the
# bundle's build-gpu-before/ holds the earlier phub-worker), then the staging pipeline's cost
# against the same bytes' D2H + H2D alone (staging_bench: whole tensors and 4 MiB segments), on
# ResNet-50, fashion-cnn and FCN-5.
phase_exchange() {
  step staging-r50 $B/bench/gpu/staging_bench --model resnet50 --out "$out/logs/staging-r50"
  cat "$out/logs/staging-r50/staging.md" 2>/dev/null
  step staging-fcnn $B/bench/gpu/staging_bench --model fashion-cnn --out "$out/logs/staging-fcnn"
  cat "$out/logs/staging-fcnn/staging.md" 2>/dev/null
  # FCN-5: its largest tensor is pushed last, where 4 MiB segments paid most on the CPU.
  step staging-fcn5 $B/bench/gpu/staging_bench --model fcn5 --out "$out/logs/staging-fcn5"
  cat "$out/logs/staging-fcn5/staging.md" 2>/dev/null
  if [[ -x build-gpu-before/worker/phub-worker ]]; then
    step exchange-gpu "$py" bench/gpu/exchange_gpu.py --before build-gpu-before/worker/phub-worker \
      --after $B/worker/phub-worker --phubd $B/phub/server/phubd --out "$out/logs/exchange-gpu"
    cat "$out/logs/exchange-gpu/exchange_gpu.md" 2>/dev/null
  fi
}

# torch: phub.torch on CUDA (phub.DeviceClient, the staging pipeline; the hook and
# ServerOptimizer(overlap_forward=True)) against DDP + NCCL at N = 1, ResNet-18 and
# ResNet-50, phubd with 8 cores on TCP and on shared memory (--transport shm), the worker with
# 1 and 4 I/O threads (bench/gpu/torch_gpu.py; PHUB_TORCH_PS_CORES, PHUB_TORCH_TRANSPORTS,
# PHUB_TORCH_IO_THREADS, PHUB_TORCH_BACKENDS; PHUB_TORCH_WIRES=fp32,bf16 adds the compact wire,
# doubling the PS's runs; PHUB_TORCH_BUCKET_CAPS=25,5 adds smaller DDP buckets, which reach
# phubd sooner in backward, doubling every run); needs the Python 3.12
# package of bench/gpu/build_py312_module.sh in the bundle.
phase_torch() {
  local pkgs=()
  [[ -d build-gpu/python312/phub ]] && pkgs+=(--package after=build-gpu/python312)
  [[ -d build-gpu/python312-before/phub ]] && pkgs+=(--package before=build-gpu/python312-before)
  step torch-gpu "$py" bench/gpu/torch_gpu.py --phubd $B/phub/server/phubd "${pkgs[@]}" \
    --rounds "${PHUB_TORCH_ROUNDS:-2}" --budget-s "${PHUB_TORCH_BUDGET_S:-0}" \
    --ps-cores "${PHUB_TORCH_PS_CORES:-8}" \
    --transports "${PHUB_TORCH_TRANSPORTS:-tcp,shm}" --io-threads "${PHUB_TORCH_IO_THREADS:-1,4}" \
    --wires "${PHUB_TORCH_WIRES:-fp32}" --bucket-caps "${PHUB_TORCH_BUCKET_CAPS:-25}" \
    --backends "${PHUB_TORCH_BACKENDS:-phub,phub-optimizer-overlap}" \
    --out "$out/logs/torch-gpu"
  cat "$out/logs/torch-gpu/torch_gpu.md" 2>/dev/null
}

# psrate: one worker's exchange of 100 MiB through phubd --cores 8 on loopback, its connections
# on 1 thread (ps) and on 4 (ps-io4), and in shared memory (ps-shm), against raw TCP moving the
# same bytes over the same streams (bench/exchange/run_exchange.py): whether one client thread
# limits a GPU worker, and what leaving the kernel out gains.
phase_psrate() {
  step psrate "$py" bench/exchange/run_exchange.py --build $B --topologies loopback --workers 1 \
    --sizes 100 --cores 8 --systems raw-tcp,ps,ps-io4,ps-shm --reps 3 --iters 5 --out "$out/logs/psrate"
  cat "$out/logs/psrate/exchange.md" 2>/dev/null
}

# pytests: phub.torch's own tests (tests/python, CPU tensors: the hook, ServerOptimizer, the c10d
# backend, elastic jobs) under this machine's Python and PyTorch 2.x, the only PyTorch 2 we can
# reach (Debian 12's, where ctest runs them, is 1.13); the bundle's phubd and phub package.
# PHUB_PYTESTS: which, in this order (default: the CUDA models' first, then the CPU ones).
phase_pytests() {
  local t
  for t in ${PHUB_PYTESTS:-cuda test_ps_client test_torch_ddp test_torch_elastic}; do
    if [[ $t == cuda ]]; then  # the hook and ServerOptimizer on CUDA models (GPU 0), vs gloo
      PHUBD=$B/phub/server/phubd PYTHONPATH=build-gpu/python312 PYTHONDONTWRITEBYTECODE=1 \
        PHUB_TEST_DEVICE=cuda step py-test_torch_staged-cuda \
        timeout "${PHUB_PYTEST_TIMEOUT:-420}" "$py" tests/python/test_torch_staged.py
      continue
    fi
    PHUBD=$B/phub/server/phubd PYTHONPATH=build-gpu/python312 PYTHONDONTWRITEBYTECODE=1 \
      step "py-$t" timeout "${PHUB_PYTEST_TIMEOUT:-420}" "$py" tests/python/$t.py
  done
}

bench() {  # bench NAME MODELS [run_train.py flags]
  local name=$1 models=$2; shift 2
  step "$name" timeout "${PHUB_BENCH_TIMEOUT:-480}" "$py" bench/train/run_train.py --device cuda \
    --worker $B/worker/phub-worker --models "$models" --rounds 3 --warmup 5 --iters 20 \
    --threads 4 --out "$out/logs/$name" "$@"
  cat "$out/logs/$name/train.md" 2>/dev/null
}

echo "== $(date -Is) $(nvidia-smi -L 2>&1 | head -1); $("$py" -c 'import torch; print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version())' 2>&1)" \
  | tee -a "$out/summary.txt"
phases=("$@")
((${#phases[@]})) || phases=(tests train bench)
for phase in "${phases[@]}"; do
  case $phase in
    tests) phase_tests ;;
    exchange) phase_exchange ;;
    torch) phase_torch ;;
    psrate) phase_psrate ;;
    pytests) phase_pytests ;;
    alone) phase_alone ;;
    nccl1) phase_nccl1 ;;
    train) phase_train ;;
    bench) bench bench-fp32 "$ALL" ;;
    r50) bench bench-r50-fp32 resnet50:64 ;;
    hostbatch) bench bench-r50-hostbatch resnet50:64 --host-batch ;;
    tf32) bench bench-tf32 "$ALL" --tf32 ;;
    r50tf32) bench bench-r50-tf32 resnet50:64 --tf32 ;;
    *) echo "run_gpu.sh: unknown phase '$phase' (tests exchange torch psrate pytests alone nccl1 train bench r50 hostbatch tf32 r50tf32)" >&2
       exit 2 ;;
  esac
done
exit $failed
