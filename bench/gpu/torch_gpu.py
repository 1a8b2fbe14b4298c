#!/usr/bin/env python3
"""phub.torch on CUDA against DDP + NCCL at N = 1, in one run (issue 39's last figure).

examples/torch_ddp_phub.py on GPU 0, synthetic data: DDP with NCCL (the reference), then DDP
with each of --backends through a phubd on loopback with each of --ps-cores, each of
--transports (phubd's data plane: tcp, or shm, shared memory with the worker on its host) and
each of --io-threads (the worker's PHUB_IO_THREADS: threads serving its connections), each
of --wires (PHUB_WIRE: fp32, or bf16 for half the bytes, rounded) and each of --bucket-caps
(DDP's bucket_cap_mb, the reference's too): PHub's comm hook
(phub, summation mode), ServerOptimizer (phub-optimizer) and ServerOptimizer installing each
module's weights in the next forward (phub-optimizer-overlap), for every package directory
given (--package NAME=DIR: a `phub` package on PYTHONPATH; several compare phub.torch versions
in the same run). Rounds alternate the order. Prints and writes OUT/torch_gpu.{tsv,md}: median
ms per mini-batch (median over rounds) and the ratio to the reference's (DDP + NCCL at its
fastest bucket cap; issue 39's bar: <= 1.2). `--reference gloo` runs the same comparison on
a CPU box (DDP + gloo at N = 1 moves nothing either); there `--staged 1` sends its phub
systems through the CUDA path's client (PHUB_STAGED=1, the host copy engine: CI's smoke of this
run), and `--staged 0,1` measures both.

    torch_gpu.py --phubd build-gpu/phub/server/phubd --package after=build-gpu/python312 \\
        --package before=build-gpu/python312-before --out DIR
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchlib import BenchError  # noqa: E402
from benchlib.procs import kill_children, start, wait_all, wait_port_file  # noqa: E402
from benchlib.tables import md_table, write_tsv  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "torch_ddp_phub.py")


def run(a, backend, package, cores, transport, io_threads, wire, bucket, staged, model, batch, d,
        port):
    env = {"PYTHONPATH": package or "", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "PHUB_IO_THREADS": str(io_threads or 1), "PHUB_WIRE": wire if wire != "-" else "fp32",
           "PHUB_STAGED": staged if staged != "-" else "0"}
    procs = []
    if backend.startswith("phub"):
        pf, log = os.path.join(d, "port"), os.path.join(d, "phubd.log")
        p = start([a.phubd, "--listen", "127.0.0.1", "--port", "0", "--port-file", pf,
                   "--max-world-size", "1", "--cores", str(cores), "--transport", transport,
                   "--one-job", "--log-level", "warn"],
                  log)
        procs.append(("phubd", p, log))
        env["PHUB_ADDRESS"] = f"127.0.0.1:{wait_port_file(pf, p, 'phubd', log)}"
    out, log = os.path.join(d, "r.json"), os.path.join(d, "rank0.log")
    argv = [sys.executable, EXAMPLE, "--backend", backend, "--model", model, "--batch",
            str(batch), "--data", "synthetic", "--iters", str(a.iters + a.warmup), "--warmup",
            str(a.warmup), "--lr", "0.001", "--bucket-cap-mb", bucket, "--results", out]
    worker = start(argv, log, env)
    try:
        wait_all([("rank 0", worker, log)], a.timeout)
    finally:
        kill_children()
    with open(out) as f:
        return json.load(f)["median_ms"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--phubd", required=True)
    p.add_argument("--package", action="append", default=[], help="NAME=DIR (repeat)")
    p.add_argument("--models", default="resnet18:64,resnet50:64")
    p.add_argument("--backends", default="phub,phub-optimizer,phub-optimizer-overlap")
    p.add_argument("--ps-cores", default="4", help="phubd --cores, a list: each a system")
    p.add_argument("--transports", default="tcp",
                   help="phubd --transport, a list (tcp, shm): each a system")
    p.add_argument("--io-threads", default="1",
                   help="the worker's PHUB_IO_THREADS, a list: each a system")
    p.add_argument("--wires", default="fp32",
                   help="the worker's PHUB_WIRE (fp32, bf16, fp16), a list: each a system")
    p.add_argument("--bucket-caps", default="25",
                   help="DDP's bucket_cap_mb, a list: each a system (the reference's too)")
    p.add_argument("--reference", default="nccl", choices=["nccl", "gloo"],
                   help="DDP's backend to compare with (gloo: the same bar's shape on a CPU box)")
    p.add_argument("--staged", default="0",
                   help="PHUB_STAGED for the phub systems, a list of 0 and 1: CPU models through "
                        "the staged client (1), as CUDA ones always go")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=0,
                   help="start no run after this many seconds (0: no limit); the tables still "
                        "come out, each system with the rounds it got")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--out", default="results/torch_gpu")
    a = p.parse_args()
    packages = dict(x.split("=", 1) for x in a.package)
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="torch-gpu-", dir=a.out)
    caps = a.bucket_caps.split(",")
    # (backend, package, ps cores, transport, io threads, wire, bucket cap): the reference at
    # every bucket cap, then the PS's systems.
    systems = [(a.reference, None, 0, "-", 0, "-", cap, "-") for cap in caps] + [
        (b, n, int(c), tr, int(t), w, cap, st)
        for n in packages
        for st in a.staged.split(",")
        for c in a.ps_cores.split(",")
        for tr in a.transports.split(",")
        for t in a.io_threads.split(",")
        for w in a.wires.split(",")
        for cap in caps
        for b in a.backends.split(",")]
    rows, port, failed = [], 29600, []
    models = [spec.split(":") for spec in a.models.split(",")]
    ms = {(model, s): [] for model, _ in models for s in systems}
    began, skipped = time.monotonic(), 0
    # Rounds outermost: a --budget-s that runs out leaves every model and system measured
    # as many times as the budget allowed, not the last model unmeasured.
    for r in range(a.rounds):
        for model, batch in models:
            for s in (systems if r % 2 == 0 else systems[::-1]):
                if a.budget_s and time.monotonic() - began > a.budget_s:
                    skipped += 1
                    continue
                backend, name, cores, transport, threads, wire, cap, staged = s
                d = os.path.join(work, f"{model}_{backend}_{name}_c{cores}_{transport}"
                                       f"_t{threads}_{wire}_b{cap}_s{staged}_{r}")
                os.makedirs(d)
                port += 1
                # The example imports phub.torch whatever the backend: NCCL's run gets any package.
                package = packages.get(name) or next(iter(packages.values()), None)
                try:
                    ms[(model, s)].append(run(a, backend, package, cores, transport, threads,
                                              wire, cap, staged, model, int(batch), d, port))
                except (BenchError, OSError, ValueError, KeyError) as e:
                    print(f"{model} {backend} {name} {transport}: FAILED: {e}", flush=True)
                    failed.append(f"{model} {backend} {name or ''} {transport} round {r}")
    if skipped:
        print(f"--budget-s {a.budget_s:g} spent: {skipped} runs not started (the rounds column "
              "says how many each system got)", flush=True)
    for model, batch in models:
        # The bar is against DDP as its users run it: the reference's fastest bucket cap.
        refs = [statistics.median(ms[(model, s)]) for s in systems[:len(caps)] if ms[(model, s)]]
        ref = min(refs) if refs else None
        for s in systems:
            backend, name, cores, transport, threads, wire, cap, staged = s
            runs = ms[(model, s)]
            m = statistics.median(runs) if runs else None
            row = {"model": model, "batch": batch, "system": backend, "package": name or "-",
                   "ps_cores": str(cores or "-"), "transport": transport,
                   "io_threads": str(threads or "-"), "wire": wire, "bucket_cap_mb": cap,
                   "staged": staged,
                   "ms": f"{m:.2f}" if m else "-",
                   "over_reference": f"{m / ref:.2f}" if m and ref else "-",
                   "rounds": " / ".join(f"{x:.1f}" for x in runs)}
            rows.append(row)
            print("\t".join(row.values()), flush=True)
    keys = ["model", "batch", "system", "package", "ps_cores", "transport", "io_threads", "wire",
            "bucket_cap_mb", "staged", "ms", "over_reference", "rounds"]
    write_tsv(os.path.join(a.out, "torch_gpu.tsv"), rows, keys)
    table = "\n".join(md_table(keys, [[r[k] for k in keys] for r in rows]))
    with open(os.path.join(a.out, "torch_gpu.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    if failed:  # the table has "-" for them; the run is not a success
        sys.exit(f"torch_gpu.py: {len(failed)} runs failed (their logs are under {work}): "
                 + "; ".join(failed))


if __name__ == "__main__":
    main()
