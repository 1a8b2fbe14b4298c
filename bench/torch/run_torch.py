#!/usr/bin/python3
"""run_torch.py: PyTorch DDP with PHub against DDP with its own backends, dlbench-style.

For each topology x model x N x backend, N ranks of examples/torch_ddp_phub.py (one torch thread
each, synthetic data) train through: phub (DDP communication hook, phubd in summation mode, the
local optimizer steps), phub-optimizer (phubd's fused optimizer steps, workers install weights),
phub-optimizer-overlap (the same, each module's weights installed as the next forward reaches it),
gloo (DDP's CPU allreduce: the reference, measured in the same run), and nccl with --device
cuda; a phub backend with :bf16 or :fp16 (phub:bf16) sends its gradients and weights on that
compact wire (PHUB_WIRE; docs/torch.md "Half the bytes"). Reported: time per mini-batch (rank
0's median over the timed steps; the median over --repeats runs), of which optimizer.step()
(phub-optimizer's only installs weights), images/s, and the speed-up over gloo of the same
topology, model and N.
Topologies come from the exchange benchmark (bench/topo): loopback, pbox (the PS host has N x B),
cloud (PS host B), colocated (no PS host: phubd runs on worker 0's host).

  sudo bench/torch/run_torch.py --quick       # pbox, N = 2 and 4, alexnet + resnet18
  sudo bench/torch/run_torch.py --topologies loopback,pbox,cloud,colocated --repeats 2

Writes OUT/torch.tsv, OUT/torch.md and OUT/torch_<topology>_<model>.png. The racks need root.
Every rank, phubd and gloo share this box's 2 CPUs: compare the backends of one run, as ratios.
"""
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench", "topo"))
sys.path.insert(0, os.path.join(ROOT, "bench", "exchange"))

import nets  # noqa: E402
from benchlib import BenchError, machine, outdir, plots, tables  # noqa: E402
from benchlib.cli import add_rack_run_flags, parse_list, parser  # noqa: E402
from benchlib.log import Progress, log  # noqa: E402
from benchlib.procs import kill_children, start, wait_all, wait_port_file  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "torch_ddp_phub.py")
PYTHON = "/usr/bin/python3"  # Debian's, the one python3-torch belongs to
MASTER_PORT = 29517


def ps_host(topo):
    return "w0" if topo in ("colocated", "loopback") else "ps"


def run_one(a, net, system, model, batch, n, run_dir, repeat):
    # SYSTEM is a backend, or a PHub one with its wire: phub:bf16 (PHUB_WIRE, docs/torch.md).
    backend, _, wire = system.partition(":")
    tag = f"{net.name}_{backend}_{wire or 'fp32'}_{model}_n{n}_r{repeat}"
    procs = []
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.path.join(a.build, "python"),
           "PHUB_WIRE": wire or "fp32",
           "WORLD_SIZE": str(n), "MASTER_ADDR": net.ip("w0"), "MASTER_PORT": str(MASTER_PORT),
           # gloo binds where its hostname resolves unless told: the rack's data interface.
           "GLOO_SOCKET_IFNAME": "lo" if net.name == "loopback" else "eth0"}
    if backend.startswith("phub"):
        host = ps_host(net.name)
        port_file = os.path.join(run_dir, f"{tag}_port")
        log_path = os.path.join(run_dir, f"{tag}_phubd.log")
        argv = [a.phubd, "--listen", net.ip(host), "--port", "0", "--port-file", port_file,
                "--max-world-size", str(n), "--cores", str(a.ps_cores), "--one-job",
                "--log-level", "warn"] + net.phubd_access()
        proc = start(net.wrap(host, argv), log_path)
        procs.append((f"phubd on {host}", proc, log_path))
        env["PHUB_ADDRESS"] = f"{net.ip(host)}:{wait_port_file(port_file, proc, 'phubd', log_path)}"
    out = os.path.join(run_dir, f"{tag}.json")
    for r in range(n):
        argv = [PYTHON, EXAMPLE, "--backend", backend, "--model", model, "--batch", str(batch),
                "--data", "synthetic", "--iters", str(a.iters + a.warmup), "--warmup",
                str(a.warmup), "--threads", "1", "--lr", "0.001"] + (
                    ["--results", out] if r == 0 else [])
        path = os.path.join(run_dir, f"{tag}_rank{r}.log")
        procs.append((f"rank {r}", start(net.wrap(f"w{r}", argv), path,
                                          {**env, "RANK": str(r), "LOCAL_RANK": str(r)}), path))
    try:
        wait_all(procs, a.timeout)
    finally:
        kill_children()
    with open(out) as f:
        r = json.load(f)
    return r["median_ms"], r["optimizer_step_ms"]


def main():
    p = parser(__doc__, epilog=False)
    p.add_argument("--topologies", default="pbox")
    p.add_argument("--models", default="alexnet:8,resnet18:16", help="MODEL:BATCH per rank,...")
    p.add_argument("--backends", default="phub,phub-optimizer,phub-optimizer-overlap,gloo",
                   help="phub's with :bf16 or :fp16 send on that wire (PHUB_WIRE): phub:bf16")
    add_rack_run_flags(p, ROOT, "torch", "cuda: adds nccl (one GPU per rank)")
    p.add_argument("--repeats", type=int, default=2, help="runs per row; the median is reported")
    p.add_argument("--quick", action="store_true", help="4 timed steps, 1 warm-up, 1 run")
    a = p.parse_args()
    if a.quick:
        a.iters, a.warmup, a.repeats = 4, 1, 1
    a.phubd = os.path.join(a.build, "phub", "server", "phubd")
    if not os.access(a.phubd, os.X_OK) or not os.path.isdir(os.path.join(a.build, "python")):
        raise SystemExit(f"run_torch.py: {a.phubd} or {a.build}/python missing: run "
                         "deploy/build.sh first")
    topologies = parse_list(a.topologies, str)
    if any(t != "loopback" for t in topologies) and nets.rack_problem():
        raise SystemExit("run_torch.py: " + nets.rack_problem())
    models = [(m.split(":")[0], int(m.split(":")[1])) for m in parse_list(a.models, str)]
    backends = parse_list(a.backends, str) + (["nccl"] if a.device == "cuda" else [])
    ns = parse_list(a.n, int)
    run_dir = outdir.with_raw(a.out)
    start_load = machine.load_average()

    rows = []
    progress = Progress(len(topologies) * len(ns) * len(models) * len(backends) * a.repeats)
    nets.cleanup()
    try:
        for topo in topologies:
            for n in ns:
                net = nets.make(topo, n, a.rate)
                try:
                    for model, batch in models:
                        # Repeats interleave the backends (the order reversed every other
                        # one), so the box's drift falls on all of them alike.
                        runs = {b: [] for b in backends}
                        steps = {b: [] for b in backends}
                        for repeat in range(a.repeats):
                            for backend in (backends if repeat % 2 == 0 else backends[::-1]):
                                ms, step_ms = run_one(a, net, backend, model, batch, n, run_dir,
                                                      repeat)
                                runs[backend].append(ms)
                                steps[backend].append(step_ms)
                                progress.step()
                                log(f"{topo} N={n} {model} {backend}: {ms:.1f} ms ({progress})")
                        for backend in backends:
                            ms = statistics.median(runs[backend])
                            rows.append({"topology": topo, "model": model, "batch": batch,
                                         "n": n, "backend": backend, "ms": round(ms, 1),
                                         "runs_ms": "/".join(f"{x:.1f}" for x in runs[backend]),
                                         "step_ms": round(statistics.median(steps[backend]), 1),
                                         "images_s": round(1000 * n * batch / ms, 1)})
                finally:
                    net.close()
    except BenchError as e:
        log(f"a run failed:\n{e}")
        return 1
    finally:
        kill_children()
        nets.cleanup()

    for r in rows:  # the same run's gloo is the reference
        ref = [g for g in rows if g["backend"] == "gloo" and
               (g["topology"], g["model"], g["n"]) == (r["topology"], r["model"], r["n"])]
        r["vs_gloo"] = round(ref[0]["ms"] / r["ms"], 2) if ref else ""
    keys = ["topology", "model", "batch", "n", "backend", "ms", "runs_ms", "step_ms", "images_s",
            "vs_gloo"]
    tables.write_tsv(os.path.join(a.out, "torch.tsv"), rows, keys)
    lines = [f"PyTorch DDP (python3-torch, 1 thread per rank, synthetic data), links {a.rate} on "
             f"racks, phubd --cores {a.ps_cores}; {a.warmup} warm-up + {a.iters} timed steps, "
             f"median of {a.repeats} run(s). {machine.describe(start_load)}", ""]
    lines += tables.md_table(
        ["topology", "model", "N", "backend", "ms / mini-batch", "runs (ms)",
         "of which optimizer.step()", "images/s", "speed-up vs gloo"],
        [[r["topology"], f"{r['model']} b{r['batch']}", str(r["n"]), r["backend"], str(r["ms"]),
          r["runs_ms"], f"{r['step_ms']} ms", str(r["images_s"]),
          f"{r['vs_gloo']}×" if r["vs_gloo"] else "-"] for r in rows], "llrlrrrrr")
    tables.write_markdown(os.path.join(a.out, "torch.md"), lines)
    for topo in topologies:
        for model, _ in models:
            plots.plot_tsv_or_log(
                os.path.join(a.out, "torch.tsv"), os.path.join(a.out, f"torch_{topo}_{model}.png"),
                x="n", y="ms", group="backend", kind="bar",
                where=[f"topology={topo}", f"model={model}"], annotate=True,
                xlabel="ranks N", ylabel="ms per mini-batch (lower is better)",
                title=f"DDP {model} on {topo}: phub vs DDP's backends")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
