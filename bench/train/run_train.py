#!/usr/bin/python3
"""run_train.py: single-worker time per mini-batch, phub-worker beside PyTorch, same run.

For every (model, batch): R rounds; in each round phub-worker (oneDNN, or cuDNN with
--device cuda) and bench/train/torch_models.py (the same model in PyTorch) each train W warm-up
+ I timed mini-batches (forward, cross-entropy, backward, momentum-SGD step) on synthetic data,
one after the other with the same thread count. A system's figure is the median of its rounds'
medians; the ratio phub / PyTorch is printed beside it (the issue's bar: <= 1.2).

Default models and batches are dlbench's CPU set where it fits a 2-core box: FCN-S (fcn5) 1024,
ResNet-56 128, LSTM 128 (dlbench's own), AlexNet 16 and ResNet-50 16 (ImageNet shapes; dlbench's
1024 is for its CIFAR AlexNet-R), plus fashion-cnn 64 (our demo model).

  /usr/bin/python3 bench/train/run_train.py --quick        # ~3 min: small batches, 1 round
  /usr/bin/python3 bench/train/run_train.py                # the table (~25 min on 2 cores)
  /usr/bin/python3 bench/train/run_train.py --models resnet56:128,alexnet:16 --rounds 5
  /usr/bin/python3 bench/train/run_train.py --device cuda --models resnet50:64  # on a GPU box

Writes OUT/train.tsv (every run), OUT/train_summary.tsv, OUT/train.md and OUT/train.png.
Exit 1 if a run fails (its output is printed).
"""
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchlib import BenchError, machine, plots, tables  # noqa: E402
from benchlib.cli import parser  # noqa: E402
from benchlib.log import Progress, log  # noqa: E402
from benchlib.procs import run_checked  # noqa: E402

DEFAULT = "fashion-cnn:64,fcn5:1024,resnet56:128,alexnet:16,lstm:128,resnet50:16"
QUICK = "fashion-cnn:16,fcn5:128,resnet56:16,alexnet:2,lstm:16"
BARS = {"resnet56", "alexnet", "fcn5"}  # the CPU bars
BAR = 1.2


def time_phub(worker, model, batch, a):
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    out = run_checked([worker, "--model", model, "--batch", str(batch), "--iters",
                       str(a.iters), "--warmup", str(a.warmup), "--log-level", "warn",
                       "--device", a.device] + (["--tf32"] if a.tf32 else []), env)
    m = re.search(r"median ([0-9.]+) ms per mini-batch", out)
    if not m:
        raise BenchError(f"phub-worker printed no median:\n{out}")
    return float(m.group(1))


def time_torch(model, batch, a):
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    out = run_checked([a.python, os.path.join(HERE, "torch_models.py"), "--model",
                       model, "--batch", str(batch), "--iters", str(a.iters), "--warmup",
                       str(a.warmup), "--threads", str(a.threads), "--device", a.device]
                      + (["--channels-last"] if a.channels_last else [])
                      + (["--tf32"] if a.tf32 else [])
                      + (["--host-batch"] if a.host_batch else []), env)
    r = json.loads(out.strip().splitlines()[-1])
    return r["median_ms"], r["torch"]


def parse_models(text):
    pairs = []
    for item in text.split(","):
        name, _, batch = item.partition(":")
        if not batch.isdigit() or int(batch) < 1:
            raise SystemExit(f"run_train.py: '{item}' is not MODEL:BATCH (e.g. resnet56:128)")
        pairs.append((name, int(batch)))
    return pairs


def main():
    p = parser(__doc__, epilog=False)
    p.add_argument("--models", default=None, help=f"MODEL:BATCH,... (default {DEFAULT})")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=5, help="timed mini-batches per run")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--channels-last", action="store_true", help="PyTorch side (GPU runs)")
    p.add_argument("--tf32", action="store_true",
                   help="GPU runs: TF32 tensor-core math on both sides (default strict float32)")
    p.add_argument("--host-batch", action="store_true",
                   help="GPU runs: PyTorch copies each step's batch from host memory, as "
                        "phub-worker does (default: PyTorch's batch stays on the GPU)")
    p.add_argument("--python", default=sys.executable,
                   help="The Python with PyTorch (default: this one; a GPU box's own venv)")
    p.add_argument("--quick", action="store_true", help=f"{QUICK}, 1 round")
    p.add_argument("--worker", default=os.path.join(ROOT, "build", "worker", "phub-worker"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "train"))
    a = p.parse_args()
    if a.quick:
        a.rounds = 1
    pairs = parse_models(a.models or (QUICK if a.quick else DEFAULT))
    if not os.access(a.worker, os.X_OK):
        raise SystemExit(f"run_train.py: no phub-worker at {a.worker}: run deploy/build.sh first")
    if a.rounds < 1 or a.iters < 1 or a.warmup < 0 or a.threads < 1:
        raise SystemExit("run_train.py: --rounds, --iters, --threads >= 1 and --warmup >= 0")
    if subprocess.run([a.python, "-c", "import torch"], capture_output=True).returncode:
        log("PyTorch is missing: installing it (deploy/install-deps.sh --torch)")
        if subprocess.run(["bash", os.path.join(ROOT, "deploy", "install-deps.sh"), "--torch"]).returncode:
            raise SystemExit("run_train.py: could not install python3-torch; run "
                             "deploy/install-deps.sh --torch as root")
    if os.getloadavg()[0] > 0.5:
        log(f"warning: load average {os.getloadavg()[0]:.1f} before the start: both systems use "
            "OpenMP, whose threads spin at barriers; another busy process on these cores slows "
            "them up to 10x (seen: ResNet-56 b8 1.2 s instead of 0.14 s). Run on an idle box.")
    os.makedirs(a.out, exist_ok=True)

    raw, summary, torch_version = [], [], "?"
    progress = Progress(len(pairs) * a.rounds)
    try:
        for model, batch in pairs:
            ours, theirs = [], []
            for rnd in range(a.rounds):
                ms = time_phub(a.worker, model, batch, a)
                ours.append(ms)
                raw.append({"model": model, "batch": batch, "system": "phub", "round": rnd, "ms": ms})
                ms, torch_version = time_torch(model, batch, a)
                theirs.append(ms)
                raw.append({"model": model, "batch": batch, "system": "pytorch", "round": rnd, "ms": ms})
                progress.step()
                log(f"{model} batch {batch} round {rnd + 1}/{a.rounds}: phub {ours[-1]:.1f} ms, "
                    f"PyTorch {theirs[-1]:.1f} ms ({progress})")
            o, t = statistics.median(ours), statistics.median(theirs)
            summary.append({"model": model, "batch": batch, "phub_ms": round(o, 1),
                            "pytorch_ms": round(t, 1), "ratio": round(o / t, 3),
                            "phub_samples_s": round(1000 * batch / o, 1),
                            "pytorch_samples_s": round(1000 * batch / t, 1),
                            "bar": ("<= 1.2 " + ("met" if o / t <= BAR else "MISSED"))
                            if model in BARS and a.device == "cpu" else "-"})
    except BenchError as e:
        log(str(e))
        return 1
    finally:
        tables.write_tsv(os.path.join(a.out, "train.tsv"), raw,
                         ["model", "batch", "system", "round", "ms"])

    keys = ["model", "batch", "phub_ms", "pytorch_ms", "ratio", "phub_samples_s",
            "pytorch_samples_s", "bar"]
    tables.write_tsv(os.path.join(a.out, "train_summary.tsv"), summary, keys)
    math = ("TF32" if a.tf32 else "strict float32") if a.device == "cuda" else "float32"
    if a.device == "cuda":
        math += (", both copy each batch from host memory" if a.host_batch else
                 ", phub-worker copies each batch from host memory, PyTorch's stays on the GPU")
    setup = (f"{machine.host_cpus()}, {a.threads} threads, device {a.device} ({math}), "
             f"PyTorch {torch_version}; {a.rounds} rounds x ({a.warmup} warm-up + {a.iters} "
             f"timed) mini-batches per system; median of the rounds' medians")
    lines = [f"Time per mini-batch (forward + backward + momentum SGD), single worker. {setup}.",
             ""] + tables.md_table(keys, [[str(r[k]) for k in keys] for r in summary])
    table = tables.write_markdown(os.path.join(a.out, "train.md"), lines)
    plot_rows = [{"model": f"{r['model']} b{r['batch']}", "system": s, "ratio": r[k] / r["pytorch_ms"]}
                 for r in summary for s, k in (("phub", "phub_ms"), ("PyTorch", "pytorch_ms"))]
    plot_tsv = os.path.join(a.out, "train_plot.tsv")
    tables.write_tsv(plot_tsv, plot_rows, ["model", "system", "ratio"])
    plots.plot_tsv_or_log(
        plot_tsv, os.path.join(a.out, "train.png"), x="model", y="ratio", group="system",
        kind="bar", annotate=True, ylabel="time per mini-batch / PyTorch's",
        title=f"phub-worker vs PyTorch, same run ({a.device}, {a.threads} threads)")
    print(table)
    log(f"wrote {a.out}/train.md, train.tsv, train_summary.tsv, train.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
