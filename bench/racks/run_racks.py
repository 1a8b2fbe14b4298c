#!/usr/bin/env python3
"""run_racks.py: racks of racks — the hierarchical PS against every flat scheme across an
oversubscribed core.

On an emulated cluster (deploy/netns/rack.sh --topology racks): R racks of n worker hosts
(links B) and a PBox (link n.B) on each rack's switch, the rack switches joined by a core switch
through one uplink of U each (oversubscription n.B/U). Each system moves one S-byte float32
tensor per iteration among the N = R.n workers (bench/exchange/systems.py: the same workers,
timing rule and result check as the exchange benchmark):

  ps-racks           hierarchical: each rack's PBox sums its rack, the chunks' homes (spread
                     over the R PBoxes) reduce the R sums and send the weights back
  ps                 flat PS on one PBox (rack 0's): the other racks' workers cross the core
  ps-multi           keys spread over the R PBoxes (each worker pushes to every PBox)
  ring, gloo-ring-chunked, mpi-ring
                     ring allreduce in rack order (ranks w0..w{N-1}, rack by rack)

Each uplink U given (--uplinks) is one cluster, built once; on it every system runs --reps
times, the systems alternating within a repetition. Printed per system: median time per
iteration, its link-bound limit (bench/topo/topology.py racks_limits_s, derived there), the
ratio, and the hierarchical PS's speed-up over the best flat scheme of the same cluster.

Bar (issue 22): at 4:1 oversubscription and S = 100 MiB, the hierarchical PS is >= 1.4x faster
per iteration than the best flat scheme and within 1.2x of its own limit.

Writes OUT/racks.tsv (one row per uplink x system x repetition), OUT/racks.md and OUT/racks.png;
every process's log under OUT/raw/. Needs root (ip netns, tc).

  sudo bench/racks/run_racks.py                                # R = 2, n = 4, 4:1 and 2:1
  sudo bench/racks/run_racks.py --mib 8 --reps 1 --uplinks 1gbit --systems ps-racks,ring
"""

import json
import os
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "topo"))
sys.path.insert(0, os.path.join(HERE, "..", "exchange"))

import nets  # noqa: E402
import systems  # noqa: E402
import topology  # noqa: E402
from benchlib import BenchError, machine, plots, tables  # noqa: E402
from benchlib.cli import parse_list, parser  # noqa: E402
from benchlib.log import log  # noqa: E402
from benchlib.outdir import fresh_dir  # noqa: E402
from benchlib.procs import kill_children, start, wait_all, wait_port_file  # noqa: E402

MIB = 1 << 20
HIERARCHICAL = "ps-racks"
DEFAULT_SYSTEMS = "ps-racks,ps,ps-multi,ring,gloo-ring-chunked,mpi-ring"
BAR_SPEEDUP, BAR_LIMIT, BAR_OVERSUBSCRIPTION = 1.4, 1.2, 4.0


# Training (--train MODEL:BATCH): phub-worker on every worker host, through each scheme.
TRAIN_SCHEMES = ["hierarchical", "flat-ps", "keys-spread", "ring"]


def train_once(a, net, scheme, run_dir):
    """One phub-worker job of the N workers through `scheme`; returns the slowest worker's
    median ms per mini-batch (synthetic data, --train-iters timed steps)."""
    os.makedirs(run_dir)
    model, batch = a.train.split(":")
    workers = [h for h in net.topo.hosts if not topology.is_ps_host(h)]
    pboxes = net.ps_hosts()
    daemons, procs, outs = [], [], []

    def phubd(host, extra):
        port_file = os.path.join(run_dir, f"phubd-{host}.port")
        log_path = os.path.join(run_dir, f"phubd-{host}.log")
        argv = [a.settings.bins["phubd"], "--port", str(systems.RACKS_PORT), "--port-file",
                port_file, "--listen", net.ip(host), "--cores", str(a.cores), "--no-pin",
                "--chunk-bytes", str(a.chunk_bytes), "--optimizer", "momentum", "--lr", "0.01"]
        argv += net.phubd_access()
        proc = start(net.wrap(host, argv + extra), log_path)
        daemons.append(proc)
        wait_port_file(port_file, proc, f"phubd on {host}", log_path)
        return f"{net.ip(host)}:{systems.RACKS_PORT}"

    racks_file = os.path.join(run_dir, "racks.txtpb")
    with open(racks_file, "w") as f:
        f.write(net.racks_file(systems.RACKS_PORT))
    if scheme == "hierarchical":
        for r, host in enumerate(pboxes):
            phubd(host, ["--topology", racks_file, "--rack", f"r{r}"])
        comm = ["--comm", "ps", "--topology", racks_file]
    elif scheme == "flat-ps":
        comm = ["--comm", "ps", "--ps", phubd(pboxes[0], [])]
    elif scheme == "keys-spread":
        comm = ["--comm", "ps-colocated"]
        for host in pboxes:
            comm += ["--ps", phubd(host, [])]
    else:
        rendezvous = os.path.join(run_dir, "rendezvous")
        os.makedirs(rendezvous)
        comm = ["--comm", "ring", "--rendezvous", rendezvous, "--optimizer", "momentum",
                "--lr", "0.01"]
    try:
        for r, host in enumerate(workers):
            out = os.path.join(run_dir, f"w{r}.json")
            log_path = os.path.join(run_dir, f"w{r}.log")
            argv = [a.worker, "--model", model, "--batch", batch, "--iters",
                    str(a.train_iters), "--warmup", "1", "--log-level", "warn", "--results",
                    out, "--rank", str(r), "--world", str(len(workers)), "--hostname", host,
                    "--listen-host", net.ip(host)] + comm
            procs.append((f"{scheme} rank {r}",
                          start(net.wrap(host, argv), log_path, {"OMP_NUM_THREADS": "1"}),
                          log_path))
            outs.append(out)
        wait_all(procs, a.train_timeout)
    finally:
        kill_children()
    return max(json.load(open(f))["median_ms"] for f in outs)


def train_cluster(a, net, uplink, oversub, raw):
    rows = []
    for rep in range(a.train_reps):
        order = TRAIN_SCHEMES if rep % 2 == 0 else list(reversed(TRAIN_SCHEMES))
        for scheme in order:
            ms = train_once(a, net, scheme, os.path.join(raw, f"train-u{uplink}-{scheme}-r{rep}"))
            rows.append({"uplink": uplink, "oversubscription": oversub, "model": a.train,
                         "scheme": scheme, "rep": rep, "ms_per_batch": ms})
            log(f"  U={uplink} training rep {rep + 1}/{a.train_reps} {scheme:<13} {ms:8.1f} ms "
                f"per mini-batch ({a.train}, {len(net.topo.hosts) - len(net.ps_hosts())} "
                f"workers)")
    return rows


def run_cluster(a, uplink, raw):
    """Every system, --reps times, on one cluster of uplink U (and the training runs, with
    --train). Returns (exchange rows, training rows)."""
    n_total = a.racks * a.n
    net = nets.RackNet("racks", n_total, a.rate, racks=a.racks, uplink=uplink,
                       pbox_rate=a.pbox_rate)
    rows = []
    oversub = a.n * topology.parse_rate(a.rate) / topology.parse_rate(uplink)
    try:
        log(f"[racks R={a.racks} n={a.n} B={a.rate} U={uplink}: {oversub:g}:1] {net.describe()}")
        for rep in range(a.reps):
            # Alternate the order so that no system always runs first (or last) on a warm box.
            order = a.systems if rep % 2 == 0 else list(reversed(a.systems))
            for key in order:
                limit = net.limit_s(key, n_total, a.mib * MIB)
                tag = f"u{uplink}-{key}-r{rep}"
                try:
                    times, checksum = systems.run(systems.BY_KEY[key], net, a.settings,
                                                  n_total, a.mib, os.path.join(raw, tag), limit)
                except BenchError as e:
                    # Once: a peer library's rare failure (seen once: a Gloo rank closing its
                    # pair at S = 100 MiB) must not cost the whole run.
                    log(f"  {key} failed, running it again: {str(e).splitlines()[0]}")
                    times, checksum = systems.run(systems.BY_KEY[key], net, a.settings,
                                                  n_total, a.mib,
                                                  os.path.join(raw, tag + "-again"), limit)
                ms = statistics.median(times) * 1e3
                rows.append({"uplink": uplink, "oversubscription": oversub, "system": key,
                             "rep": rep, "ms_per_iter": ms, "limit_ms": limit * 1e3,
                             "over_limit": ms / (limit * 1e3), "checksum": checksum})
                log(f"  U={uplink} rep {rep + 1}/{a.reps} {key:<18} {ms:8.1f} ms "
                    f"(limit {limit * 1e3:.0f} ms, {ms / (limit * 1e3):.2f}x)")
        training = train_cluster(a, net, uplink, oversub, raw) if a.train else []
    finally:
        kill_children()
        net.close()
    # Same inputs, same reduction order: a system's repetitions agree bit for bit.
    for key in a.systems:
        seen = {r["checksum"] for r in rows if r["system"] == key}
        if len(seen) > 1:
            raise BenchError(f"U={uplink} {key}: results differ between repetitions: {seen}")
    return rows, training


def summarize(rows, systems_order):
    """Per (uplink, system): the median over repetitions; per uplink: the best flat scheme
    and the hierarchical PS's speed-up over it."""
    out = []
    for uplink in dict.fromkeys(r["uplink"] for r in rows):
        mine = [r for r in rows if r["uplink"] == uplink]
        med = {}
        for key in systems_order:
            ms = [r["ms_per_iter"] for r in mine if r["system"] == key]
            if ms:
                med[key] = statistics.median(ms)
        flat = {k: v for k, v in med.items() if k != HIERARCHICAL}
        best = min(flat, key=flat.get) if flat else None
        for key, ms in med.items():
            limit = next(r["limit_ms"] for r in mine if r["system"] == key)
            out.append({"uplink": uplink, "oversubscription": mine[0]["oversubscription"],
                        "system": key, "ms_per_iter": ms, "limit_ms": limit,
                        "over_limit": ms / limit, "reps": sum(r["system"] == key for r in mine),
                        "best_flat": best,
                        "speedup_over_best_flat": (med[best] / med[HIERARCHICAL]
                                                   if best and HIERARCHICAL in med else None)})
    return out


def bar_lines(summary):
    lines = []
    for s in summary:
        if s["system"] != HIERARCHICAL or s["speedup_over_best_flat"] is None:
            continue
        speed, over = s["speedup_over_best_flat"], s["over_limit"]
        binding = abs(s["oversubscription"] - BAR_OVERSUBSCRIPTION) < 1e-9
        verdict = ("met" if speed >= BAR_SPEEDUP and over <= BAR_LIMIT else "NOT met") \
            if binding else "context (the bar is at 4:1)"
        lines.append(f"- {s['oversubscription']:g}:1 (U = {s['uplink']}): hierarchical "
                     f"{s['ms_per_iter']:.0f} ms, {speed:.2f}x faster than the best flat scheme "
                     f"({s['best_flat']}; bar >= {BAR_SPEEDUP}x), {over:.2f}x its own limit "
                     f"(bar <= {BAR_LIMIT}x): {verdict}")
    return lines


def markdown(a, summary, notes):
    md = ["# Racks of racks: hierarchical PS vs flat schemes", "",
          f"R = {a.racks} racks x n = {a.n} workers, B = {a.rate} per worker, a PBox per rack "
          f"(link {a.pbox_rate or 'n.B + U'}), uplinks U per rack; phubd --cores {a.cores} "
          f"--chunk-bytes {a.chunk_bytes}; S = {a.mib:g} MiB float32 per worker per iteration; "
          f"{a.iters} timed iterations (+{a.warmup} warm-up) per run, median over iterations, "
          f"median of {a.reps} runs; limits from bench/topo/topology.py racks_limits_s.", ""]
    head = ["U", "oversub.", "system", "ms / iteration", "limit ms", "x limit",
            "hierarchical speed-up"]
    body = []
    for s in summary:
        body.append([s["uplink"], f"{s['oversubscription']:g}:1", s["system"],
                     f"{s['ms_per_iter']:.1f}", f"{s['limit_ms']:.0f}", f"{s['over_limit']:.2f}",
                     f"{s['ms_per_iter'] / next(x['ms_per_iter'] for x in summary if x['uplink'] == s['uplink'] and x['system'] == HIERARCHICAL):.2f}x"
                     if any(x["uplink"] == s["uplink"] and x["system"] == HIERARCHICAL
                            for x in summary) else "-"])
    md += tables.md_table(head, body)
    md += ["", "(hierarchical speed-up: this system's time over the hierarchical PS's)", ""]
    md += ["## Bar", ""] + bar_lines(summary) + ["", "## Machine", ""] + notes
    return md


def training_markdown(a, training):
    md = ["", "## Training", "",
          f"phub-worker, {a.train} (MODEL:BATCH per worker), synthetic data, momentum SGD; "
          f"{a.train_iters} timed steps after 1 warm-up; the slowest worker's median ms per "
          f"mini-batch, median of {a.train_reps} runs; all workers share this machine's CPUs.", ""]
    body = []
    for uplink in dict.fromkeys(r["uplink"] for r in training):
        med = {}
        for scheme in TRAIN_SCHEMES:
            ms = [r["ms_per_batch"] for r in training
                  if r["uplink"] == uplink and r["scheme"] == scheme]
            if ms:
                med[scheme] = statistics.median(ms)
        over = next(r["oversubscription"] for r in training if r["uplink"] == uplink)
        for scheme, ms in med.items():
            body.append([uplink, f"{over:g}:1", scheme, f"{ms:.0f}",
                         f"{ms / med['hierarchical']:.2f}x" if "hierarchical" in med else "-"])
    md += tables.md_table(["U", "oversub.", "scheme", "ms / mini-batch",
                           "time over hierarchical"], body)
    return md


def plot(path, summary):
    plt = plots.import_pyplot()
    if plt is None:
        return
    uplinks = list(dict.fromkeys(s["uplink"] for s in summary))
    keys = list(dict.fromkeys(s["system"] for s in summary))
    fig, axes = plt.subplots(1, len(uplinks), figsize=(5.5 * len(uplinks), 4), squeeze=False)
    for ax, uplink in zip(axes[0], uplinks):
        mine = {s["system"]: s for s in summary if s["uplink"] == uplink}
        xs = range(len(keys))
        ax.bar(xs, [mine[k]["ms_per_iter"] if k in mine else 0 for k in keys],
               color=["tab:green" if k == HIERARCHICAL else "tab:gray" for k in keys])
        ax.scatter(xs, [mine[k]["limit_ms"] if k in mine else 0 for k in keys], marker="_",
                   s=600, color="black", label="link-bound limit", zorder=3)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(keys, rotation=30, ha="right")
        over = next(iter(mine.values()))["oversubscription"]
        ax.set_title(f"U = {uplink} ({over:g}:1)")
        ax.set_ylabel("ms per iteration")
        ax.legend()
    plots.save(plt, fig, path, 120)


def main():
    p = parser(__doc__)
    p.add_argument("--racks", type=int, default=2, help="R, racks (default: 2)")
    p.add_argument("--n", type=int, default=4, help="workers per rack (default: 4)")
    p.add_argument("--rate", default="1gbit", help="worker link rate B (default: 1gbit)")
    p.add_argument("--uplinks", default="1gbit,2gbit",
                   help="comma list of uplink rates U, one cluster each (default: 1gbit,2gbit: "
                        "4:1 and 2:1 at n = 4, B = 1gbit)")
    p.add_argument("--mib", type=float, default=100, help="S, MiB per worker per iteration")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cores", type=int, default=2, help="phubd --cores on each PBox")
    p.add_argument("--chunk-bytes", type=int, default=256 << 10,
                   help="phubd --chunk-bytes, every system (default 256 KiB: a chunk crosses "
                        "three hops in the hierarchy, and smaller chunks fill and drain that "
                        "pipeline sooner: 1 MiB measured 4-8 %% slower, 4 MiB 29 %%)")
    p.add_argument("--pbox-rate", default=None,
                   help="each PBox's link (rack.sh --pbox-rate; default n.B + U: a NIC-worth "
                        "per worker and one for the uplink)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"default: {DEFAULT_SYSTEMS}")
    p.add_argument("--train", default="alexnet:2",
                   help="MODEL:BATCH per worker of the training rows (phub-worker, synthetic "
                        "data); '' for none (default: alexnet:2, 61 M parameters)")
    p.add_argument("--train-iters", type=int, default=3)
    p.add_argument("--train-reps", type=int, default=2)
    p.add_argument("--train-timeout", type=int, default=900, help="seconds per training run")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "racks"))
    a = p.parse_args()
    a.systems = parse_list(a.systems, str)
    unknown = [k for k in a.systems if k not in systems.BY_KEY]
    if unknown:
        p.error(f"--systems: unknown {unknown}; known: {', '.join(systems.BY_KEY)}")
    problem = nets.rack_problem(otherwise=None)
    if problem:
        p.error(problem)
    needed = {"phubd": os.path.join(a.build, "phub", "server", "phubd")}
    for key in a.systems:
        binary = systems.BY_KEY[key].binary
        needed[binary] = os.path.join(a.build, "bench", "exchange", binary)
    missing = [b for b in needed.values() if not os.access(b, os.X_OK)]
    if missing:
        p.error(f"not built: {', '.join(missing)} (deploy/build.sh)")
    if "mpi-ring" in a.systems and shutil.which("mpirun") is None:
        p.error("mpi-ring: mpirun not on PATH (deploy/install-deps.sh)")
    if nets.racks_up():
        p.error(f"a rack is up already ({', '.join(nets.racks_up())}): one at a time")
    a.settings = systems.Settings(needed, a.iters, a.warmup, a.cores, a.lr, a.chunk_bytes)
    a.worker = os.path.join(a.build, "worker", "phub-worker")
    if a.train and not os.access(a.worker, os.X_OK):
        p.error(f"not built: {a.worker}")
    raw = os.path.join(a.out, "raw")
    fresh_dir(a.out)
    os.makedirs(raw)
    start_load = machine.load_average()
    rows, training = [], []
    try:
        for uplink in parse_list(a.uplinks, str):
            exchange, trained = run_cluster(a, uplink, raw)
            rows += exchange
            training += trained
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    finally:
        kill_children()
        nets.cleanup()
    tables.write_tsv(os.path.join(a.out, "racks.tsv"), rows, list(rows[0].keys()),
                     cell=tables.short_float)
    summary = summarize(rows, a.systems)
    md = markdown(a, summary, [machine.describe(start_load)])
    if training:
        tables.write_tsv(os.path.join(a.out, "racks_training.tsv"), training,
                         list(training[0].keys()), cell=tables.short_float)
        md += training_markdown(a, training)
    tables.write_markdown(os.path.join(a.out, "racks.md"), md)
    plot(os.path.join(a.out, "racks.png"), summary)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
