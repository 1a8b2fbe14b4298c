#!/usr/bin/env python3
"""The exchange on a GPU, before and after a change, in one run (issue 39's figures).

For each model, each system and each build (the builds alternate within a round), phub-worker
trains on synthetic data on GPU 0 (every worker of a run shares it) and reports its median time
per mini-batch and communication share; phubd (the `--phubd` given, the same for both builds)
serves the PS runs on loopback. Systems: alone (the worker's own device optimizer), nccl (N = 1:
one GPU), ps and ring with N = 2 and 4 (workers sharing GPU 0).

    exchange_gpu.py --before build-gpu-before/worker/phub-worker \\
        --after build-gpu/worker/phub-worker --phubd build-gpu/phub/server/phubd --out DIR

Prints, and writes to DIR/exchange_gpu.{tsv,md}: ms per mini-batch, images/s (all workers) and
communication share per build, after/before as a ratio, and each build's nccl N = 1 over its
alone (issue 39's bar: <= 1.2 after).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import BenchError  # noqa: E402
from benchlib.procs import kill_children, start, wait_all, wait_port_file  # noqa: E402
from benchlib.tables import md_table, write_tsv  # noqa: E402

SYSTEMS = {"alone": 1, "nccl": 1, "ps2": 2, "ring2": 2, "ps4": 4, "ring4": 4}


def run(a, worker, phubd, model, batch, system, d):
    n = SYSTEMS[system]
    procs, extra = [], []
    tag = os.path.basename(d)
    if system.startswith("ps"):
        port_file = os.path.join(d, "port")
        log = os.path.join(d, "phubd.log")
        p = start([phubd, "--listen", "127.0.0.1", "--port", "0", "--port-file", port_file,
                   "--max-world-size", str(n), "--cores", "4", "--optimizer", "momentum",
                   "--lr", "0.01", "--one-job"], log)
        procs.append(("phubd", p, log))
        port = wait_port_file(port_file, p, "phubd", log)
        extra = ["--comm", "ps", "--ps", f"127.0.0.1:{port}"]
    elif system != "alone":
        rdv = os.path.join(d, "rdv")
        os.makedirs(rdv)
        extra = ["--comm", "nccl" if system == "nccl" else "ring", "--rendezvous", rdv]
    for r in range(n):
        out = os.path.join(d, f"w{r}.json")
        log = os.path.join(d, f"w{r}.log")
        argv = [worker, "--device", a.device, "--model", model, "--batch", str(batch), "--iters",
                str(a.iters), "--warmup", str(a.warmup), "--optimizer", "momentum", "--lr", "0.01",
                "--log-level", "warn", "--results", out, "--rank", str(r), "--world", str(n)]
        procs.append((f"{tag} rank {r}", start(argv + extra, log), log))
    try:
        wait_all([p for p in procs if p[0] != "phubd"], a.timeout)
    finally:
        kill_children()
    rs = [json.load(open(os.path.join(d, f"w{r}.json"))) for r in range(n)]
    ms = max(r["median_ms"] for r in rs)
    return {"ms": ms, "images_s": 1000.0 * batch * n / ms,
            "comm_share": statistics.mean(r["comm_share"] for r in rs)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--phubd", required=True)
    p.add_argument("--models", default="fashion-cnn:64:alone,nccl,ps2,ring2,ps4,ring4;"
                   "resnet50:64:alone,nccl,ps2,ring2")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--device", default="cuda", help="cuda; cpu only to try the driver here")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--out", default="results/exchange_gpu")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="exchange-gpu-", dir=a.out)
    builds = {"before": a.before, "after": a.after}
    rows, failed = [], []
    for spec in a.models.split(";"):
        model, batch, systems = spec.split(":")
        for i, system in enumerate(systems.split(",")):
            got = {}
            # Alternate which build goes first, so neither always runs on a warmer GPU.
            order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
            for b in order:
                d = os.path.join(work, f"{model}_{system}_{b}")
                os.makedirs(d)
                try:
                    got[b] = run(a, builds[b], a.phubd, model, int(batch), system, d)
                except (BenchError, OSError, ValueError, KeyError) as e:
                    print(f"{model} {system} {b}: FAILED: {e}", flush=True)
                    failed.append(f"{model} {system} {b}")
                    got[b] = None
            row = {"model": model, "batch": batch, "system": system, "workers": SYSTEMS[system]}
            for b in ("before", "after"):
                r = got[b]
                row[f"{b}_ms"] = f"{r['ms']:.2f}" if r else "-"
                row[f"{b}_images_s"] = f"{r['images_s']:.0f}" if r else "-"
                row[f"{b}_comm"] = f"{100 * r['comm_share']:.1f}" if r else "-"
            row["after_over_before_images_s"] = (
                f"{got['after']['images_s'] / got['before']['images_s']:.2f}"
                if got["before"] and got["after"] else "-")
            rows.append(row)
            print("\t".join(str(v) for v in row.values()), flush=True)
    # nccl N = 1 over alone, per build and model.
    for b in ("before", "after"):
        for r in rows:
            if r["system"] != "nccl":
                continue
            alone = next((x for x in rows if x["model"] == r["model"] and x["system"] == "alone"),
                         None)
            if alone and alone[f"{b}_ms"] != "-" and r[f"{b}_ms"] != "-":
                r[f"{b}_nccl_over_alone"] = (
                    f"{float(r[f'{b}_ms']) / float(alone[f'{b}_ms']):.2f}")
    keys = ["model", "batch", "system", "workers", "before_ms", "after_ms", "before_images_s",
            "after_images_s", "after_over_before_images_s", "before_comm", "after_comm",
            "before_nccl_over_alone", "after_nccl_over_alone"]
    write_tsv(os.path.join(a.out, "exchange_gpu.tsv"), rows, keys)
    table = "\n".join(md_table(keys, [[str(r.get(k, "")) for k in keys] for r in rows]))
    with open(os.path.join(a.out, "exchange_gpu.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    if failed:  # the table has "-" for them; the run is not a success
        sys.exit(f"exchange_gpu.py: {len(failed)} runs failed (their logs are under {work}): "
                 + "; ".join(failed))


if __name__ == "__main__":
    main()
