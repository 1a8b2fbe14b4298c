#!/usr/bin/python3
"""The demo's job (deploy/local/demo.sh installs and builds first): train fashion-cnn on
Fashion-MNIST through a parameter server (one phubd) and with ring allreduce, in two places, and
compare them: time per mini-batch, images/s, communication share (time blocked on the
exchange), test accuracy per epoch; one table and one PNG of test accuracy vs wall-clock time.

  deploy/local/demo.py [--workers 2] [--epochs 2] [--batch 32] [--lr 0.05] [--modes ps,ring]
                       [--steps N] [--no-rack] [--rack-workers 4] [--rack-batch 64]
                       [--rack-rate 1gbit] [--rack-epochs 2] [--rack-steps 150] [--rack-modes M]
                       [--min-accuracy PCT] [--build build] [--out results/demo]

The places:
  pbox rack  (first; needs root) the emulated PBox rack of deploy/netns/rack.sh: phubd's host
             with a link of N x B, N = 4 worker hosts with B = 1 Gbit/s each, every process in
             its host's network namespace; modes ps, ps-bf16 (bf16 gradients, bf16 changes of
             the weights back) and ring. fashion-cnn's 13 MB of gradients take S/B = 105 ms a step through
             the PS and 2(N-1)/N x S/B = 157 ms round the ring (the links alone;
             bench/topo/topology.py): the exchange is half the step or more, and the PS host's
             N x B link is what makes the PS the faster of the two. Torn down when its runs
             end, on an error and on Ctrl-C.
  loopback   phubd and --workers workers on 127.0.0.1, as before the rack existed; here the
             exchange is memory copies and the workers' compute dominates.
Without root, ip/tc, or with another rack up (a benchmark's: not ours to tear down), or when
rack.sh up fails, the demo says why and runs on loopback only (--no-rack: always).

Time: about 5 minutes on 2 cores after the build. With the rack, both places train shortened
epochs (--rack-steps 150, --steps 500; below) so that the whole demo stays there; on loopback
only, whole epochs (as many as --epochs).

Recovery is part of the loopback PS run (--no-kill skips it): a third of the way through, the
last worker is killed (SIGKILL) and started again with the same rank; it rejoins the running
job (phubd gives it the weights of the step to replay, its data resumes there), the others wait
for it, and its final test accuracy must equal rank 0's exactly (their weights are bitwise
equal).

Each worker runs with one OpenMP thread, phubd with one core. Ctrl-C stops every process it
started (and tears the rack down). Exit 1 if a process fails, the workers' accuracies differ, PS
and ring of one place end more than AGREE_POINTS apart, or (with --min-accuracy) a run's final
test accuracy is under the floor.

--steps N is the quick run (deploy/bare-debian-check.sh uses it): every epoch is N mini-batches
per worker, over the first N x workers x batch training images instead of all 60,000; the test
set stays whole, so the accuracy printed is a real one, only of a shorter training.
--rack-steps is the same on the rack (0: whole epochs).
"""
import argparse
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# The emulated rack is the benchmarks': rack.sh through bench/topo/topology.py, and the
# loopback/rack "net" (an address and a command wrapper per host) of bench/exchange/nets.py.
sys.path.insert(0, os.path.join(ROOT, "bench", "topo"))
sys.path.insert(0, os.path.join(ROOT, "bench", "exchange"))
import nets  # noqa: E402
import topology  # noqa: E402

# Where Debian's dataset-fashion-mnist puts the IDX files (phub-worker's default --data-dir).
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
# PS and ring compute the same synchronous SGD from the same weights and data order; only the
# order of float additions differs, so their final test accuracies stay within a fraction of a
# point. A wider gap means one exchange delivered wrong weights.
AGREE_POINTS = 1.0
# Loopback epochs beside the rack: 500 mini-batches of 2 x 32 images (32,000 images, 0.53 of an
# epoch), so loopback's two runs take about 1.5 minutes instead of 4 and the rack's three fit
# beside them (2026-11-26, this 2-core VM: 4.5 minutes in all when quiet).
LOOPBACK_STEPS_BESIDE_RACK = 500
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


class Place:
    """Where a set of modes runs: a net (nets.LoopbackNet, or nets.RackNet once the rack is up)
    and the job run there: workers, batch per worker, epochs, steps per epoch (0: whole), modes,
    whether the PS run shows recovery. results: mode -> rank 0's --results record."""

    def __init__(self, key, workers, batch, epochs, steps, modes, kill, rate=None):
        self.key, self.workers, self.batch, self.epochs = key, workers, batch, epochs
        self.steps, self.modes, self.kill, self.rate = steps, modes, kill, rate
        self.net = nets.LoopbackNet(workers) if key == "loopback" else None
        self.data_args = []
        self.results = {}
        self.parameters = None  # the model's parameter count, from rank 0's log
        self.recovery = None  # what the killed and restarted worker said

    def name(self):
        return "loopback" if self.key == "loopback" else "pbox rack"

    def where(self):
        """The table's "where" column: the place, N x batch per worker, the link B."""
        place = f"{self.name()} N={self.workers} x b{self.batch}"
        if self.key == "loopback":
            return place
        return f"{place} at {topology.parse_rate(self.rate) / 1e9:g} Gbit/s"

    def work(self):
        """What each run trained."""
        epochs = f"{self.epochs} epoch{'s' if self.epochs > 1 else ''}"
        if not self.steps:
            return epochs
        return (f"{epochs} of {self.steps} mini-batches per worker "
                f"({self.steps * self.workers * self.batch:,} training images)")


def wait_workers(workers, logs, timeout):
    deadline = time.time() + timeout
    for r, p in enumerate(workers):
        try:
            code = p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            raise SystemExit(f"demo: worker {r} still running after {timeout} s; "
                             f"its log: {logs[r]}")
        if code != 0:
            sys.stdout.write(open(logs[r]).read()[-3000:])
            raise SystemExit(f"demo: worker {r} failed (exit {code}); "
                             f"log above and in {logs[r]}")


def make_short_train_set(images, data_dir, source):
    """A --data-dir holding the first `images` training images and labels and the whole test set.

    phub-worker has no step limit that still ends in a test accuracy (it tests at the end of each
    epoch), so the quick run shortens the epoch instead: a truncated copy of the IDX files, with
    the count in their headers rewritten (big-endian uint32 after the 4-byte magic)."""
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
            raise SystemExit(f"demo: {images} training images asked for (steps x workers x "
                             f"batch); {src} has {count}: lower --steps/--rack-steps (or the "
                             "batch)")
        with gzip.open(os.path.join(data_dir, name), "wb", compresslevel=1) as f:
            f.write(raw[:4] + images.to_bytes(4, "big") + raw[8:header])
            f.write(raw[header:header + images * item_bytes])
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        os.symlink(os.path.join(source, name), os.path.join(data_dir, name))
    return data_dir


def start_phubd(mode, place, a, run_dir):
    """phubd on the PS host; returns (process, HOST:PORT the workers connect to)."""
    tag = f"{place.key}_{mode}"
    port_file = os.path.join(run_dir, f"{tag}.port")  # per run: no stale port
    log_path = os.path.join(run_dir, f"{tag}_phubd.log")
    host = place.net.ip("ps")
    server = start(place.net.wrap("ps", [
        os.path.join(ROOT, a.build, "phub", "server", "phubd"), "--listen", host, "--port", "0",
        "--port-file", port_file, "--max-world-size", str(place.workers), "--cores", "1",
        "--optimizer", "momentum", "--lr", str(a.lr), "--one-job"] + place.net.phubd_access()),
        log_path)
    for _ in range(100):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return server, f"{host}:{open(port_file).read().strip()}"
        if server.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"demo: phubd did not start on {place.name()} (its log, {log_path}):\n"
                     + open(log_path).read())


def run_mode(mode, place, a, run_dir):
    worker_bin = os.path.join(ROOT, a.build, "worker", "phub-worker")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    tag = f"{place.key}_{mode}"
    server = None
    if mode.startswith("ps"):
        server, address = start_phubd(mode, place, a, run_dir)
        comm = ["--comm", "ps", "--ps", address]
        if mode != "ps":  # ps-bf16, ps-fp16: the compact wire (weights too, or --wire-weights)
            comm += ["--wire", mode.split("-", 1)[1], "--wire-weights", a.wire_weights]
    else:
        rendezvous = os.path.join(run_dir, f"{tag}_rendezvous")
        os.makedirs(rendezvous)
        comm = ["--comm", "ring", "--rendezvous", rendezvous]
    workers, logs = [], []
    total_steps = place.epochs * (place.steps or 60000 // place.workers // place.batch)
    log_every = max(1, total_steps // 12)

    def worker_cmd(r):
        host = f"w{r}"
        listen = ["--listen-host", place.net.ip(host)] if mode == "ring" else []
        return place.net.wrap(host, [
            worker_bin, "--model", "fashion-cnn", "--batch", str(place.batch), "--data",
            "fashion-mnist", "--epochs", str(place.epochs), "--lr", str(a.lr), "--optimizer",
            "momentum", "--rank", str(r), "--world", str(place.workers), "--seed", str(a.seed),
            "--log-every", str(log_every), "--results",
            os.path.join(run_dir, f"{tag}_{r}.json"), "--device", a.device]
            + comm + listen + place.data_args)

    for r in range(place.workers):
        logs.append(os.path.join(run_dir, f"{tag}_worker{r}.log"))
        workers.append(start(worker_cmd(r), logs[-1], env))
    log(f"{place.name()} {mode}: {'phubd + ' if server else ''}{place.workers} workers started "
        f"(logs in {run_dir}); {place.work()}")
    # Recovery, shown: the last worker killed a third of the way through, and restarted.
    show_kill = server and place.kill and place.workers > 1
    victim = place.workers - 1 if show_kill else None
    kill_at = max(1, total_steps // 3)
    killed_at = None
    # Show rank 0's progress lines while it trains.
    shown = 0
    while workers[0].poll() is None:
        time.sleep(0.5)
        lines = open(logs[0]).read().splitlines()
        for line in lines[shown:]:
            if "step " in line or "epoch " in line:
                print(f"  {place.name()} {mode} rank 0: {line.split('] ', 2)[-1]}", flush=True)
        shown = len(lines)
        done = [int(l.split("step ")[1].split("/")[0]) for l in lines if "] step " in l]
        if victim is not None and done and done[-1] >= kill_at:
            workers[victim].kill()
            workers[victim].wait()
            killed_at = done[-1]
            log(f"{place.name()} {mode}: killed worker {victim} (SIGKILL) at about step "
                f"{done[-1]} of {total_steps}; starting it again with the same rank")
            logs[victim] = os.path.join(run_dir, f"{tag}_worker{victim}_restarted.log")
            workers[victim] = start(worker_cmd(victim), logs[victim], env)
            victim = None
    wait_workers(workers, logs, timeout=600)
    if show_kill:
        text = open(logs[-1]).read()
        resumed = [l.split("] ", 2)[-1] for l in text.splitlines()
                   if "resumes the job at step" in l]
        log(f"{place.name()} {mode}: the restarted worker: "
            f"{resumed[0] if resumed else 'did not report a resume'}")
        if not resumed:
            raise SystemExit(f"demo: the restarted worker did not rejoin; its log: {logs[-1]}")
        place.recovery = (f"{mode}: worker {place.workers - 1} killed at about step {killed_at} "
                          f"of {total_steps} and restarted: {resumed[0].split('] ')[-1]}")
    if server:
        server.wait(timeout=30)
    counted = re.search(r"(\d+) parameters", open(logs[0]).read())
    place.parameters = int(counted.group(1)) if counted else place.parameters
    results = [json.load(open(os.path.join(run_dir, f"{tag}_{r}.json")))
               for r in range(place.workers)]
    # A restarted worker reports only the epochs it finished itself: compare the last one.
    accs = {r["epochs"][-1]["test_accuracy"] for r in results}
    if len(accs) != 1:
        raise SystemExit(f"demo: {place.name()} {mode}: the workers' final test accuracies differ "
                         f"({accs}): their weights are not identical")
    return results[0]


def rack_unavailable(a):
    """Why the demo will not try to build the rack here, or None."""
    if a.no_rack:
        return "--no-rack given"
    problem = nets.rack_problem(otherwise=None)  # root, ip and tc
    if problem:
        return problem
    up = nets.racks_up()
    if up:
        return (f"another rack is up ({' '.join(up)}): a benchmark may be using it, and "
                "rack.sh up would tear it down; `sudo deploy/netns/rack.sh down` if it is stale")
    return None


def tear_down_rack():
    """rack.sh down: stops what is left in the namespaces, deletes them. Ctrl-C is ignored
    meanwhile, so that a second one cannot leave the rack half up."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        topology.down()
    except (subprocess.CalledProcessError, OSError) as e:
        log(f"demo: tearing the rack down failed ({e}): run `sudo deploy/netns/rack.sh down`")
    finally:
        signal.signal(signal.SIGINT, old)


def prepare_data(place, a, run_dir):
    """The place's --data-dir: Fashion-MNIST, or the first steps x workers x batch training
    images of it when its epochs are shortened."""
    place.data_args = ["--data-dir", a.data_dir]
    if place.steps:
        images = place.steps * place.workers * place.batch
        place.data_args = ["--data-dir", make_short_train_set(
            images, os.path.join(run_dir, f"{place.key}_data"), a.data_dir)]
        log(f"{place.name()}: epochs of {place.steps} mini-batches per worker, over the first "
            f"{images} training images")


def run_place(place, a, run_dir):
    """Every mode of one place. On the rack: rack.sh up first, down at the end (on every way
    out). Returns None, or why the rack could not be built (its runs are then skipped)."""
    up = f"deploy/netns/rack.sh up --topology pbox --workers {place.workers} --rate {place.rate}"
    try:
        if place.key != "loopback":
            log(f"building the emulated rack: {up}")
            try:
                place.net = nets.RackNet("pbox", place.workers, place.rate)
            except subprocess.CalledProcessError as e:
                return f"`{up}` failed with exit {e.returncode}, saying why above"
            except OSError as e:
                return f"`{up}` could not run: {e}"
        prepare_data(place, a, run_dir)
        for mode in place.modes:
            place.results[mode] = run_mode(mode, place, a, run_dir)
        return None
    finally:
        stop_all()
        if place.key != "loopback":
            tear_down_rack()


def print_table(places, a, rack_note):
    """One Markdown table, every place's runs, and under it what each place shows."""
    ran = [p for p in places if p.results]
    work = "; ".join(f"{p.name()} {p.work()}" for p in ran)
    short = " (epochs shortened by --steps/--rack-steps; the test set is whole)" \
        if any(p.steps for p in ran) else ""
    print()
    print(f"fashion-cnn on Fashion-MNIST (momentum SGD, lr {a.lr}), this box "
          f"({os.cpu_count()} CPUs, 1 thread per worker"
          f"{', all workers on GPU 0' if a.device == 'cuda' else ''}); {work}{short}"
          f"{f'; loopback only: {rack_note}' if rack_note else ''}:")
    epochs = max(p.epochs for p in ran)
    header = ["where", "mode", "ms / mini-batch", "images/s", "comm share"] + \
             [f"test acc. epoch {e + 1}" for e in range(epochs)] + ["wall time"]
    rows = []
    for p in ran:
        for mode, r in p.results.items():
            accs = [f"{100 * e['test_accuracy']:.2f} %" for e in r["epochs"]]
            rows.append([p.where(), mode, f"{r['median_ms']:.1f}", f"{r['samples_per_s']:.0f}",
                         f"{100 * r['comm_share']:.1f} %"] + accs + ["–"] * (epochs - len(accs))
                        + [f"{r['epochs'][-1]['seconds']:.0f} s"])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    print()
    for p in ran:
        print(f"- {p.where()}: " + "; ".join(story(p, a)))


def story(p, a):
    """What one place's rows say: PS against ring, the compact wire against the PS, what the
    links alone allow (on the rack), the recovery (loopback)."""
    said = []
    res = p.results
    if "ps" in res and "ring" in res:
        said.append(f"ps {res['ps']['samples_per_s'] / res['ring']['samples_per_s']:.2f}x the "
                    f"ring's images/s (comm share {100 * res['ps']['comm_share']:.0f} % vs "
                    f"{100 * res['ring']['comm_share']:.0f} %)")
    for mode in ("ps-bf16", "ps-fp16"):
        if mode in res and "ps" in res:
            wire = mode.split("-")[1]
            weights = f"{wire} weights' changes back" if a.wire_weights == "wire" else \
                "fp32 weights back"
            said.append(f"{mode} {res[mode]['samples_per_s'] / res['ps']['samples_per_s']:.2f}x "
                        f"ps's images/s ({wire} gradients, {weights})")
    if p.key != "loopback" and p.parameters:
        # The links alone (bench/topo/topology.py): the PS host's N x B link lets every worker
        # move S each way at once; the ring sends 2(N-1)/N x S through every link.
        size, b = 4 * p.parameters, topology.parse_rate(p.rate)
        ps_ms = 1000 * topology.pbox_ps_limit_s(size, p.workers, b)
        ring_ms = 1000 * topology.ring_limit_s(size, p.workers, b)
        said.append(f"the links alone need {ps_ms:.0f} ms a step through the PS host's "
                    f"{p.workers * b / 1e9:g} Gbit/s (S/B, S = {size / 1e6:.1f} MB of fp32 "
                    f"gradients) and {ring_ms:.0f} ms round the ring (2(N-1)/N x S/B)")
    if p.key == "loopback":
        said.append("no link limit: the exchange is memory copies on the workers' own cores")
    if p.recovery:
        said.append(p.recovery)
    return said


def plot(places, a):
    """Test accuracy vs wall-clock time, every run: a colour per mode, a line style per place."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log(f"matplotlib missing in {sys.executable}: no plot (deploy/install-deps.sh installs "
            "Debian's, for /usr/bin/python3)")
        return False
    colours = {"ps": "tab:blue", "ring": "tab:orange", "ps-bf16": "tab:green",
               "ps-fp16": "tab:red"}
    styles = {"loopback": ("--", "s"), "rack": ("-", "o")}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in places:
        line, marker = styles[p.key]
        for mode, r in p.results.items():
            # No point at (0 s, chance): it would squeeze the epochs' few points together.
            ax.plot([e["seconds"] for e in r["epochs"]],
                    [100 * e["test_accuracy"] for e in r["epochs"]], linestyle=line,
                    marker=marker, color=colours.get(mode), label=f"{mode}, {p.where()}")
    ax.set_xlim(left=0)
    ax.set_xlabel("wall-clock time since the workers started (s)")
    ax.set_ylabel("test accuracy after each epoch (%)")
    ax.set_title("fashion-cnn on Fashion-MNIST: PS vs ring, pbox rack and loopback")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "demo_accuracy.png"), dpi=120)
    return True


def check(places, a, run_dir):
    """0, or 1 after saying what failed: PS and ring of one place disagree, or a run ends under
    --min-accuracy."""
    for p in places:
        if "ps" in p.results and "ring" in p.results:
            ps, ring = (100 * p.results[m]["epochs"][-1]["test_accuracy"] for m in ("ps", "ring"))
            if abs(ps - ring) > AGREE_POINTS:
                log(f"FAILED: {p.name()}: PS and ring disagree: final test accuracy {ps:.2f} % vs "
                    f"{ring:.2f} % (more than {AGREE_POINTS:g} points apart; they train the same "
                    f"model the same way): one exchange is wrong; worker logs are in {run_dir}")
                return 1
    worst = min(r["epochs"][-1]["test_accuracy"] for p in places for r in p.results.values())
    if a.min_accuracy and 100 * worst < a.min_accuracy:
        log(f"FAILED: final test accuracy {100 * worst:.2f} % is under --min-accuracy "
            f"{a.min_accuracy:g} %: training does not learn; worker logs are in {run_dir}")
        return 1
    if worst < 0.85 and not any(p.steps for p in places):
        log(f"note: final test accuracy {100 * worst:.2f} % is under 85 %: train longer (--epochs)")
    return 0


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2, help="loopback's workers")
    p.add_argument("--epochs", type=int, default=2, help="loopback's epochs")
    p.add_argument("--batch", type=int, default=32, help="loopback's batch per worker")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--modes", default=None,
                   help="ps, ring, and ps-bf16/ps-fp16 (the PS with --wire bf16/fp16); "
                        "default ps,ring on loopback, ps,ps-bf16,ring on the rack")
    p.add_argument("--wire-weights", choices=("wire", "fp32"), default="wire",
                   help="ps-bf16/ps-fp16: the weights come back in that format too (as rounded "
                        "changes, the default), or in fp32")
    p.add_argument("--seed", type=int, default=1,
                   help="the workers' seed (weights, data order): the same in every mode")
    p.add_argument("--steps", type=int, default=None,
                   help="quick run: loopback's epochs are N mini-batches per worker (default: "
                        f"{LOOPBACK_STEPS_BESIDE_RACK} beside the rack, whole epochs without it)")
    p.add_argument("--no-kill", dest="kill", action="store_false",
                   help="loopback PS run: do not kill and restart a worker mid-training")
    p.add_argument("--no-rack", action="store_true",
                   help="loopback only: do not build the emulated pbox rack")
    p.add_argument("--rack-workers", type=int, default=4, help="N, the rack's worker hosts")
    p.add_argument("--rack-batch", type=int, default=64, help="the rack's batch per worker")
    p.add_argument("--rack-rate", default="1gbit",
                   help="B, each worker host's link (tc units); phubd's host gets N x B")
    p.add_argument("--rack-epochs", type=int, default=2)
    p.add_argument("--rack-steps", type=int, default=150,
                   help="the rack's epochs are N mini-batches per worker (0: whole epochs)")
    p.add_argument("--rack-modes", default=None,
                   help="the rack's modes (default: --modes if given, else ps,ps-bf16,ring)")
    p.add_argument("--min-accuracy", type=float, default=0,
                   help="exit 1 if a run's final test accuracy (%%) is under this (default: none)")
    p.add_argument("--build", default=os.environ.get("PHUB_BUILD_DIR", "build"),
                   help="the build directory (absolute, or relative to the repository root)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: every worker trains on GPU 0 (cuDNN), sharing it")
    p.add_argument("--data-dir", default=FASHION_MNIST_DIR, help="the Fashion-MNIST IDX .gz files")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "demo"))
    a = p.parse_args()
    a.rack_modes = a.rack_modes or a.modes or "ps,ps-bf16,ring"
    a.modes = a.modes or "ps,ring"
    known = ("ps", "ps-bf16", "ps-fp16", "ring")
    if min(a.workers, a.epochs, a.batch, a.rack_workers, a.rack_epochs, a.rack_batch) < 1 or \
            (a.steps or 0) < 0 or a.rack_steps < 0 or \
            any(m not in known for m in a.modes.split(",") + a.rack_modes.split(",")):
        p.error("--workers, --epochs, --batch and their --rack-* ones >= 1, --steps and "
                "--rack-steps >= 0; --modes and --rack-modes from ps,ps-bf16,ps-fp16,ring")
    try:
        topology.parse_rate(a.rack_rate)
    except ValueError as e:
        p.error(f"--rack-rate: {e}")
    for binary in (("phub", "server", "phubd"), ("worker", "phub-worker")):
        path = os.path.join(ROOT, a.build, *binary)
        if not os.access(path, os.X_OK):
            p.error(f"{path} is not there: build first (deploy/build.sh), or --build DIR")
    return a


def main():
    a = parse_args()

    def on_signal(signum, _):
        print(f"\ndemo: {signal.Signals(signum).name}, stopping everything", flush=True)
        stop_all()
        sys.exit(128 + signum)  # SystemExit: the finally blocks below still tear the rack down
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    os.makedirs(a.out, exist_ok=True)
    run_dir = tempfile.mkdtemp(prefix="phub-demo.")
    places = []
    rack_note = rack_unavailable(a)
    if not rack_note:  # the rack first: its runs decide how long loopback's may be
        rack = Place("rack", a.rack_workers, a.rack_batch, a.rack_epochs, a.rack_steps,
                     a.rack_modes.split(","), kill=False, rate=a.rack_rate)
        places.append(rack)
        rack_note = run_place(rack, a, run_dir)
    if rack_note:
        log(f"note: no emulated rack ({rack_note}): loopback only, as many epochs as asked")
    # Beside the rack loopback's epochs are shortened too (the demo stays about 5 minutes).
    steps = a.steps if a.steps is not None else 0 if rack_note else LOOPBACK_STEPS_BESIDE_RACK
    loopback = Place("loopback", a.workers, a.batch, a.epochs, steps, a.modes.split(","),
                     kill=a.kill)
    places.append(loopback)
    run_place(loopback, a, run_dir)
    places = [p for p in places if p.results]
    print_table(places, a, rack_note)
    with open(os.path.join(a.out, "demo.json"), "w") as f:
        json.dump({"rack_note": rack_note, "places": [
            {"where": p.where(), "key": p.key, "workers": p.workers, "batch": p.batch,
             "epochs": p.epochs, "steps": p.steps, "rate": p.rate, "results": p.results}
            for p in places]}, f, indent=1)
    log(f"wrote {a.out}/demo.json" + (" and demo_accuracy.png" if plot(places, a) else ""))
    code = check(places, a, run_dir)
    if code == 0:
        shutil.rmtree(run_dir, ignore_errors=True)  # kept on failure: the logs are there
    return code


if __name__ == "__main__":
    sys.exit(main())
