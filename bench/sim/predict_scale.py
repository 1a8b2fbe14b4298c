#!/usr/bin/python3
"""predict_scale.py: training at scales no machine here reaches, from the simulator (`phubctl
plan`, docs/design.md "The simulator"): ResNet-50, BERT-large and a 1.5 B-parameter
transformer (bench/sim/models.py: each tensor's bytes and its layer's FLOPs; the compute at
the rate measured on one H200, phub/sim/calibration.h), N = 16 ... 4,096 workers in racks of 64
(one rack below that) behind 2:1 uplinks, at 25, 100 and 400 Gbit/s a worker. Per point: the
PS with the PBoxes `phubctl plan` sizes for the workers' links (hierarchical across racks, on
verbs) and the ring; each one's time an iteration and scaling efficiency (a worker's compute
alone over the iteration), and the ring's time over the PS's. Then the settings of Herring's
(SC'20) and BytePS's (OSDI'20) published scaling figures, predicted beside them.

  bench/sim/predict_scale.py [--build build] [--out results/sim] [--models ...] [--workers ...]

Writes OUT/scale.tsv, OUT/scale.md, OUT/published.tsv and OUT/scale_<model>.png."""
import argparse
import json
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


def plan(phubctl, tensors_file, n, gbps, racks=None, extra=()):
    """`phubctl plan` of the ring, with its sizing of the PS: (ring, sized PS) as JSON."""
    racks = racks if racks is not None else max(1, n // RACK)
    # The tree in one rack (phub/sim models it on a non-blocking network only).
    argv = [phubctl, "plan", "--tensors-file", tensors_file, "--workers", str(n), "--gbps",
            str(gbps), "--verbs", "--json", "--schemes", "ring,tree" if racks == 1 else "ring",
            *extra]
    if racks > 1:
        argv += ["--racks", str(racks), "--uplink-gbps", str(n // racks * gbps / OVERSUBSCRIPTION)]
    out = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
    tree = out["schemes"][1] if racks == 1 else None
    return out["schemes"][0], tree, out["sizing"], racks


def efficiency(p):
    return round(p["compute_seconds"] / p["seconds_per_iteration"], 3)


# Published scaling efficiencies, each with its setting: a node of 8 V100s behind one
# 100 Gbit/s NIC, its GPUs reduced over NVLink first, so a node is one worker of the exchange.
# Herring (Thangakrishnan et al., SC'20, abstract): BERT-large, 85 % at 2,048 GPUs on AWS EFA.
# BytePS (Jiang et al., OSDI'20, as issue 42 cites it): BERT-large ~90 % at 256 GPUs, against
# ~70 % for Horovod + NCCL (a ring).
PUBLISHED = [
    {"system": "Herring", "model": "bert-large", "gpus": 2048, "gpus_per_node": 8,
     "gbps": 100, "efficiency": 0.85, "ring_efficiency": None},
    {"system": "BytePS", "model": "bert-large", "gpus": 256, "gpus_per_node": 8,
     "gbps": 100, "efficiency": 0.90, "ring_efficiency": 0.70},
]


def tensors_file(tmp, model):
    path = os.path.join(tmp, model + ".txt")
    if not os.path.exists(path):
        models.write_tensors_file(model, path)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "sim"))
    p.add_argument("--models", default="resnet50,bert-large,gpt-1.5b")
    p.add_argument("--workers", default="16,64,256,1024,4096")
    p.add_argument("--gbps", default="25,100,400")
    p.add_argument("--no-published", dest="published", action="store_false",
                   help="skip the published systems' settings")
    p.add_argument("--from-tsv", help="write the table and plots again from a scale.tsv")
    a = p.parse_args()
    if a.from_tsv:
        import csv
        with open(a.from_tsv) as f:
            rows = [{k: (float(v) if k in ("gbps", "ps_efficiency", "ring_efficiency") else
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
            ring, tree, sized, racks = plan(phubctl, tensors_file(tmp, model), n, gbps)
            row = {"model": model, "workers": n, "gbps": gbps, "racks": racks,
                   "pboxes_per_rack": sized["pboxes_per_rack"], "nics": sized["nics"],
                   "cores": sized["cores"],
                   "compute_ms": round(1000 * sized["compute_seconds"], 2),
                   "ps_ms": round(1000 * sized["seconds_per_iteration"], 2),
                   "ps_efficiency": efficiency(sized), "ps_busiest": sized["bottleneck"],
                   "ring_ms": round(1000 * ring["seconds_per_iteration"], 2),
                   "ring_efficiency": efficiency(ring),
                   "tree_efficiency": efficiency(tree) if tree else "-",
                   "ring_over_ps": round(ring["seconds_per_iteration"] /
                                         sized["seconds_per_iteration"], 2)}
            rows.append(row)
            log(f"[{i + 1}/{len(points)}, {time.monotonic() - start:.0f} s] {model} N={n} "
                f"{gbps:g} Gbit/s: ps {row['ps_ms']} ms ({row['ps_efficiency']}), ring "
                f"{row['ring_ms']} ms ({row['ring_efficiency']})")
        published = []
        for pub in PUBLISHED if a.published else []:
            nodes = pub["gpus"] // pub["gpus_per_node"]
            ring, tree, sized, _ = plan(phubctl, tensors_file(tmp, pub["model"]), nodes,
                                        pub["gbps"], racks=1)
            published.append({**pub, "nodes": nodes, "ps_efficiency": efficiency(sized),
                              "pboxes": sized["pboxes_per_rack"], "nics": sized["nics"],
                              "cores": sized["cores"], "ring_efficiency_sim": efficiency(ring),
                              "tree_efficiency_sim": efficiency(tree)})
            log(f"{pub['system']}'s setting ({pub['gpus']} GPUs): PHub {efficiency(sized)}, ring "
                f"{efficiency(ring)} against the published {pub['efficiency']}")
    tables.write_tsv(os.path.join(a.out, "scale.tsv"), rows, list(rows[0]))
    if published:
        tables.write_tsv(os.path.join(a.out, "published.tsv"), published, list(published[0]))
    return render(a, rows, f"{time.monotonic() - start:.0f} s for {len(points)} points", published)


def render(a, rows, how, published=()):
    lines = [f"Training at scale (simulated, {how}): racks of {RACK} behind {OVERSUBSCRIPTION}:1 "
             "uplinks; the PS with the PBoxes `phubctl plan` sizes a rack (verbs), hierarchical "
             "across racks; efficiency: a worker's compute alone over the iteration.", ""]
    lines += tables.md_table(
        ["model", "N", "Gbit/s", "racks", "PBoxes a rack x NICs, cores", "compute ms", "PS ms",
         "PS efficiency", "PS busiest", "ring ms", "ring efficiency", "ring / PS",
         "tree efficiency"],
        [[str(c) for c in (r["model"], r["workers"], f"{float(r['gbps']):g}", r["racks"],
                           f"{r['pboxes_per_rack']} x {r['nics']}, {r['cores']}",
                           r["compute_ms"], r["ps_ms"], r["ps_efficiency"], r["ps_busiest"],
                           r["ring_ms"], r["ring_efficiency"], r["ring_over_ps"],
                           r["tree_efficiency"])] for r in rows],
        "lrrrlrrrlrrrr")
    if published:
        lines += ["", "Beside the published figures (a worker: a node of 8 GPUs behind one NIC, "
                  "one non-blocking network; the compute at this project's calibrated rate, "
                  "not a V100's):", ""]
        lines += tables.md_table(
            ["system", "model", "GPUs (nodes)", "Gbit/s a node", "published efficiency",
             "PHub predicted", "PBoxes x NICs, cores", "ring predicted", "ring published",
             "tree predicted"],
            [[p["system"], p["model"], f"{p['gpus']} ({p['nodes']})", f"{p['gbps']:g}",
              f"{p['efficiency']:.2f}", f"{p['ps_efficiency']:.2f}",
              f"{p['pboxes']} x {p['nics']}, {p['cores']}", f"{p['ring_efficiency_sim']:.2f}",
              "-" if p["ring_efficiency"] is None else f"{p['ring_efficiency']:.2f}",
              f"{p['tree_efficiency_sim']:.2f}"]
             for p in published], "llrrrrlrrr")
    print(tables.write_markdown(os.path.join(a.out, "scale.md"), lines))
    plt = plots.import_pyplot()
    if plt is not None:
        for model in dict.fromkeys(r["model"] for r in rows):
            fig, ax = plt.subplots(figsize=(7, 4))
            for gbps in sorted({r["gbps"] for r in rows}):
                mine = [r for r in rows if r["model"] == model and r["gbps"] == gbps]
                ns = [r["workers"] for r in mine]
                ax.plot(ns, [r["ps_efficiency"] for r in mine], marker="o",
                        label=f"PS {gbps:g} Gbit/s")
                ax.plot(ns, [r["ring_efficiency"] for r in mine], marker="x", ls="--",
                        label=f"ring {gbps:g} Gbit/s")
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, 1.05)
            ax.set_xlabel("workers")
            ax.set_ylabel("scaling efficiency")
            ax.set_title(f"{model}: hierarchical PS vs ring (simulated)")
            ax.legend(fontsize=7)
            plots.save(plt, fig, os.path.join(a.out, f"scale_{model}.png"), 110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
