#!/usr/bin/python3
"""validate.py: the simulator (phub/sim, through `phubctl plan --json`) against every exchange
this project measured on the emulated racks that it models yet (bench/sim/measured.tsv: each
row's source in docs/benchmarks.md), predicted beside measured, and the ratio. Issue 42's bar:
within +-10 %. Takes a second or two: every row is one simulation.

  bench/sim/validate.py [--build build] [--out results/sim]

Writes OUT/validation.tsv and OUT/validation.md."""
import argparse
import csv
import json
import os
import shlex
import statistics
import subprocess
import tempfile
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

sys.path.insert(0, os.path.join(ROOT, "bench", "exchange"))

from benchlib import tables  # noqa: E402
from systems import multips_partition_bytes  # noqa: E402

sys.path.insert(0, HERE)
import models  # noqa: E402

TMP = tempfile.TemporaryDirectory()  # the training rows' tensors files

SCHEME = {("pbox", "ps"): "ps-pbox", ("cloud", "ps"): "ps-cloud", ("pbox", "ring"): "ring",
          ("cloud", "ring"): "ring", ("multips", "ps-multi"): "ps-multi",
          ("racks", "ps-racks"): "ps-racks", ("racks", "ps"): "ps-pbox",
          ("racks", "ps-multi"): "ps-multi", ("racks", "ring"): "ring",
          # bench/pbox/run_nics.py's PS host of one or two NICs; bench/tenants' shared PBox
          ("pbox-nics", "ps"): "ps-pbox", ("tenants-pbox", "ps"): "ps-pbox",
          ("tenants-cloud", "ps"): "ps-cloud",
          # bench/train/run_distributed.py's phub-worker training on the racks
          ("train-pbox", "ps"): "ps-pbox", ("train-pbox", "ring"): "ring",
          ("train-cloud", "ps"): "ps-cloud", ("train-cloud", "ring"): "ring"}


def predict(phubctl, row):
    """The row's predicted ms: its scheme's time an iteration, or with `job` that job's (the
    row's `flags` are plan flags of its own: NICs, jobs, pacing, streams)."""
    flags = {"--schemes": SCHEME[(row["topology"], row["system"])], "--workers": row["workers"],
             "--mib": row["mib"], "--gbps": "1", "--ps-cores": "2"}
    if row["racks"] != "1":  # bench/racks/run_racks.py's clusters
        flags.update({"--racks": row["racks"], "--uplink-gbps": row["uplink_gbps"],
                      "--chunk-bytes": row["chunk_bytes"]})
    elif row["system"] == "ps-multi":  # as run_exchange.py runs it
        k = int(row["ps_hosts"])
        flags.update({"--ps-hosts": str(k), "--chunk-bytes": str(
            multips_partition_bytes(int(row["workers"]), k, float(row["mib"])))})
    elif row["chunk_bytes"]:
        flags["--chunk-bytes"] = row["chunk_bytes"]
    extra = shlex.split(row["flags"])
    flags.update(zip(extra[::2], extra[1::2]))
    if "--model" in flags:  # a training row: the model's tensors and FLOPs, the rig's compute
        model, compute_ms = flags.pop("--model"), float(flags.pop("--compute-ms"))
        path = os.path.join(TMP.name, model + ".txt")
        models.write_tensors_file(model, path)
        forward, backward = models.step_flops(model)
        flags["--tensors-file"] = path
        flags["--gpu-tflops"] = str((forward + sum(backward)) / (compute_ms / 1000) / 1e12)
    argv = [phubctl, "plan", "--json"] + [x for kv in flags.items() for x in kv]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    scheme = json.loads(out)["schemes"][0]
    if row["job"]:
        return 1000 * scheme["job_seconds_per_iteration"][int(row["job"])]
    return 1000 * scheme["seconds_per_iteration"]


def setting(row):
    """What a row sets beyond the table's columns, for the table."""
    extra = shlex.split(row["flags"])
    # validate.py's own (a training row's model and compute) in words, plan's as flags
    words = {"--model": "model {}", "--compute-ms": "compute {} ms"}
    shown = [words[k].format(v) if k in words else f"{k} {v}"
             for k, v in zip(extra[::2], extra[1::2]) if k not in ("--iterations", "--bucket-mib")]
    return " ".join(shown + ([f"(job {row['job']})"] if row["job"] else [])) or "-"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "sim"))
    a = p.parse_args()
    phubctl = os.path.join(a.build, "phub", "ctl", "phubctl")
    if not os.access(phubctl, os.X_OK):
        raise SystemExit(f"{phubctl} missing: run deploy/build.sh first")
    os.makedirs(a.out, exist_ok=True)
    rows = []
    with open(os.path.join(HERE, "measured.tsv")) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            predicted = predict(phubctl, row)
            measured = float(row["ms"])
            rows.append({**row, "predicted_ms": round(predicted, 1),
                         "ratio": round(predicted / measured, 3),
                         "within_10pct": abs(predicted / measured - 1) <= 0.10})
    tables.write_tsv(os.path.join(a.out, "validation.tsv"), rows,
                     ["topology", "system", "workers", "ps_hosts", "racks", "uplink_gbps", "mib",
                      "flags", "job", "ms", "predicted_ms", "ratio",
                      "within_10pct", "source"])
    within = sum(r["within_10pct"] for r in rows)
    lines = [f"The simulator against the measured exchanges (bench/sim/measured.tsv): "
             f"{within} of {len(rows)} rows within +-10 %; median |ratio - 1| "
             f"{statistics.median(abs(r['ratio'] - 1) for r in rows):.3f}.", ""]
    lines += tables.md_table(
        ["topology", "system", "N", "K", "racks x uplink", "setting", "S MiB", "measured ms",
         "predicted ms", "predicted / measured", "within 10 %"],
        [[r["topology"], r["system"], r["workers"], r["ps_hosts"] or "-",
          f"{r['racks']} x {r['uplink_gbps']} Gbit/s" if r["racks"] != "1" else "-", setting(r),
          r["mib"], r["ms"], f"{r['predicted_ms']:.1f}", f"{r['ratio']:.3f}",
          "yes" if r["within_10pct"] else "no"] for r in rows], "llrrllrrrrl")
    print(tables.write_markdown(os.path.join(a.out, "validation.md"), lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
