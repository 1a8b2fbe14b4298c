#!/usr/bin/python3
"""run_recipe.py: a real recipe through phubd's optimizer against DDP + gloo, step for step.

ResNet-18 on Fashion-MNIST (examples/torch_ddp_phub.py), momentum SGD with weight decay, a
linear warm-up then a cosine decay of the learning rate (torch's LinearLR + CosineAnnealingLR,
stepped every iteration), N ranks on loopback, the same seed (initial weights, data order):
once with phub.torch.ServerOptimizer (phubd steps with each iteration's lr) and once with DDP +
gloo and torch's own optimizer (the reference, same run). Reports rank 0's loss at every step of
both, the largest difference, the test accuracy after each epoch, and the time per mini-batch
and its ratio.

  bench/torch/run_recipe.py                       # N = 2, 4096 images, 2 epochs: ~10 min
  bench/torch/run_recipe.py --train-size 60000 --epochs 1

Writes OUT/recipe.tsv (every step), OUT/recipe.md and OUT/recipe_loss.png. Both runs share
this box's CPUs: read the times as a ratio of the same invocation.
"""
import json
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from benchlib import BenchError, machine, outdir, plots, tables  # noqa: E402
from benchlib.cli import parser  # noqa: E402
from benchlib.log import log  # noqa: E402
from benchlib.procs import kill_children, start, wait_all, wait_port_file  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "torch_ddp_phub.py")
PYTHON = "/usr/bin/python3"  # Debian's, the one python3-torch belongs to
BACKENDS = ("phub-optimizer", "gloo")


def free_port():
    """A port the kernel just gave out on loopback (DDP's rendezvous; two runs of this script,
    or run_torch.py's fixed port, do not meet)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one(a, backend, run_dir, master_port):
    """One training run of `backend`; rank 0's results (losses, accuracy, median_ms)."""
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.path.join(a.build, "python"),
           "WORLD_SIZE": str(a.n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port),
           "GLOO_SOCKET_IFNAME": "lo"}
    procs = []
    if backend.startswith("phub"):
        port_file = os.path.join(run_dir, f"{backend}_port")
        log_path = os.path.join(run_dir, f"{backend}_phubd.log")
        proc = start([a.phubd, "--listen", "127.0.0.1", "--port", "0", "--port-file", port_file,
                      "--max-world-size", str(a.n), "--cores", "2", "--one-job",
                      "--log-level", "warn"], log_path)
        procs.append(("phubd", proc, log_path))
        env["PHUB_ADDRESS"] = f"127.0.0.1:{wait_port_file(port_file, proc, 'phubd', log_path)}"
    out = os.path.join(run_dir, f"{backend}.json")
    for r in range(a.n):
        argv = [PYTHON, EXAMPLE, "--backend", backend, "--model", "resnet18", "--batch",
                str(a.batch), "--epochs", str(a.epochs), "--lr", str(a.lr), "--seed", str(a.seed),
                "--train-size", str(a.train_size), "--test-size", str(a.test_size),
                "--lr-schedule", "cosine", "--warmup-iters", str(a.warmup_iters),
                "--threads", "1", "--warmup", "2"] + (["--results", out] if r == 0 else [])
        path = os.path.join(run_dir, f"{backend}_rank{r}.log")
        procs.append((f"{backend} rank {r}", start(argv, path, {**env, "RANK": str(r),
                                                                 "LOCAL_RANK": str(r)}), path))
    try:
        wait_all(procs, a.timeout)
    finally:
        kill_children()
    with open(out) as f:
        return json.load(f)


def plot_losses(results, path):
    """Both runs' loss per step on one axis (a line each; the plot_tsv helper draws steps as
    categories, far too wide for 100+ steps)."""
    plt = plots.import_pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    for backend, label in (("phub-optimizer", "ServerOptimizer (phubd steps)"),
                           ("gloo", "DDP + gloo (torch's SGD)")):
        losses = results[backend]["losses"]
        ax.plot(range(1, len(losses) + 1), losses, label=label, linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("rank 0's training loss")
    ax.set_title("ResNet-18, Fashion-MNIST, warm-up + cosine")
    ax.legend()
    plots.save(plt, fig, path, 120)
    log(f"wrote {path}")


def main():
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=2, help="ranks")
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-size", type=int, default=4096)
    p.add_argument("--test-size", type=int, default=2000)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--warmup-iters", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "recipe"))
    a = p.parse_args()
    a.phubd = os.path.join(a.build, "phub", "server", "phubd")
    if not os.access(a.phubd, os.X_OK):
        raise SystemExit(f"run_recipe.py: {a.phubd} missing: run deploy/build.sh first")
    run_dir = outdir.with_raw(a.out)
    start_load = machine.load_average()
    results = {}
    try:
        for backend in BACKENDS:
            log(f"{backend}: training ({a.epochs} epochs of {a.train_size} images, N={a.n})")
            results[backend] = run_one(a, backend, run_dir, free_port())
            log(f"{backend}: {results[backend]['median_ms']:.1f} ms per mini-batch, accuracy "
                f"{results[backend]['accuracy']}")
    except BenchError as e:
        log(f"a run failed:\n{e}")
        return 1

    ours, ref = results["phub-optimizer"], results["gloo"]
    if len(ours["losses"]) != len(ref["losses"]):
        log(f"the runs took {len(ours['losses'])} and {len(ref['losses'])} steps")
        return 1
    rows = [{"step": i + 1, "loss_phub_optimizer": f"{x:.6f}", "loss_gloo": f"{y:.6f}",
             "difference": f"{x - y:.6f}"}
            for i, (x, y) in enumerate(zip(ours["losses"], ref["losses"]))]
    tsv = os.path.join(a.out, "recipe.tsv")
    tables.write_tsv(tsv, rows, ["step", "loss_phub_optimizer", "loss_gloo", "difference"])
    worst = max(abs(x - y) for x, y in zip(ours["losses"], ref["losses"]))
    every = max(1, len(rows) // 12)
    shown = [r for r in rows if r["step"] % every == 0 or r["step"] in (1, len(rows))]
    lines = [f"ResNet-18, Fashion-MNIST (first {a.train_size} training images, {a.test_size} "
             f"test), N = {a.n} on loopback, batch {a.batch} per rank, {a.epochs} epochs = "
             f"{len(rows)} steps; SGD momentum 0.9, weight decay 5e-4, lr {a.lr} with a "
             f"{a.warmup_iters}-step linear warm-up from 0.01 x lr and a cosine decay to 0; seed "
             f"{a.seed}. {machine.describe(start_load)}", ""]
    lines += tables.md_table(["step", "loss, ServerOptimizer", "loss, DDP + gloo", "difference"],
                             [[str(r["step"]), r["loss_phub_optimizer"], r["loss_gloo"],
                               r["difference"]] for r in shown], "rrrr")
    lines += ["", f"Largest |loss difference| over all {len(rows)} steps: {worst:.6f}.", ""]
    lines += tables.md_table(
        ["backend", "test accuracy per epoch", "ms / mini-batch (median)", "vs gloo"],
        [[b, ", ".join(f"{100 * x:.2f} %" for x in results[b]["accuracy"]),
          f"{results[b]['median_ms']:.1f}",
          f"{ref['median_ms'] / results[b]['median_ms']:.2f}×"] for b in BACKENDS], "lrrr")
    tables.write_markdown(os.path.join(a.out, "recipe.md"), lines)
    plot_losses(results, os.path.join(a.out, "recipe_loss.png"))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
