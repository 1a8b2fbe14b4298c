#!/usr/bin/python3
"""run_distributed.py: distributed training, dlbench-style — phub-worker on the PS and the ring.

For each topology x model x N x system x overlap: N phub-worker processes (one OpenMP thread
each) train the model on synthetic data, exchanging through phubd (ps: one on the PS host;
ps-colocated: one on every worker host; ps-multi: one on each of K PS hosts) or the ring; each
worker reports its median time per mini-batch and its communication share (time blocked
waiting for the exchange / step time).
Reported per run: time per mini-batch (slowest worker's median), images/s (N x batch / time),
scaling efficiency (images/s over N x one worker's images/s alone, measured first in the same
run with --comm none), communication share (mean over workers). Topologies come from the
exchange benchmark (bench/topo): loopback, pbox (PS host N x B), cloud (PS host B), colocated,
multips (K PS hosts of B each, K from --ps-hosts, default n/2,n; a rack per (N, K), the ring
once per N on the rack with the largest K).

  sudo bench/train/run_distributed.py --quick     # < 10 min: pbox + loopback, N=2/4, 2 models
  sudo bench/train/run_distributed.py --topologies pbox --models resnet56:16,alexnet:2 --n 4
  sudo bench/train/run_distributed.py --topologies pbox --models alexnet:2 --n 4 --priority
  sudo bench/train/run_distributed.py --topologies multips --models alexnet:2 --n 4,8 \
      --ps-hosts n/2,n

Writes OUT/distributed.tsv, OUT/distributed.md and OUT/distributed_<topology>.png. The racks
need root. Note: every worker, phubd and the ring share this box's CPUs, so compute slows with N
(one core per two workers at N = 4 on 2 cores): scaling efficiency here measures the box, and
the PS-vs-ring and overlap comparisons (same compute on both sides) are what the run is for.
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
sys.path.insert(0, os.path.join(ROOT, "bench", "topo"))
sys.path.insert(0, os.path.join(ROOT, "bench", "exchange"))

import nets  # noqa: E402
from benchlib import BenchError, outdir, plots, tables  # noqa: E402
from benchlib.cli import add_rack_run_flags, parse_list, parser  # noqa: E402
from benchlib.log import Progress, log  # noqa: E402
from benchlib.procs import kill_children, start, wait_all, wait_port_file  # noqa: E402
from run_train import parse_models  # noqa: E402

COLOCATED_SOCKET_BUFFER_BYTES = 64 * 1024  # incast cap, as in bench/exchange (operations.md)
SYSTEMS = {"loopback": ["ps", "ring"], "pbox": ["ps", "ring"], "cloud": ["ps", "ring"],
           "colocated": ["ps-colocated", "ring"], "multips": ["ps-multi", "ring"]}
# The PS each topology compares with the ring.
TOPOLOGY_PS = {"loopback": "ps", "pbox": "ps", "cloud": "ps", "colocated": "ps-colocated",
               "multips": "ps-multi"}


# The dedicated PS with a mechanism of issue 18 turned off or on: "ps" is the default (priority
# scheduling on, fp32 wire); "-fifo" turns priority scheduling off on phubd and the workers
# (--send-window-bytes 0); "-bf16"/"-fp16" sends gradients and weights in that format (--wire).
PS_VARIANT = re.compile(r"ps(-fifo)?(?:-(bf16|fp16))?")
MECHANISMS = ["ps-fifo", "ps", "ps-fifo-bf16", "ps-bf16"]  # none, priority, bf16, both
# The ring with the same compact wire (--wire: pieces in bf16/fp16, sums in float32), so that
# the PS's bf16 rows have their honest baseline.
RING_VARIANT = re.compile(r"(ring|nccl)(?:-(bf16|fp16))?")


def phub_worker_argv(a, model, batch, extra):
    return [a.worker, "--model", model, "--batch", str(batch), "--iters", str(a.iters),
            "--warmup", str(a.warmup), "--lr", "0.01", "--log-level", "warn",
            "--device", a.device] + extra


def worker_env(a, rank):
    """One OpenMP thread per worker; on a GPU box, worker r on GPU r % GPUs (NCCL needs one GPU
    per rank; the PS and the ring let several workers share one)."""
    env = {"OMP_NUM_THREADS": "1"}
    if a.gpus > 0:
        env["CUDA_VISIBLE_DEVICES"] = str(rank % a.gpus)
    return env


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode != 0:
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def run_alone(a, model, batch, run_dir):
    out = os.path.join(run_dir, f"alone_{model}.json")
    path = os.path.join(run_dir, f"alone_{model}.log")
    p = start(phub_worker_argv(a, model, batch, ["--results", out]), path, worker_env(a, 0))
    wait_all([("phub-worker alone", p, path)], 1800)
    return json.load(open(out))


def run_one(a, net, system, model, batch, n, overlap, run_dir):
    # multips: one rack per K, so K is in the name (a stale port file would name a dead phubd).
    k = f"_k{len(net.ps_hosts())}" if net.name == "multips" else ""
    tag = f"{net.name}_{system}_{model}_n{n}{k}_{'ov' if overlap else 'noov'}"
    procs = []  # (name, Popen, log) of every process of this run
    workers = [f"w{r}" for r in range(n)]
    extra = []
    variant = PS_VARIANT.fullmatch(system)
    if variant or system in ("ps-colocated", "ps-multi"):
        # ps-multi: K dedicated PS hosts (multips), the keys spread over them as colocated.
        hosts = {"ps-colocated": workers, "ps-multi": net.ps_hosts()}.get(system, ["ps"])
        # Incast (N workers into one server's port, several servers answering one worker at
        # once): capped buffers on racks, as bench/exchange does (systems.py says why).
        spread_rack = system in ("ps-colocated", "ps-multi") and net.name != "loopback"
        buf = COLOCATED_SOCKET_BUFFER_BYTES if spread_rack else 0
        cores = 1 if system == "ps-colocated" else a.ps_cores
        # -fifo: priority scheduling off on both sides (chunks leave in the order queued).
        window = ["--send-window-bytes", "0"] if variant and variant.group(1) else []
        wire = (["--wire", variant.group(2), "--wire-weights", "wire"]
                if variant and variant.group(2) else [])
        extra = ["--comm", "ps" if variant else "ps-colocated",
                 "--socket-buffer-bytes", str(buf)] + window + wire
        for i, host in enumerate(hosts):
            port_file = os.path.join(run_dir, f"{tag}_port{i}")
            log_path = os.path.join(run_dir, f"{tag}_phubd{i}.log")
            argv = [a.phubd, "--listen", net.ip(host), "--port", "0", "--port-file", port_file,
                    "--max-world-size", str(n), "--cores", str(cores), "--optimizer", "momentum",
                    "--lr", "0.01", "--one-job", "--socket-buffer-bytes", str(buf)] + window
            argv += net.phubd_access()
            # K daemons share this machine: unpinned, or each would pin to the same cores.
            if system == "ps-multi":
                argv.append("--no-pin")
            name = f"phubd on {host}"
            proc = start(net.wrap(host, argv), log_path)
            procs.append((name, proc, log_path))
            port = wait_port_file(port_file, proc, name, log_path)
            extra += ["--ps", f"{net.ip(host)}:{port}"]
    else:
        rendezvous = os.path.join(run_dir, f"{tag}_rendezvous")
        os.makedirs(rendezvous)
        ring = RING_VARIANT.fullmatch(system)
        extra = ["--comm", ring.group(1), "--rendezvous", rendezvous]
        if ring.group(2):
            extra += ["--wire", ring.group(2)]
    for r, host in enumerate(workers):
        out = os.path.join(run_dir, f"{tag}_w{r}.json")
        path = os.path.join(run_dir, f"{tag}_w{r}.log")
        argv = phub_worker_argv(a, model, batch, extra + [
            "--rank", str(r), "--world", str(n), "--results", out]
            + (["--listen-host", net.ip(host)] if RING_VARIANT.fullmatch(system) else [])
            + ([] if overlap else ["--no-overlap"]))
        procs.append((f"phub-worker rank {r}", start(net.wrap(host, argv), path, worker_env(a, r)),
                      path))
    try:
        wait_all(procs, a.timeout)
    finally:
        kill_children()  # whatever is left of a failed run
    results = [json.load(open(os.path.join(run_dir, f"{tag}_w{r}.json"))) for r in range(n)]
    return {"ms": max(r["median_ms"] for r in results),
            "comm_share": statistics.mean(r["comm_share"] for r in results)}


def main():
    p = parser(__doc__, epilog=False)
    p.add_argument("--topologies", default="loopback,pbox",
                   help=f"comma list of {', '.join(SYSTEMS)} (default: loopback,pbox)")
    p.add_argument("--ps-hosts", default="n/2,n", metavar="K,...",
                   help="multips: the numbers K of PS hosts, each a number or relative to N as "
                        "n or n/D (default: n/2,n)")
    p.add_argument("--models", default="resnet56:16,alexnet:2", help="MODEL:BATCH per worker,...")
    add_rack_run_flags(p, ROOT, "distributed", "cuda: cuDNN workers, and NCCL beside the PS "
                       "and the ring on loopback")
    p.add_argument("--quick", action="store_true", help="4 timed steps, 1 warm-up")
    p.add_argument("--priority", action="store_true",
                   help="add ps-fifo beside ps: the PS with priority scheduling off "
                        "(--send-window-bytes 0), to measure what it is worth")
    p.add_argument("--mechanisms", action="store_true",
                   help="the PS with each of issue 18's mechanisms off and on: ps-fifo (none), "
                        "ps (priority scheduling), ps-fifo-bf16 (the bf16 wire), ps-bf16 (both); "
                        "and ring-bf16, the ring with the same wire; these variants run with "
                        "overlap on only")
    a = p.parse_args()
    if a.quick:
        a.iters, a.warmup = 4, 1
    a.worker = os.path.join(a.build, "worker", "phub-worker")
    a.phubd = os.path.join(a.build, "phub", "server", "phubd")
    for b in (a.worker, a.phubd):
        if not os.access(b, os.X_OK):
            raise SystemExit(f"run_distributed.py: {b} missing: run deploy/build.sh first")
    topologies = parse_list(a.topologies, str)
    if any(t not in SYSTEMS for t in topologies):
        raise SystemExit(f"run_distributed.py: topologies are {', '.join(SYSTEMS)}")
    if any(t != "loopback" for t in topologies) and nets.rack_problem():
        raise SystemExit("run_distributed.py: " + nets.rack_problem())
    models = parse_models(a.models)
    try:
        specs = nets.parse_ps_hosts(a.ps_hosts)
        ks_of = {n: nets.ps_hosts_for(specs, n) if "multips" in topologies else [None]
                 for n in parse_list(a.n, int)}
    except ValueError as e:
        raise SystemExit(f"run_distributed.py: {e}")
    a.gpus = gpu_count() if a.device == "cuda" else 0
    if a.device == "cuda" and a.gpus == 0:
        raise SystemExit("run_distributed.py: --device cuda but nvidia-smi lists no GPU")
    systems = {t: SYSTEMS[t] + (["nccl"] if a.device == "cuda" and t == "loopback" else [])
               + (["ps-fifo"] if a.priority and not a.mechanisms and "ps" in SYSTEMS[t] else [])
               + ([m for m in MECHANISMS if m != "ps"] + ["ring-bf16"]
                  if a.mechanisms and "ps" in SYSTEMS[t] else [])
               for t in topologies}
    ns = parse_list(a.n, int)
    # The racks, in order: (topology, N, K or None, systems there). multips: one per K, the
    # ring only on the largest K's (it does not use the PS hosts).
    plan = []
    for topo in topologies:
        for n in ns:
            ks = ks_of[n] if topo == "multips" else [None]
            for k in ks:
                here = [s for s in systems[topo] if topo != "multips" or s == "ps-multi"
                        or k == ks[-1]]
                plan.append((topo, n, k, here))
    run_dir = outdir.with_raw(a.out)  # stale port files would point at dead servers

    alone = {}
    for model, batch in models:
        r = run_alone(a, model, batch, run_dir)
        alone[model] = r["median_ms"]
        log(f"{model} batch {batch} alone: {r['median_ms']:.1f} ms per mini-batch")
    rows = []
    progress = Progress(sum(len(here) for _, _, _, here in plan) * len(models) * 2)
    nets.cleanup()
    try:
        for topo, n, k, here in plan:
            net = nets.make(topo, n, a.rate, k)
            try:
                for model, batch in models:
                    for system in here:
                        if system == "nccl" and n > a.gpus:
                            log(f"nccl N={n} skipped: NCCL needs one GPU per worker "
                                f"({a.gpus} here)")
                            progress.total -= 2
                            continue
                        # With --mechanisms only the PS and the rings need overlap off
                        # (the PS-vs-ring line); the variants are compared overlap on.
                        overlaps = ((True, False) if not a.mechanisms
                                    or system in ("ps", "ring", "nccl") else (True,))
                        progress.total -= 2 - len(overlaps)
                        for overlap in overlaps:
                            r = run_one(a, net, system, model, batch, n, overlap, run_dir)
                            ips = 1000 * n * batch / r["ms"]
                            kk = k if system == "ps-multi" else ""
                            rows.append({
                                "topology": topo, "model": model, "batch": batch, "n": n,
                                "ps_hosts": kk,
                                "system": system, "overlap": "on" if overlap else "off",
                                "ms": round(r["ms"], 1), "images_s": round(ips, 1),
                                "scaling_eff": round(ips / (n * 1000 * batch / alone[model]), 3),
                                "comm_share": round(r["comm_share"], 3)})
                            progress.step()
                            log(f"{topo} N={n}{f' K={kk}' if kk else ''} {model} "
                                f"{system} overlap "
                                f"{'on ' if overlap else 'off'}: {r['ms']:.1f} ms, comm "
                                f"{100 * r['comm_share']:.1f} % ({progress})")
            finally:
                net.close()
    except BenchError as e:
        log(f"a run failed:\n{e}")
        return 1
    finally:
        kill_children()
        nets.cleanup()
        keys = ["topology", "model", "batch", "n", "ps_hosts", "system", "overlap", "ms",
                "images_s", "scaling_eff", "comm_share"]
        tables.write_tsv(os.path.join(a.out, "distributed.tsv"), rows, keys)

    engine = "oneDNN, 1 thread per worker" if a.device == "cpu" else f"cuDNN, {a.gpus} GPU(s)"
    lines = [f"Distributed training on synthetic data, phub-worker ({engine}), "
             f"links {a.rate} on racks; one worker alone: "
             + ", ".join(f"{m} {alone[m]:.1f} ms" for m in alone)
             + f"; {a.warmup} warm-up + {a.iters} timed steps per run.", ""]
    multi = any(r["ps_hosts"] != "" for r in rows)
    lines += tables.md_table(
        ["topology", "model", "N"] + (["K"] if multi else [])
        + ["system", "overlap", "ms / mini-batch", "images/s", "scaling eff.", "comm share"],
        [[r["topology"], f"{r['model']} b{r['batch']}", str(r["n"])]
         + ([str(r["ps_hosts"]) if r["ps_hosts"] != "" else "-"] if multi else [])
         + [r["system"], r["overlap"], str(r["ms"]), str(r["images_s"]), str(r["scaling_eff"]),
            f"{100 * r['comm_share']:.1f} %"] for r in rows],
        "llr" + ("r" if multi else "") + "llrrrr")
    # The issue's two comparisons, where the run has them.
    lines.append("")
    for topo in topologies:
        for n in ns:
            for model, _ in models:
                for k in (ks_of[n] if topo == "multips" else [None]):
                    lines += summary_lines(rows, topo, n, model, k)
    table = tables.write_markdown(os.path.join(a.out, "distributed.md"), lines)
    # One plot per topology and model: bars per system at each N, overlap on and off (multips:
    # the PS's bars per K, "ps-multi K overlap").
    for topo in topologies:
        for model, batch in models:
            plots.plot_tsv_or_log(
                os.path.join(a.out, "distributed.tsv"),
                os.path.join(a.out, f"distributed_{topo}_{model}.png"), x="n", y="ms",
                group="system,ps_hosts,overlap" if topo == "multips" else "system,overlap",
                kind="bar", where=[f"topology={topo}", f"model={model}"],
                annotate=True, xlabel="workers N", ylabel="ms per mini-batch (lower is better)",
                title=(f"{topo}: {model} batch {batch} per worker; ps-multi K: K PS hosts"
                       if topo == "multips" else
                       f"{topo}: {model} batch {batch} per worker, time per mini-batch"))
    print(table)
    return 0


def summary_lines(rows, topo, n, model, k=None):
    """The PS-vs-ring comparison and the mechanisms' lines for one (topology, N, model) (multips:
    and K, the ring's rows beside the PS's at that K)."""
    lines = []
    sel = [r for r in rows if (r["topology"], r["n"], r["model"]) == (topo, n, model)
           and r["ps_hosts"] in ("", k)]
    on = {r["system"]: r for r in sel if r["overlap"] == "on"}
    off = {r["system"]: r for r in sel if r["overlap"] == "off"}
    ps = TOPOLOGY_PS[topo]
    at = "" if k is None else f" K={k}"
    rings = [x for x in ("ring", "nccl") if x in on and x in off]
    if ps in on and ps in off and rings:
        best_ring = min(min(on[x]["ms"], off[x]["ms"]) for x in rings)
        lines.append(f"- {topo} N={n}{at} {model}: PS {on[ps]['ms']} ms vs "
                     f"{best_ring} ms (best ring) → PS speed-up "
                     f"{best_ring / on[ps]['ms']:.2f}×; "
                     f"overlap cuts the PS's comm share "
                     f"{100 * off[ps]['comm_share']:.1f} % → "
                     f"{100 * on[ps]['comm_share']:.1f} %")
    if all(m in on for m in MECHANISMS):
        none = on["ps-fifo"]
        lines.append(f"- {topo} N={n} {model}, overlap on, each mechanism's "
                     "contribution (time per mini-batch, speed-up over none, comm "
                     "share): " + "; ".join(
                         f"{label} {on[m]['ms']} ms, {none['ms'] / on[m]['ms']:.2f}×, "
                         f"{100 * on[m]['comm_share']:.1f} %"
                         for label, m in zip(("none", "priority", "bf16", "both"),
                                             MECHANISMS)))
    compact_rings = [x for x in ("ring-bf16", "nccl-bf16") if x in on]
    if "ps-bf16" in on and compact_rings:
        best = min(compact_rings, key=lambda x: on[x]["ms"])
        lines.append(f"- {topo} N={n} {model}, overlap on, the bf16 wire on both: "
                     f"ps-bf16 {on['ps-bf16']['ms']} ms vs {best} {on[best]['ms']} ms "
                     f"→ {on[best]['ms'] / on['ps-bf16']['ms']:.2f}×; comm share "
                     f"{100 * on['ps-bf16']['comm_share']:.1f} % vs "
                     f"{100 * on[best]['comm_share']:.1f} %")
    if "ps" in on and "ps-fifo" in on:
        lines.append(f"- {topo} N={n} {model}, overlap on: priority scheduling "
                     f"{on['ps-fifo']['ms']} ms (off) → {on['ps']['ms']} ms (on), "
                     f"{on['ps-fifo']['ms'] / on['ps']['ms']:.2f}×; comm share "
                     f"{100 * on['ps-fifo']['comm_share']:.1f} % → "
                     f"{100 * on['ps']['comm_share']:.1f} %")
    return lines


if __name__ == "__main__":
    sys.exit(main())
