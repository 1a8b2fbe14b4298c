#!/usr/bin/python3
"""run_recipe.py: a real recipe through phubd's optimizer against DDP + gloo, step for step.

ResNet-18 on Fashion-MNIST (examples/torch_ddp_phub.py), momentum SGD with weight decay, a
linear warm-up then a cosine decay of the learning rate (torch's LinearLR + CosineAnnealingLR,
stepped every iteration), N ranks on loopback, the same seed (initial weights, data order) for
every run: phub-optimizer (phub.torch.ServerOptimizer: phubd steps the weights with each
iteration's lr), gloo (DDP + gloo and torch's own SGD: the reference, same invocation) and, by
default, phub (DDP's hook: phubd averages, torch's SGD steps locally), the control that tells
the exchange's part of a difference from the optimizer's. Reports every step's loss (the mean
over ranks; rank 0's in the TSV too) and lr, the first step where each run leaves gloo's, the
largest difference (also of rank 0's own loss), the test accuracy after each epoch and the time
per mini-batch (median of the timed steps) with its ratio to gloo's.

  bench/torch/run_recipe.py                       # N = 2, 4096 images, 2 epochs: ~8 min
  bench/torch/run_recipe.py --train-size 60000 --epochs 1 --backends phub-optimizer,gloo

Writes OUT/recipe.tsv (every step), OUT/recipe.md and OUT/recipe_loss.png (without matplotlib:
no PNG, said in the log). All runs share this box's CPUs, one after the other: read the times
as a ratio of the same invocation.
"""
import json
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from benchlib import BenchError, machine, outdir, plots, tables  # noqa: E402
from benchlib.cli import parse_list, parser  # noqa: E402
from benchlib.log import log  # noqa: E402
from benchlib.procs import kill_children, start, wait_all, wait_port_file  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "torch_ddp_phub.py")
PYTHON = "/usr/bin/python3"  # Debian's, the one python3-torch belongs to
LABELS = {"phub-optimizer": "ServerOptimizer (phubd steps)",
          "phub": "hook + torch's SGD (phubd averages)",
          "phub-c10d": "DDP over \"phub\" + torch's SGD",
          "gloo": "DDP + gloo (torch's SGD)"}


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


def plot_losses(results, backends, path):
    """Every run's mean loss per step on one axis (a line each; the plot_tsv helper draws steps
    as categories, far too wide for 100+ steps)."""
    plt = plots.import_pyplot()
    if plt is None:
        log(f"no {path}: matplotlib missing (apt-get install python3-matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    for b in backends:
        losses = results[b]["losses_mean"]
        ax.plot(range(1, len(losses) + 1), losses, label=LABELS[b], linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mean over ranks)")
    ax.set_title("ResNet-18, Fashion-MNIST, warm-up + cosine")
    ax.legend()
    plots.save(plt, fig, path, 120)
    log(f"wrote {path}")


def first_difference(xs, ys):
    """The 1-based step where xs and ys first differ (None: equal throughout)."""
    return next((i + 1 for i, (x, y) in enumerate(zip(xs, ys)) if x != y), None)


def difference(x, y):
    """x - y as a cell: 0 where equal to the last bit, else 3 significant digits (rounding-sized
    differences show)."""
    return "0" if x == y else f"{x - y:.2e}"


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
    p.add_argument("--backends", default="phub-optimizer,phub,gloo",
                   help="runs, in this order; gloo (the reference) is added if left out")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "recipe"))
    a = p.parse_args()
    backends = parse_list(a.backends, str)
    unknown = [b for b in backends if b not in LABELS]
    if unknown:
        raise SystemExit(f"run_recipe.py: --backends {','.join(unknown)}: use "
                         f"{', '.join(LABELS)}")
    if "gloo" not in backends:
        backends.append("gloo")
    a.phubd = os.path.join(a.build, "phub", "server", "phubd")
    if not os.access(a.phubd, os.X_OK):
        raise SystemExit(f"run_recipe.py: {a.phubd} missing: build it first (deploy/build.sh, "
                         f"or ninja -C {a.build} phubd phub_python)")
    run_dir = outdir.with_raw(a.out)
    start_load = machine.load_average()
    results = {}
    try:
        for backend in backends:
            log(f"{backend}: training ({a.epochs} epochs of {a.train_size} images, N={a.n})")
            results[backend] = run_one(a, backend, run_dir, free_port())
            log(f"{backend}: {results[backend]['median_ms']:.1f} ms per mini-batch, accuracy "
                f"{results[backend]['accuracy']}")
    except BenchError as e:
        log(f"a run failed:\n{e}")
        return 1

    ref = results["gloo"]
    others = [b for b in backends if b != "gloo"]
    steps = len(ref["losses"])
    for b in others:
        if len(results[b]["losses"]) != steps:
            log(f"{b} took {len(results[b]['losses'])} steps and gloo {steps}: the runs are not "
                f"the same recipe (see the logs in {run_dir})")
            return 1
        if results[b]["lrs"] != ref["lrs"]:
            step = first_difference(results[b]["lrs"], ref["lrs"])
            log(f"{b}'s lr differs from gloo's at step {step}: the schedule did not run the same "
                f"on both (examples/torch_ddp_phub.py make_schedule)")
            return 1
    keys = ["step", "lr"]
    rows = []
    for i in range(steps):
        row = {"step": i + 1, "lr": f"{ref['lrs'][i]:.6g}"}
        for b in backends:
            row[f"loss_{b}"] = f"{results[b]['losses_mean'][i]:.6f}"
            row[f"loss_{b}_rank0"] = f"{results[b]['losses'][i]:.6f}"
        for b in others:
            row[f"diff_{b}"] = difference(results[b]["losses_mean"][i], ref["losses_mean"][i])
        rows.append(row)
    keys += [f"loss_{b}" for b in backends] + [f"loss_{b}_rank0" for b in backends]
    keys += [f"diff_{b}" for b in others]
    tsv = os.path.join(a.out, "recipe.tsv")
    tables.write_tsv(tsv, rows, keys)

    every = max(1, steps // 12)
    shown = [r for r in rows if r["step"] % every == 0 or r["step"] in (1, 2, 3, steps)]
    lines = [f"ResNet-18, Fashion-MNIST (first {a.train_size} training images, {a.test_size} "
             f"test), N = {a.n} on loopback, batch {a.batch} per rank, {a.epochs} epochs = "
             f"{steps} steps, --threads 1 per rank; SGD momentum 0.9, weight decay 5e-4, lr "
             f"{a.lr} with a {a.warmup_iters}-step linear warm-up from 0.01 x lr and a cosine "
             f"decay to 0; seed {a.seed}. Loss: the mean over the ranks' mini-batches. "
             f"{machine.describe(start_load)}", ""]
    head = ["step", "lr"] + [f"loss, {LABELS[b]}" for b in backends]
    head += [f"{b} − gloo" for b in others]
    lines += tables.md_table(head, [[str(r["step"]), r["lr"]] +
                                    [r[f"loss_{b}"] for b in backends] +
                                    [r[f"diff_{b}"] for b in others] for r in shown],
                             "r" * len(head))
    lines += ["", f"The lr was the same in every run at every step ({steps} steps).", ""]
    summary = []
    for b in backends:
        r = results[b]
        if b == "gloo":
            first = worst = worst0 = "(reference)"
        else:
            step = first_difference(r["losses_mean"], ref["losses_mean"])
            first = "none: equal throughout" if step is None else str(step)
            worst = f"{max(abs(x - y) for x, y in zip(r['losses_mean'], ref['losses_mean'])):.2e}"
            worst0 = f"{max(abs(x - y) for x, y in zip(r['losses'], ref['losses'])):.2e}"
        summary.append([LABELS[b], first, worst, worst0,
                        ", ".join(f"{100 * x:.2f} %" for x in r["accuracy"]),
                        f"{r['median_ms']:.1f} ({r['steps']} steps)",
                        f"{ref['median_ms'] / r['median_ms']:.2f}×"])
    lines += tables.md_table(["run", "first step whose loss differs from gloo's",
                              "largest difference from gloo's loss (mean over ranks)", "the same, rank 0's loss",
                              "test accuracy per epoch", "ms / mini-batch (median)",
                              "speed vs gloo"], summary, "lrrrrrr")
    tables.write_markdown(os.path.join(a.out, "recipe.md"), lines)
    plot_losses(results, backends, os.path.join(a.out, "recipe_loss.png"))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
