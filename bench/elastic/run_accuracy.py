#!/usr/bin/python3
"""run_accuracy.py: does an elastic job that loses a worker and gains another mid-epoch train
as well as a fixed job? (issue 41; docs/design.md "Elastic jobs")

For each seed, on loopback, phub-worker fashion-cnn on Fashion-MNIST for --epochs epochs:

  fixed     2 workers throughout (--world 2).
  elastic   --min-workers 1 --max-workers 3: ranks 0 and 1 start; at a quarter of the run rank 1
            is SIGKILLed (rank 0 goes on alone, re-sharding the data over itself) and a new
            worker starts, which joins the running job; the run ends at the same global batch
            count (the epochs are the job's, whoever trained them).
  linear    the elastic run with --lr-scaling linear: the lr is the 2-worker job's, scaled
            with each iteration's member count (halved while rank 0 is alone).

Reports rank 0's test accuracy after each epoch, the runs per seed side by side, their
differences from the fixed job, and the seed noise (the fixed runs' spread over seeds): the
elastic jobs should be within it.

  bench/elastic/run_accuracy.py --seeds 1,2        # ~9 min on 2 cores (three runs a seed)

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


def run(a, run_dir, seed, variant):
    elastic = variant != "fixed"
    tag = f"s{seed}_{variant}"
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
    if variant == "linear":
        size += ["--lr-scaling", "linear"]
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
    p.add_argument("--variants", default="fixed,elastic,linear",
                   help="fixed (always first), elastic, linear (elastic with --lr-scaling linear)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "elastic_accuracy"))
    a = p.parse_args()
    find_binaries(a)
    run_dir = outdir.with_raw(a.out)
    variants = parse_list(a.variants, str)
    if variants[0] != "fixed" or not set(variants) <= {"fixed", "elastic", "linear"}:
        p.error("--variants: fixed first, then elastic and/or linear")
    others = variants[1:]
    rows = []
    try:
        for seed in parse_list(a.seeds, int):
            runs = {v: run(a, run_dir, seed, v) for v in variants}
            for epoch in range(1, len(runs["fixed"]) + 1):
                f = runs["fixed"][epoch - 1]
                row = {"seed": seed, "epoch": epoch, "fixed": round(100 * f, 2)}
                for v in others:
                    row[v] = round(100 * runs[v][epoch - 1], 2)
                    row[f"{v}_diff"] = round(100 * (runs[v][epoch - 1] - f), 2)
                rows.append(row)
            log(f"seed {seed}: " + ", ".join(f"{v} {100 * runs[v][-1]:.2f} %" for v in variants))
    except BenchError as e:
        log(f"a run failed:\n{e}")
        return 1
    finally:
        kill_children()
        tables.write_tsv(os.path.join(a.out, "accuracy.tsv"), rows,
                         ["seed", "epoch", "fixed"] + [c for v in others for c in (v, f"{v}_diff")])
    last = [r for r in rows if r["epoch"] == a.epochs]
    noise = (max(r["fixed"] for r in last) - min(r["fixed"] for r in last)) if len(last) > 1 else None
    lines = [f"Fashion-MNIST, fashion-cnn b{a.batch}, momentum lr {a.lr}, {a.epochs} epochs: a "
             f"fixed job of 2 workers vs an elastic one that loses rank 1 (SIGKILL) and gains a "
             f"new worker at a quarter of the run (elastic: the same lr throughout; linear: "
             f"--lr-scaling linear); rank 0's test accuracy (%).", ""]
    header = ["seed", "epoch", "fixed"] + [c for v in others for c in (v, f"{v} - fixed")]
    lines += tables.md_table(header,
                             [[str(r["seed"]), str(r["epoch"]), f"{r['fixed']:.2f}"] +
                              [c for v in others
                               for c in (f"{r[v]:.2f}", f"{r[v + '_diff']:+.2f}")] for r in rows],
                             "r" * len(header))
    if noise is not None:
        lines += ["", f"Seed noise (the fixed runs' spread after epoch {a.epochs}): {noise:.2f} "
                  "points; " + "; ".join(
                      f"{v} - fixed: median {statistics.median(abs(r[v + '_diff']) for r in last):.2f}"
                      " points" for v in others) + "."]
    print(tables.write_markdown(os.path.join(a.out, "accuracy.md"), lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
