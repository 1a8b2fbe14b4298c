#!/usr/bin/python3
"""The demo's job (deploy/local/demo.sh installs and builds first): train fashion-cnn on
Fashion-MNIST with 2 workers on this box, first through a parameter server (one phubd), then
with ring allreduce, and compare: time per mini-batch, images/s, communication share (time
blocked on the exchange), test accuracy per epoch; a PNG of test accuracy vs wall-clock time.

  deploy/local/demo.py [--workers 2] [--epochs 2] [--batch 32] [--lr 0.05] [--modes ps,ring]
                       [--steps N] [--min-accuracy PCT] [--build build] [--out results/demo]

Recovery is part of the PS run (--no-kill skips it): a third of the way through, the last
worker is killed (SIGKILL) and started again with the same rank; it rejoins the running job
(phubd gives it the weights of the step to replay, its data resumes there), the others wait for
it, and its final test accuracy must equal rank 0's exactly (their weights are bitwise equal).

Each worker runs with one OpenMP thread (2 workers on 2 cores), phubd with one core. Ctrl-C
stops every process it started. Exit 1 if a process fails, the workers' accuracies differ, or
(with --min-accuracy) a mode's final test accuracy is under the floor.

--steps N is the quick run (deploy/bare-debian-check.sh uses it): every epoch is N mini-batches
per worker, over the first N x workers x batch training images instead of all 60,000; the test
set stays whole, so the accuracy printed is a real one, only of a shorter training.
"""
import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# Where Debian's dataset-fashion-mnist puts the IDX files (phub-worker's default --data-dir).
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
# PS and ring compute the same synchronous SGD from the same weights and data order; only the
# order of float additions differs, so their final test accuracies stay within a fraction of a
# point. A wider gap means one exchange delivered wrong weights.
AGREE_POINTS = 1.0
procs = []


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stop_all(*_):
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()


def start(cmd, log_path, env=None):
    f = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True)  # Ctrl-C reaches us only; we stop them
    procs.append(p)
    return p


def wait_workers(workers, logs, timeout):
    deadline = time.time() + timeout
    for r, p in enumerate(workers):
        try:
            code = p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            raise SystemExit(f"demo: worker {r} still running after {timeout} s; its log: {logs[r]}")
        if code != 0:
            sys.stdout.write(open(logs[r]).read()[-3000:])
            raise SystemExit(f"demo: worker {r} failed (exit {code}); log above and in {logs[r]}")


def make_short_train_set(images, run_dir, source):
    """A --data-dir holding the first `images` training images and labels and the whole test set.

    phub-worker has no step limit that still ends in a test accuracy (it tests at the end of each
    epoch), so the quick run shortens the epoch instead: a truncated copy of the IDX files, with
    the count in their headers rewritten (big-endian uint32 after the 4-byte magic)."""
    data_dir = os.path.join(run_dir, "data")
    os.makedirs(data_dir)
    for kind, item_bytes in (("images-idx3", 28 * 28), ("labels-idx1", 1)):
        name = f"train-{kind}-ubyte.gz"
        src = os.path.join(source, name)
        try:
            with gzip.open(src, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise SystemExit(f"demo: cannot read {src} ({e}): install dataset-fashion-mnist "
                             "(deploy/install-deps.sh does)")
        header = 16 if kind.startswith("images") else 8
        count = int.from_bytes(raw[4:8], "big")
        if images > count:
            raise SystemExit(f"demo: --steps asks for {images} training images; {src} has {count}: "
                             "lower --steps (or --batch)")
        with gzip.open(os.path.join(data_dir, name), "wb", compresslevel=1) as f:
            f.write(raw[:4] + images.to_bytes(4, "big") + raw[8:header])
            f.write(raw[header:header + images * item_bytes])
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        os.symlink(os.path.join(source, name), os.path.join(data_dir, name))
    return data_dir


def run_mode(mode, a, run_dir):
    worker_bin = os.path.join(ROOT, a.build, "worker", "phub-worker")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    comm = []
    server = None
    if mode.startswith("ps"):
        port_file = os.path.join(run_dir, f"{mode}.port")  # per mode: no stale port
        server = start([os.path.join(ROOT, a.build, "phub", "server", "phubd"), "--listen",
                        "127.0.0.1", "--port", "0", "--port-file", port_file, "--world-size",
                        str(a.workers), "--cores", "1", "--optimizer", "momentum", "--lr",
                        str(a.lr), "--one-job"], os.path.join(run_dir, f"{mode}_phubd.log"))
        for _ in range(100):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.1)
        else:
            raise SystemExit("demo: phubd did not start: " + open(os.path.join(run_dir, f"{mode}_phubd.log")).read())
        comm = ["--comm", "ps", "--ps", "127.0.0.1:" + open(port_file).read().strip()]
        if mode != "ps":  # ps-bf16, ps-fp16: the compact wire (weights too, or --wire-weights)
            comm += ["--wire", mode.split("-", 1)[1], "--wire-weights", a.wire_weights]
    else:
        rendezvous = os.path.join(run_dir, "rendezvous")
        os.makedirs(rendezvous)
        comm = ["--comm", "ring", "--rendezvous", rendezvous]
    workers, logs = [], []
    total_steps = a.epochs * (a.steps or 60000 // a.workers // a.batch)
    log_every = max(1, total_steps // 12)

    def worker_cmd(r):
        return [worker_bin, "--model", "fashion-cnn", "--batch", str(a.batch), "--data",
                "fashion-mnist", "--epochs", str(a.epochs), "--lr", str(a.lr), "--optimizer",
                "momentum", "--rank", str(r), "--world", str(a.workers), "--seed", str(a.seed),
                "--log-every", str(log_every), "--results",
                os.path.join(run_dir, f"{mode}_{r}.json"), "--device", a.device] + comm + a.data_args

    for r in range(a.workers):
        logs.append(os.path.join(run_dir, f"{mode}_worker{r}.log"))
        workers.append(start(worker_cmd(r), logs[-1], env))
    log(f"{mode}: {'phubd + ' if server else ''}{a.workers} workers started "
        f"(logs in {run_dir}); {a.epochs} epochs")
    # Recovery, shown: the last worker killed a third of the way through, and restarted.
    victim = a.workers - 1 if server and a.kill and a.workers > 1 else None
    kill_at = max(1, total_steps // 3)
    # Show rank 0's progress lines while it trains.
    shown = 0
    while workers[0].poll() is None:
        time.sleep(0.5)
        lines = open(logs[0]).read().splitlines()
        for line in lines[shown:]:
            if "step " in line or "epoch " in line:
                print(f"  {mode} rank 0: {line.split('] ', 2)[-1]}", flush=True)
        shown = len(lines)
        done = [int(l.split("step ")[1].split("/")[0]) for l in lines if "] step " in l]
        if victim is not None and done and done[-1] >= kill_at:
            workers[victim].kill()
            workers[victim].wait()
            log(f"{mode}: killed worker {victim} (SIGKILL) at about step {done[-1]} of "
                f"{total_steps}; starting it again with the same rank")
            logs[victim] = os.path.join(run_dir, f"{mode}_worker{victim}_restarted.log")
            workers[victim] = start(worker_cmd(victim), logs[victim], env)
            victim = None
    wait_workers(workers, logs, timeout=600)
    if server and a.kill and a.workers > 1:
        text = open(logs[-1]).read()
        resumed = [l.split("] ", 2)[-1] for l in text.splitlines() if "resumes the job at step" in l]
        log(f"{mode}: the restarted worker: {resumed[0] if resumed else 'did not report a resume'}")
        if not resumed:
            raise SystemExit(f"demo: the restarted worker did not rejoin; its log: {logs[-1]}")
    if server:
        server.wait(timeout=30)
    results = [json.load(open(os.path.join(run_dir, f"{mode}_{r}.json"))) for r in range(a.workers)]
    # A restarted worker reports only the epochs it finished itself: compare the last one.
    accs = {r["epochs"][-1]["test_accuracy"] for r in results}
    if len(accs) != 1:
        raise SystemExit(f"demo: {mode}: the workers' final test accuracies differ ({accs}): "
                         "their weights are not identical")
    return results[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32, help="per worker")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--modes", default="ps,ring",
                   help="ps, ring, and ps-bf16/ps-fp16 (the PS with --wire bf16/fp16)")
    p.add_argument("--wire-weights", choices=("wire", "fp32"), default="fp32",
                   help="ps-bf16/ps-fp16: the weights come back in that format too, or in fp32")
    p.add_argument("--seed", type=int, default=1,
                   help="the workers' seed (weights, data order): the same in every mode")
    p.add_argument("--steps", type=int, default=0,
                   help="quick run: N mini-batches per worker per epoch (default: whole epochs)")
    p.add_argument("--no-kill", dest="kill", action="store_false",
                   help="PS run: do not kill and restart a worker mid-training")
    p.add_argument("--min-accuracy", type=float, default=0,
                   help="exit 1 if a mode's final test accuracy (%%) is under this (default: none)")
    p.add_argument("--build", default=os.environ.get("PHUB_BUILD_DIR", "build"))
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: every worker trains on GPU 0 (cuDNN), sharing it")
    p.add_argument("--data-dir", default=FASHION_MNIST_DIR, help="the Fashion-MNIST IDX .gz files")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "demo"))
    a = p.parse_args()
    modes = a.modes.split(",")
    if a.workers < 1 or a.epochs < 1 or a.batch < 1 or a.steps < 0 or \
            any(m not in ("ps", "ps-bf16", "ps-fp16", "ring") for m in modes):
        raise SystemExit("demo: --workers, --epochs, --batch >= 1, --steps >= 0; --modes from "
                         "ps,ps-bf16,ps-fp16,ring")
    signal.signal(signal.SIGINT, lambda *_: (print("\ndemo: interrupted, stopping everything"),
                                             stop_all(), sys.exit(130)))
    signal.signal(signal.SIGTERM, lambda *_: (stop_all(), sys.exit(143)))
    os.makedirs(a.out, exist_ok=True)
    run_dir = tempfile.mkdtemp(prefix="phub-demo.")
    a.data_args = ["--data-dir", a.data_dir]
    if a.steps:
        images = a.steps * a.workers * a.batch
        a.data_args = ["--data-dir", make_short_train_set(images, run_dir, a.data_dir)]
        log(f"quick run: {a.steps} mini-batches per worker per epoch ({images} training images)")
    results = {}
    try:
        for mode in modes:
            results[mode] = run_mode(mode, a, run_dir)
    finally:
        stop_all()
    print()
    print(f"fashion-cnn on Fashion-MNIST, {a.workers} workers x batch {a.batch} "
          f"(momentum SGD, lr {a.lr}), {a.epochs} epochs"
          f"{f' of {a.steps} steps' if a.steps else ''}, this box "
          f"({os.cpu_count()} CPUs, 1 thread per worker"
          f"{', all workers on GPU 0' if a.device == 'cuda' else ''}):")
    header = ["mode", "ms / mini-batch", "images/s", "comm share"] + \
             [f"test acc. epoch {e + 1}" for e in range(a.epochs)] + ["wall time"]
    rows = []
    for mode, r in results.items():
        rows.append([mode, f"{r['median_ms']:.1f}", f"{r['samples_per_s']:.0f}",
                     f"{100 * r['comm_share']:.1f} %"]
                    + [f"{100 * e['test_accuracy']:.2f} %" for e in r["epochs"]]
                    + [f"{r['epochs'][-1]['seconds']:.0f} s"])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    with open(os.path.join(a.out, "demo.json"), "w") as f:
        json.dump(results, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for mode, r in results.items():
            ax.plot([0] + [e["seconds"] for e in r["epochs"]],
                    [10] + [100 * e["test_accuracy"] for e in r["epochs"]], marker="o", label=mode)
        ax.set_xlabel("wall-clock time (s)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"fashion-cnn, {a.workers} workers: PS vs ring")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "demo_accuracy.png"), dpi=120)
        log(f"wrote {a.out}/demo.json and demo_accuracy.png")
    except ImportError:
        log("matplotlib missing: no plot (deploy/install-deps.sh installs it)")
    if "ps" in results and "ring" in results:
        ps, ring = (100 * results[m]["epochs"][-1]["test_accuracy"] for m in ("ps", "ring"))
        if abs(ps - ring) > AGREE_POINTS:
            log(f"FAILED: PS and ring disagree: final test accuracy {ps:.2f} % vs {ring:.2f} % "
                f"(more than {AGREE_POINTS:g} points apart; they train the same model the same "
                f"way): one exchange is wrong; worker logs are in {run_dir}")
            return 1
    worst = min(e["test_accuracy"] for r in results.values() for e in r["epochs"][-1:])
    if a.min_accuracy and 100 * worst < a.min_accuracy:
        log(f"FAILED: final test accuracy {100 * worst:.2f} % is under --min-accuracy "
            f"{a.min_accuracy:g} %: training does not learn; worker logs are in {run_dir}")
        return 1
    shutil.rmtree(run_dir, ignore_errors=True)  # kept above on failure: the logs are there
    if worst < 0.85 and not a.steps:
        log(f"note: final test accuracy {100 * worst:.2f} % is under 85 %: train longer (--epochs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
