#!/usr/bin/python3
"""predict_scale.py: the exchange at scales no machine here reaches, from the simulator
(`phubctl plan`, docs/design.md "The simulator"): ResNet-50, BERT-large and a 1.5 B-parameter
transformer (bench/sim/models.py), N = 16 ... 4,096 workers in racks of 64 (one rack below
that) behind 2:1 uplinks, at 25, 100 and 400 Gbit/s a worker. Per point: the hierarchical PS
(a PBox a rack on verbs, its cores sized to its link: what PHub needs) and the ring, the time
an iteration's exchange takes, each over its own link limit (PS: S / B; ring: 2 (N - 1) / N S
/ B), and the ring's time over the PS's. Exchange only: no compute overlaps it here (per-layer
compute times are not measured yet), so these are not yet scaling efficiencies.

  bench/sim/predict_scale.py [--build build] [--out results/sim] [--models ...] [--workers ...]

Writes OUT/scale.tsv, OUT/scale.md and OUT/scale_<model>.png."""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, HERE)

import models  # noqa: E402
from benchlib import plots, tables  # noqa: E402
from benchlib.log import log  # noqa: E402

RACK = 64             # workers a rack
OVERSUBSCRIPTION = 2  # the uplink is RACK x B / 2
VERBS_NS_PER_BYTE = 0.08  # phub/sim/calibration.h, verbs_core_seconds_per_byte


def pbox_cores(workers_in_rack, gbps, racks):
    """Cores a rack's PBox needs on verbs for its link: its rack's workers plus its uplink."""
    uplink = workers_in_rack * gbps / OVERSUBSCRIPTION if racks > 1 else 0
    bytes_per_s = (workers_in_rack * gbps + uplink) * 1e9 / 8
    return max(1, math.ceil(bytes_per_s * VERBS_NS_PER_BYTE * 1e-9)), workers_in_rack * gbps + uplink


def plan(phubctl, tensors_file, n, gbps, scheme):
    racks = max(1, n // RACK)
    per_rack = n // racks
    cores, link = pbox_cores(per_rack, gbps, racks)
    argv = [phubctl, "plan", "--tensors-file", tensors_file, "--workers", str(n), "--gbps",
            str(gbps), "--ps-cores", str(cores), "--verbs", "--json"]
    if racks > 1:
        argv += ["--racks", str(racks), "--uplink-gbps", str(per_rack * gbps / OVERSUBSCRIPTION),
                 "--schemes", "ps-racks" if scheme == "ps" else "ring"]
    else:
        argv += ["--schemes", "ps-pbox" if scheme == "ps" else "ring"]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["schemes"][0], racks, cores, link


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "sim"))
    p.add_argument("--models", default="resnet50,bert-large,gpt-1.5b")
    p.add_argument("--workers", default="16,64,256,1024,4096")
    p.add_argument("--gbps", default="25,100,400")
    p.add_argument("--from-tsv", help="write the table and plots again from a scale.tsv")
    a = p.parse_args()
    if a.from_tsv:
        import csv
        with open(a.from_tsv) as f:
            rows = [{k: (float(v) if k in ("gbps", "ps_ms", "ring_ms") else
                         int(v) if k == "workers" else v) for k, v in r.items()}
                    for r in csv.DictReader(f, delimiter="\t")]
        os.makedirs(a.out, exist_ok=True)
        return render(a, rows, "the simulations of " + a.from_tsv)
    phubctl = os.path.join(a.build, "phub", "ctl", "phubctl")
    if not os.access(phubctl, os.X_OK):
        raise SystemExit(f"{phubctl} missing: run deploy/build.sh first")
    os.makedirs(a.out, exist_ok=True)
    rows = []
    points = [(m, int(n), float(g)) for m in a.models.split(",") for g in a.gbps.split(",")
              for n in a.workers.split(",")]
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i, (model, n, gbps) in enumerate(points):
            path = os.path.join(tmp, model + ".txt")
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write("\n".join(map(str, models.backward_bytes(model))) + "\n")
            s_bytes = sum(models.backward_bytes(model))
            b = gbps * 1e9 / 8
            ps, racks, cores, link = plan(phubctl, path, n, gbps, "ps")
            ring, _, _, _ = plan(phubctl, path, n, gbps, "ring")
            row = {"model": model, "workers": n, "gbps": gbps, "racks": racks,
                   "pbox_cores": cores, "pbox_gbps": link,
                   "ps_ms": round(1000 * ps["seconds_per_iteration"], 2),
                   "ps_over_limit": round(ps["seconds_per_iteration"] / (s_bytes / b), 3),
                   "ps_bound_by": ps["bottleneck"],
                   "ring_ms": round(1000 * ring["seconds_per_iteration"], 2),
                   "ring_over_limit": round(ring["seconds_per_iteration"] /
                                            (2 * (n - 1) / n * s_bytes / b), 3),
                   "ring_over_ps": round(ring["seconds_per_iteration"] /
                                         ps["seconds_per_iteration"], 2)}
            rows.append(row)
            log(f"[{i + 1}/{len(points)}, {time.monotonic() - start:.0f} s] {model} N={n} "
                f"{gbps:g} Gbit/s: ps {row['ps_ms']} ms, ring {row['ring_ms']} ms")
    tables.write_tsv(os.path.join(a.out, "scale.tsv"), rows, list(rows[0]))
    return render(a, rows, f"{time.monotonic() - start:.0f} s for {len(points)} points")


def render(a, rows, how):
    lines = [f"The exchange an iteration at scale (simulated, {how}): racks of {RACK} behind {OVERSUBSCRIPTION}:1 uplinks, "
             "a PBox a rack on verbs with the cores its link needs; x limit: over S / B (PS) or "
             "2 (N - 1) / N S / B (ring).", ""]
    lines += tables.md_table(
        ["model", "N", "Gbit/s", "racks", "PBox cores", "PBox Gbit/s", "PS ms", "PS x limit",
         "PS bound by", "ring ms", "ring x limit", "ring / PS"],
        [[str(c) for c in (r["model"], r["workers"], f"{float(r['gbps']):g}", r["racks"],
                           r["pbox_cores"], f"{float(r['pbox_gbps']):g}", r["ps_ms"],
                           r["ps_over_limit"], r["ps_bound_by"], r["ring_ms"],
                           r["ring_over_limit"], r["ring_over_ps"])] for r in rows],
        "lrrrrrrrlrrr")
    print(tables.write_markdown(os.path.join(a.out, "scale.md"), lines))
    plt = plots.import_pyplot()
    if plt is not None:
        for model in dict.fromkeys(r["model"] for r in rows):
            fig, ax = plt.subplots(figsize=(7, 4))
            for gbps in sorted({r["gbps"] for r in rows}):
                mine = [r for r in rows if r["model"] == model and r["gbps"] == gbps]
                ns = [r["workers"] for r in mine]
                ax.plot(ns, [r["ps_ms"] for r in mine], marker="o", label=f"PS {gbps:g} Gbit/s")
                ax.plot(ns, [r["ring_ms"] for r in mine], marker="x", ls="--",
                        label=f"ring {gbps:g} Gbit/s")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("workers")
            ax.set_ylabel("exchange per iteration (ms)")
            ax.set_title(f"{model}: hierarchical PS vs ring (simulated)")
            ax.legend(fontsize=7)
            plots.save(plt, fig, os.path.join(a.out, f"scale_{model}.png"), 110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
