#!/usr/bin/python3
"""run_accuracy.py: does an elastic job that loses a worker and gains another mid-epoch train
as well as a fixed job? (issue 41; docs/design.md "Elastic jobs")

For each seed, on loopback, phub-worker fashion-cnn on Fashion-MNIST for --epochs epochs:

  fixed     2 workers throughout (--world 2).
  elastic   --min-workers 1 --max-workers 3: ranks 0 and 1 start; at a quarter of the run rank 1
            is SIGKILLed (rank 0 goes on alone, re-sharding the data over itself) and a new
            worker starts, which joins the running job; the run ends at the same global batch
            count (the epochs are the job's, whoever trained them).

Reports rank 0's test accuracy after each epoch, both runs per seed side by side, the
difference, and the seed noise (the fixed runs' spread over seeds): the elastic job should be
within it.

  bench/elastic/run_accuracy.py --seeds 1,2        # ~6 min on 2 cores

Writes OUT/accuracy.tsv and OUT/accuracy.md.
"""
import json
import os
import signal
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, HERE)

from benchlib import BenchError, outdir, tables  # noqa: E402
from benchlib.cli import parse_list, parser  # noqa: E402
from benchlib.log import log  # noqa: E402
from benchlib.procs import kill_children, start, wait_all, wait_port_file  # noqa: E402
from run_elastic import find_binaries, wait_step  # noqa: E402

TRAIN_IMAGES = 60000


def run(a, run_dir, seed, elastic):
    tag = f"s{seed}_{'elastic' if elastic else 'fixed'}"
    port_file = os.path.join(run_dir, f"{tag}_port")
    log_path = os.path.join(run_dir, f"{tag}_phubd.log")
    proc = start([a.phubd, "--listen", "127.0.0.1", "--port", "0", "--port-file", port_file,
                  "--max-world-size", "3", "--cores", "2", "--one-job", "--no-pin"], log_path)
    port = wait_port_file(port_file, proc, "phubd", log_path)
    common = [a.worker, "--comm", "ps", "--ps", f"127.0.0.1:{port}", "--model", "fashion-cnn",
              "--batch", str(a.batch), "--data", "fashion-mnist", "--epochs", str(a.epochs),
              "--seed", str(seed), "--optimizer", "momentum", "--lr", str(a.lr),
              "--reconnect-timeout-ms", "0", "--log-every", "1"]
    size = (["--min-workers", "1", "--max-workers", "3", "--start-workers", "2"] if elastic
            else ["--world", "2"])
    procs, logs = {}, {}

    def launch(rank):
        logs[rank] = os.path.join(run_dir, f"{tag}_w{rank}.log")
        out = os.path.join(run_dir, f"{tag}_w{rank}.json")
        procs[rank] = start(common + size + ["--rank", str(rank), "--results", out], logs[rank],
                            {"OMP_NUM_THREADS": "1"})

    launch(0)
    launch(1)
    if elastic:
        # A quarter of the run's iterations (2 workers: TRAIN_IMAGES / (2 x batch) per epoch).
        quarter = a.epochs * TRAIN_IMAGES // (2 * a.batch) // 4
        wait_step(logs[0], procs[0], quarter, a.timeout)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        launch(2)
        waited = [0, 2]
    else:
        waited = [0, 1]
    wait_all([(f"{tag} rank {r}", procs[r], logs[r]) for r in waited], a.timeout)
    result = json.load(open(os.path.join(run_dir, f"{tag}_w0.json")))
    return [e["test_accuracy"] for e in result["epochs"]]


def main():
    p = parser(__doc__, epilog=False)
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "elastic_accuracy"))
    a = p.parse_args()
    find_binaries(a)
    run_dir = outdir.with_raw(a.out)
    rows = []
    try:
        for seed in parse_list(a.seeds, int):
            fixed = run(a, run_dir, seed, elastic=False)
            elastic = run(a, run_dir, seed, elastic=True)
            for epoch, (f, e) in enumerate(zip(fixed, elastic), start=1):
                rows.append({"seed": seed, "epoch": epoch, "fixed": round(100 * f, 2),
                             "elastic": round(100 * e, 2), "difference": round(100 * (e - f), 2)})
            log(f"seed {seed}: fixed {100 * fixed[-1]:.2f} %, elastic {100 * elastic[-1]:.2f} %")
    except BenchError as e:
        log(f"a run failed:\n{e}")
        return 1
    finally:
        kill_children()
        tables.write_tsv(os.path.join(a.out, "accuracy.tsv"), rows,
                         ["seed", "epoch", "fixed", "elastic", "difference"])
    last = [r for r in rows if r["epoch"] == a.epochs]
    noise = (max(r["fixed"] for r in last) - min(r["fixed"] for r in last)) if len(last) > 1 else None
    lines = [f"Fashion-MNIST, fashion-cnn b{a.batch}, momentum lr {a.lr}, {a.epochs} epochs: a "
             f"fixed job of 2 workers vs an elastic one that loses rank 1 (SIGKILL) and gains a "
             f"new worker at a quarter of the run; rank 0's test accuracy (%).", ""]
    lines += tables.md_table(["seed", "epoch", "fixed", "elastic", "elastic - fixed"],
                             [[str(r["seed"]), str(r["epoch"]), f"{r['fixed']:.2f}",
                               f"{r['elastic']:.2f}", f"{r['difference']:+.2f}"] for r in rows],
                             "rrrrr")
    if noise is not None:
        diffs = [abs(r["difference"]) for r in last]
        lines += ["", f"Seed noise (the fixed runs' spread after epoch {a.epochs}): {noise:.2f} "
                  f"points; elastic - fixed: median {statistics.median(diffs):.2f} points."]
    print(tables.write_markdown(os.path.join(a.out, "accuracy.md"), lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
