#!/usr/bin/env python3
"""compare_builds.py: the same benchmarks on two checkouts of PHub, in one run, as ratios.

A change that should not change speed (a refactor) is held to a build of the code before it:
both checkouts' own drivers run against their own builds, alternating within each round
(round r runs `before` first when r is odd, `after` first when r is even, so drift of this
noisy VM over the run falls on both), and each figure is reported as after / before, the
median of the rounds' paired ratios. Nothing is compared across runs.

What runs (each checkout's bench/ with its build/, both must be built with deploy/build.sh):
  exchange  run_exchange.py: ps, ps-bf16 and ring, S = 32 MiB, N = 4, on loopback and on the
            emulated PBox rack (pbox: N workers of B, PS host N.B): ms per exchange
  tenants   run_tenants.py: one phubd shared by k = 1, 2, 4 exchange jobs (and 2:1 weights)
            on the pbox rack, no training: ms per iteration of each job, the aggregate MB/s
The racks need root (ip netns, tc); --no-racks keeps to loopback (exchange only).

Writes OUT/compare.tsv (every figure of every round and side), OUT/compare.md (medians and
ratios), and each driver's own outputs under OUT/raw/<side>/r<round>/.

  sudo bench/compare/compare_builds.py --before /work/baseline --after . --rounds 3
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from benchlib import machine, tables  # noqa: E402
from benchlib.log import log  # noqa: E402

# Each benchmark: how to run it in a checkout, which TSV it writes, which columns name a row
# and which figure of the row is compared (lower is better for ms, higher for MB/s).
BENCHES = {
    "exchange": {
        "argv": lambda a: ["bench/exchange/run_exchange.py", "--systems", "ps,ps-bf16,ring",
                           "--sizes", "32", "--workers", "4", "--reps", "1",
                           "--iters", str(a.iters), "--warmup", "1",
                           "--topologies", "loopback" if a.no_racks else "loopback,pbox"],
        "tsv": "exchange.tsv",
        "keys": ["topology", "system", "workers", "mib"],
        "figures": ["ms"],
    },
    "tenants": {
        "argv": lambda a: ["bench/tenants/run_tenants.py", "--racks", "pbox", "--no-training",
                           "--reps", "1", "--iters", str(a.iters)],
        "tsv": "tenants.tsv",
        "keys": ["rack", "scenario", "k", "job"],
        "figures": ["ms_per_iter", "aggregate_MBps"],
    },
}


def run_side(checkout, bench, args, out):
    """Runs one benchmark of one checkout into `out`; returns {row key: {figure: value}}."""
    spec = BENCHES[bench]
    argv = [sys.executable] + spec["argv"](args) + [
        "--build", os.path.join(checkout, "build"), "--out", out]
    os.makedirs(out, exist_ok=True)
    began = time.monotonic()
    with open(os.path.join(out, "driver.log"), "w") as logf:
        rc = subprocess.run(argv, cwd=checkout, stdout=logf, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"{bench} in {checkout} failed (exit {rc}): see {out}/driver.log")
    log(f"  {bench} of {checkout}: {time.monotonic() - began:.0f} s")
    rows = {}
    with open(os.path.join(out, spec["tsv"])) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            key = " ".join(row[k] for k in spec["keys"])
            # tenants.tsv has a row per repetition: keep the median of a key's rows.
            for fig in spec["figures"]:
                rows.setdefault(key, {}).setdefault(fig, []).append(float(row[fig]))
    return {k: {f: statistics.median(v) for f, v in figs.items()} for k, figs in rows.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True, help="checkout of the reference code (with build/)")
    p.add_argument("--after", default=".", help="checkout of the code under test (default: .)")
    p.add_argument("--benches", default="exchange,tenants", help="comma list (default: both)")
    p.add_argument("--rounds", type=int, default=3, help="paired rounds (default: 3)")
    p.add_argument("--iters", type=int, default=8, help="timed iterations per run (default: 8)")
    p.add_argument("--no-racks", action="store_true", help="loopback only: exchange, no tenants")
    p.add_argument("--out", default="results/compare")
    a = p.parse_args()
    sides = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    benches = [b for b in a.benches.split(",") if b and not (a.no_racks and b == "tenants")]
    for b in benches:
        if b not in BENCHES:
            p.error(f"--benches: unknown '{b}' (known: {', '.join(BENCHES)})")
    start_load = machine.load_average()
    records = []  # (bench, key, figure, round, side, value)
    for r in range(1, a.rounds + 1):
        order = ["before", "after"] if r % 2 else ["after", "before"]
        for bench in benches:
            for side in order:
                log(f"round {r}/{a.rounds}: {bench}, {side}")
                got = run_side(sides[side], bench, a, os.path.join(a.out, "raw", side, f"r{r}", bench))
                for key, figs in got.items():
                    for fig, value in figs.items():
                        records.append((bench, key, fig, r, side, value))
    os.makedirs(a.out, exist_ok=True)
    tables.write_tsv(os.path.join(a.out, "compare.tsv"),
                     [dict(zip(["bench", "row", "figure", "round", "side", "value"], rec))
                      for rec in records],
                     ["bench", "row", "figure", "round", "side", "value"], tables.short_float)
    by = {}
    for bench, key, fig, r, side, value in records:
        by.setdefault((bench, key, fig), {}).setdefault(r, {})[side] = value
    lines = [f"# after / before, same run ({a.rounds} paired rounds)", "",
             f"before: {sides['before']}; after: {sides['after']}; {machine.describe(start_load)}",
             ""]
    out_rows = []
    for (bench, key, fig), rounds in sorted(by.items()):
        paired = [v["after"] / v["before"] for v in rounds.values()
                  if "after" in v and "before" in v and v["before"] > 0]
        if not paired:
            continue
        before = statistics.median(v["before"] for v in rounds.values() if "before" in v)
        after = statistics.median(v["after"] for v in rounds.values() if "after" in v)
        out_rows.append([bench, key, fig, f"{before:.1f}", f"{after:.1f}",
                         f"{statistics.median(paired):.3f}",
                         f"{min(paired):.3f}–{max(paired):.3f}"])
    lines += tables.md_table(["bench", "row", "figure", "before", "after", "after/before",
                              "rounds' range"], out_rows, "lllrrrr")
    text = tables.write_markdown(os.path.join(a.out, "compare.md"), lines)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
