#!/usr/bin/env python3
"""run_exchange.py: the `exchange` benchmark — PS vs ring allreduce, on loopback and on emulated racks.

One driver over systems x topologies x S x N. Systems (systems.py): raw-tcp (reference), ps,
ps-colocated, ps-multi, ring (ours), gloo-ring-chunked, gloo-allreduce, mpi, mpi-ring.
Topologies:
  loopback   every process on 127.0.0.1 (no link limit; raw TCP is the reference)
  pbox       N worker hosts with links of B, one PS host with N x B (PBox: a balanced box)
  cloud      the same, but the PS host has one link of B (the typical cloud box)
  colocated  N worker hosts with links of B, no PS host: a phubd on every worker host
  multips    N worker hosts and K PS hosts, all with links of B: a phubd on each PS host
             (BytePS's k CPU boxes); K from --ps-hosts (default n/2,n: K = N/2 and K = N)
The racks are network namespaces with veth links shaped by tc (deploy/netns/rack.sh), built
for each (topology, N) (multips: each (N, K)) and torn down after (also on error or Ctrl-C).
multips is not in the default --topologies: name it.

Which system runs where: loopback all but ps-multi; pbox and cloud ps and the allreduces (on
the worker hosts); colocated ps-colocated and the allreduces; multips ps-multi on every K, and
the allreduces once per N, on the rack with the largest K (they do not use the PS hosts).

Timing rule, all systems: barrier-aligned start, per-iteration max over workers of
(first byte sent -> last byte of the result in place), median over all timed iterations of
all repetitions, warm-up excluded, every result checked (PS: weights after known SGD steps,
identical on all workers; allreduce: the mean on every rank, identical bytes).

Physical limit per iteration (bench/topo/topology.py), B in bits/s, S in bytes:
  ps on pbox S/B; ps on cloud N.S/B; ring (any) and ps-colocated 2(N-1)/N . S/B;
  ps-multi on multips max(S/B, N.S/(K.B)).
Each system's time is printed with its ratio to its limit; on loopback, with its ratio to
raw TCP moving the PS's bytes (byte rate = 2.N.S / t).

Writes OUT/exchange.tsv (every run), OUT/exchange.md (tables per topology), OUT/exchange_S<S>.png
(time vs N per system, one panel per topology), and every process's log and timings under
OUT/raw/. Progress on stderr. Exit 1 if any process fails, times out or computes a wrong result.

  deploy/build.sh                                   # builds everything, incl. the workers
  sudo bench/exchange/run_exchange.py --quick       # < 5 min: S 4,32; N 2,4; 1 repetition
  sudo bench/exchange/run_exchange.py               # the full grid (about an hour on 2 cores)
  sudo bench/exchange/run_exchange.py --topologies multips --workers 4,8 --sizes 100 \
      --systems ps-multi,ring,gloo-ring-chunked,mpi-ring --ps-hosts n/2,n
  bench/exchange/run_exchange.py --topologies loopback --systems raw-tcp,ps,ring
  bench/exchange/run_exchange.py --skip-main --sweep-chunk   # choose phubd's --chunk-bytes
The racks need root (ip netns, tc); loopback does not.
"""

import datetime
import os
import re
import shutil
import signal
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "topo"))

import nets  # noqa: E402
import systems  # noqa: E402
from benchlib import BenchError, machine, outdir, plots, tables  # noqa: E402
from benchlib.cli import parse_list, parser  # noqa: E402
from benchlib.log import Progress, log  # noqa: E402
from benchlib.procs import kill_children  # noqa: E402
from timing import per_iteration  # noqa: E402

MIB = 1 << 20
TOPOLOGIES = ["loopback", "pbox", "cloud", "colocated", "multips"]
DEFAULT_TOPOLOGIES = ["loopback", "pbox", "cloud", "colocated"]
TOPOLOGY_SYSTEMS = {
    # ps-multi needs K PS hosts (multips only), ps-racks a rack of racks (bench/racks): on
    # loopback every host is 127.0.0.1 and there is no racks file to give them.
    "loopback": [s.key for s in systems.SYSTEMS if s.key not in ("ps-multi", "ps-racks")],
    # On a rack the reference is the links' physical limit; raw-tcp (push all, then pull all)
    # would not be one: it does not overlap the two directions as the PS does.
    "pbox": ["ps", "ps-fifo", "ps-bf16"] + systems.NETWORK_RINGS,
    "cloud": ["ps", "ps-fifo"] + systems.NETWORK_RINGS,
    "colocated": ["ps-colocated"] + systems.NETWORK_RINGS,
    "multips": ["ps-multi"] + systems.NETWORK_RINGS,
}
# The PS of each topology, compared with the best allreduce.
TOPOLOGY_PS = {"loopback": "ps", "pbox": "ps", "cloud": "ps", "colocated": "ps-colocated",
               "multips": "ps-multi"}
# Issue 19's bar for multips: at K = N = 4, S = 100 MiB the PS at least 1.35x faster than the
# best allreduce and within 1.15x of its limit.
BAR = {"workers": 4, "ps_hosts": 4, "mib": 100.0, "speedup": 1.35, "x_limit": 1.15}
DEFAULT_SWEEP = "65536,262144,524288,1048576,4194304"
SWEEP_WORKERS = 2
SWEEP_MIB = 32


def fmt_ms(times):
    return f"{statistics.median(times) * 1e3:.1f} ms"


def summarize(topology, system, n, mib, reps, checksum, limit, k=None):
    times = [t for rep in reps for t in rep]
    med = statistics.median(times)
    row = {"topology": topology, "system": system, "workers": n, "mib": mib,
           "ms": med * 1e3, "ms_min": min(times) * 1e3, "ms_max": max(times) * 1e3,
           "samples": len(times), "algbw": mib * MIB / med / 1e9, "checksum": checksum}
    if k is not None:
        row["ps_hosts"] = k
    if limit:
        row["limit_ms"] = limit * 1e3
        row["x_limit"] = med / limit
    return row


def racks(topologies, workers, chosen, ps_hosts):
    """The racks to build, in order: (topology, N, K or None, systems to run there). multips
    gets one rack per K of ps_hosts(N); its allreduces run once per N, on the rack with the
    largest K (the bar's K = N with the default --ps-hosts), alternated with the PS there."""
    out = []
    for topo in topologies:
        for n in workers:
            keys = [k for k in TOPOLOGY_SYSTEMS[topo] if k in chosen]
            if not keys:
                continue
            if topo != "multips":
                out.append((topo, n, None, keys))
                continue
            ks = ps_hosts(n)
            for k in ks:
                here = [key for key in keys if key not in systems.RINGS or k == ks[-1]]
                if here:
                    out.append((topo, n, k, here))
    return out


def grid(args, settings, topologies, sizes, workers, chosen, raw_dir):
    """Runs everything; yields a summary row per (topology, system, N, K, S)."""
    plan = racks(topologies, workers, chosen, args.ps_hosts_for)
    progress = Progress(sum(len(keys) for _, _, _, keys in plan) * len(sizes) * args.reps)
    for topo, n, k, keys in plan:
        net = nets.make(topo, n, args.rate, k)
        try:
            log(f"[{topo} N={n}{'' if k is None else f' K={k}'}] {net.describe()}")
            for mib in sizes:
                reps = {key: [] for key in keys}
                cpus = {key: [] for key in keys}
                sums = {}
                for rep in range(args.reps):
                    for key in keys:
                        system = systems.BY_KEY[key]
                        limit = net.limit_s(key, n, mib * MIB)
                        tag = (f"{topo}-{key}-n{n}{'' if k is None else f'-k{k}'}"
                               f"-s{mib:g}-r{rep}")
                        t, checksum = systems.run(system, net, settings, n, mib,
                                                  os.path.join(raw_dir, tag), limit or 0.0)
                        reps[key].append(t)
                        cpu = systems.phubd_cpu(os.path.join(raw_dir, tag))
                        if cpu:
                            cpus[key].append(cpu)
                        sums.setdefault(key, set()).add(checksum)
                        progress.step()
                        lim = f", limit {limit * 1e3:.0f} ms" if limit else ""
                        kk = "" if k is None or key in systems.RINGS else f" K={k}"
                        log(f"  [{progress}] {key:<17} N={n}{kk} "
                            f"S={mib:g} MiB rep {rep + 1}/{args.reps}: {fmt_ms(t)}{lim}")
                # Same inputs, same reduction order: repetitions agree bit for bit, and all
                # allreduces end with the same mean.
                for key, seen in sums.items():
                    if key != "raw-tcp" and len(seen) != 1:
                        raise BenchError(f"{topo} {key} N={n}{'' if k is None else f' K={k}'} "
                                         f"S={mib:g}: results differ "
                                         f"between repetitions: {sorted(seen)}")
                ring_sums = {next(iter(sums[key])) for key in keys if key in systems.RINGS}
                if len(ring_sums) > 1:
                    raise BenchError(f"{topo} N={n} S={mib:g}: the allreduces' results "
                                     f"differ: {sorted(ring_sums)}")
                for key in keys:
                    row = summarize(topo, key, n, mib, reps[key], next(iter(sums[key])),
                                    net.limit_s(key, n, mib * MIB),
                                    None if key in systems.RINGS else k)
                    if cpus[key]:
                        # phubd's cores, whole runs (warm-up and set-up included): CPU
                        # seconds per byte received, the repetitions pooled.
                        seconds = sum(c for c, _ in cpus[key])
                        received = sum(b for _, b in cpus[key])
                        row["phubd_ns_per_byte"] = 1e9 * seconds / received
                    yield row
        finally:
            kill_children()
            net.close()


def rows_from_raw(raw_dirs, rate):
    """Summary rows rebuilt from the per-run timing files of earlier runs (e.g. one stopped
    half-way, plus a run of what was missing): each run directory is named
    TOPOLOGY-SYSTEM-nN-sS-rREP (multips: TOPOLOGY-SYSTEM-nN-kK-sS-rREP) and holds the workers'
    TSVs."""
    runs = {}
    for raw in raw_dirs:
        for name in sorted(os.listdir(raw)):
            m = re.fullmatch(r"(loopback|pbox|cloud|colocated|multips)-(.+?)-n(\d+)(?:-k(\d+))?"
                             r"-s([\d.]+)-r(\d+)", name)
            if not m or m.group(2) not in systems.BY_KEY:
                continue
            d = os.path.join(raw, name)
            files = sorted(os.path.join(d, f) for f in os.listdir(d)
                           if re.fullmatch(r"(worker|rank|client)\d+\.tsv", f))
            try:
                times, sums = per_iteration(files)
            except (BenchError, OSError, ValueError, IndexError):
                log(f"skipping {d}: incomplete")
                continue
            # The allreduces do not use multips' PS hosts: their rows have no K.
            k = None if m.group(4) is None or m.group(2) in systems.RINGS else int(m.group(4))
            key = (m.group(1), m.group(2), int(m.group(3)), k or 0, float(m.group(5)))
            runs.setdefault(key, []).append((times, sums[0]))
    rows = []
    for (topo, system, n, k, mib), reps in sorted(runs.items()):
        k = k or None
        limit = nets.limit_s(topo, system, n, mib * MIB, rate, k)
        rows.append(summarize(topo, system, n, mib, [t for t, _ in reps], reps[0][1], limit, k))
    return rows


# ---- tables -------------------------------------------------------------------------------

def cell(rows, topo, n, mib, k=None):
    """The rows of one (topology, N, S) by system; multips: its PS's at K = k beside the
    allreduces (which have no K)."""
    return {r["system"]: r for r in rows
            if r["topology"] == topo and r["workers"] == n and r["mib"] == mib
            and r.get("ps_hosts") in (None, k)}


def ps_hosts_in(rows, topo, n):
    """The K values that rows have for (topology, N): [None] where there is no K."""
    ks = sorted({r["ps_hosts"] for r in rows if r["topology"] == topo and r["workers"] == n
                 and r.get("ps_hosts") is not None})
    return ks or [None]


def derived(rows, topo, n, mib, k=None):
    """The comparisons quoted in the docs, for one (topology, N, S) (multips: and K)."""
    by = cell(rows, topo, n, mib, k)
    out = {}
    ps = by.get(TOPOLOGY_PS[topo])
    rings = [by[key] for key in systems.FP32_RINGS if key in by]
    if rings:
        best = min(rings, key=lambda r: r["ms"])
        out["best_ring"] = best["system"]
        out["best_ring_ms"] = best["ms"]
        if ps:
            out["ps_speedup"] = best["ms"] / ps["ms"]  # > 1: the PS is faster
    if "ps-bf16" in by and "ring-bf16" in by:  # the compact wire on both sides
        out["ps_bf16_speedup"] = by["ring-bf16"]["ms"] / by["ps-bf16"]["ms"]
    if "ring" in by and "gloo-ring-chunked" in by:
        out["ring_vs_gloo"] = by["ring"]["ms"] / by["gloo-ring-chunked"]["ms"]
    if ps and "raw-tcp" in by:
        out["ps_vs_raw"] = by["raw-tcp"]["ms"] / ps["ms"]
    return out


def markdown(rows, topologies, sizes, workers, rate):
    md = []
    for topo in topologies:
        present = [k for k in TOPOLOGY_SYSTEMS[topo] if any(
            r["topology"] == topo and r["system"] == k for r in rows)]
        if not present:
            continue
        md += [f"### {topo}", ""]
        if topo == "loopback":
            md += ["Time ms (in parentheses: raw TCP time / this time, i.e. the fraction of "
                   "raw TCP's byte rate, for the PS systems and raw-tcp).", ""]
        else:
            md += [f"Time ms (in parentheses: time / physical limit at B = {rate}).", ""]
        if topo == "multips":
            md += ["K PS hosts of link B each beside the N workers; the allreduces ran once per "
                   "N (on the rack with the largest K) and are repeated on each K's line. PS "
                   "limit max(S/B, N·S/(K·B)), ring limit 2(N−1)/N·S/B.", ""]
        compact = "ps-bf16" in present and "ring-bf16" in present
        multi = topo == "multips"
        head = (["N"] + (["K"] if multi else []) + ["S MiB"] + present
                + ["best allreduce (fp32)", f"{TOPOLOGY_PS[topo]} speed-up"])
        if compact:
            head.append("ps-bf16 vs ring-bf16")
        if topo == "loopback":
            head += ["ring/gloo-ring-chunked"]
        else:
            at = 3 if multi else 2
            head[at:at] = ["PS limit ms", "ring limit ms"]
        table = []
        for n, k, mib in [(n, k, mib) for n in workers for k in ps_hosts_in(rows, topo, n)
                          for mib in sizes]:
            by = cell(rows, topo, n, mib, k)
            if not by:
                continue
            d = derived(rows, topo, n, mib, k)
            cells = [str(n)] + ([f"{k} ({nets.k_label(k, n)})" if k else "-"] if multi else []) \
                + [f"{mib:g}"]
            if topo != "loopback":
                ps_key = TOPOLOGY_PS[topo]
                ps_lim = next((r["limit_ms"] for r in by.values()
                               if r["system"] == ps_key and "limit_ms" in r), None)
                ring_lim = next((r["limit_ms"] for r in by.values()
                                 if r["system"] in systems.FP32_RINGS and "limit_ms" in r), None)
                cells += [tables.fmt(ps_lim, ".0f"), tables.fmt(ring_lim, ".0f")]
            raw = by.get("raw-tcp")
            for key in present:
                r = by.get(key)
                if r is None:
                    cells.append("-")
                elif "x_limit" in r:
                    cells.append(f"{r['ms']:.1f} ({r['x_limit']:.2f}×)")
                elif topo == "loopback" and raw and key in RAW_SHARE:
                    cells.append(f"{r['ms']:.1f} ({raw['ms'] / r['ms']:.0%})")
                else:
                    cells.append(f"{r['ms']:.1f}")
            cells.append(d.get("best_ring", "-"))
            cells.append(tables.fmt(d.get("ps_speedup"), ".2f", suffix="×"))
            if compact:
                cells.append(tables.fmt(d.get("ps_bf16_speedup"), ".2f", suffix="×"))
            if topo == "loopback":
                cells.append(tables.fmt(d.get("ring_vs_gloo"), ".2f"))
            table.append(cells)
        md += tables.md_table(head, table, "r" * len(head))
        md.append("")
        if multi:
            md += bar_lines(rows)
    cpu_rows = [r for r in rows if r.get("phubd_ns_per_byte")]
    if cpu_rows:
        mhz = cpu_mhz()
        md += ["### phubd's CPU per byte received", "",
               "The cores' threads' CPU time (user + system: aggregation, bookkeeping, the "
               "transport's syscalls and copies; whole runs, set-up and warm-up included) over "
               "the payload bytes they received, from phubd's job-end log line. Cycles at the "
               f"clock /proc/cpuinfo reports ({mhz:.0f} MHz; this VM counts no cycles itself). "
               "GB/s per core = what one fully busy core would absorb at that cost.", ""]
        md += tables.md_table(
            ["topology", "system", "N", "S MiB", "ns / byte", "cycles / byte", "GB/s per core"],
            [[r["topology"], r["system"] + (f" K={r['ps_hosts']}" if r.get("ps_hosts") else ""),
              str(r["workers"]), f"{r['mib']:g}",
              f"{r['phubd_ns_per_byte']:.3f}", f"{r['phubd_ns_per_byte'] * mhz / 1e3:.2f}",
              f"{1 / r['phubd_ns_per_byte']:.2f}"] for r in cpu_rows], "llrrrrr")
        md.append("")
    return md


def bar_lines(rows):
    """Issue 19's bar for multips, where the run has its cell (K = N = 4, S = 100 MiB)."""
    b = BAR
    ps = cell(rows, "multips", b["workers"], b["mib"], b["ps_hosts"]).get("ps-multi")
    d = derived(rows, "multips", b["workers"], b["mib"], b["ps_hosts"])
    if not ps or "ps_speedup" not in d or "x_limit" not in ps:
        return []
    ok = d["ps_speedup"] >= b["speedup"] and ps["x_limit"] <= b["x_limit"]
    return [f"Bar (issue 19, K = N = {b['workers']}, S = {b['mib']:g} MiB): ps-multi "
            f"{ps['ms']:.1f} ms is {d['ps_speedup']:.2f}× faster than the best allreduce "
            f"({d['best_ring']}, {d['best_ring_ms']:.1f} ms; bar ≥ {b['speedup']:.2f}×) and "
            f"{ps['x_limit']:.2f}× its limit {ps['limit_ms']:.0f} ms "
            f"(bar ≤ {b['x_limit']:.2f}×): "
            f"{'met' if ok else 'NOT met'}.", ""]


def cpu_mhz():
    """The clock /proc/cpuinfo reports for the first CPU, MHz (0 if none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return 0.0


TSV_KEYS = ["topology", "system", "workers", "ps_hosts", "mib", "ms", "ms_min", "ms_max",
            "samples", "algbw", "limit_ms", "x_limit", "ps_vs_best_ring", "checksum",
            "phubd_ns_per_byte"]


def machine_notes(args, start_load):
    return (f"{machine.describe(start_load)}; "
            f"phubd --cores {args.cores} (colocated: 1 per host; multips: {args.cores} on "
            f"each PS host)"
            f"{' --chunk-bytes ' + str(args.chunk_bytes) if args.chunk_bytes else ''}"
            f"{', Nagle on (PS)' if args.tcp_nagle else ''}"
            f"{', socket buffers ' + str(args.socket_buffer_bytes) + ' B' if args.socket_buffer_bytes else ', colocated and multips PS on racks: socket buffers ' + str(systems.COLOCATED_SOCKET_BUFFER_BYTES) + ' B'}"
            f", SGD lr {args.lr}; rack links B = {args.rate}; {args.iters} timed + "
            f"{args.warmup} warm-up iterations x {args.reps} repetitions")


# ---- plots --------------------------------------------------------------------------------

# Loopback: these are given as a share of raw TCP's time too (the same bytes, the same streams).
RAW_SHARE = ("raw-tcp", "ps", "ps-fifo", "ps-bf16", "ps-io4", "ps-shm", "ps-colocated")

STYLE = {"raw-tcp": ("#9e9e9e", "o", ":"), "ps": ("#1f77b4", "s", "-"),
         "ps-fifo": ("#aec7e8", "s", "--"),
         "ps-bf16": ("#08306b", "s", "-."), "ps-io4": ("#6baed6", "s", ":"),
         "ps-shm": ("#3f007d", "s", "-"),
         "ps-colocated": ("#17becf", "s", "-"), "ps-multi": ("#8c564b", "s", "-"),
         "ring": ("#d62728", "^", "-"),
         "ring-bf16": ("#67000d", "^", "-."), "ring-shm": ("#fb6a4a", "^", ":"),
         "gloo-ring-chunked": ("#ff7f0e", "v", "--"), "gloo-allreduce": ("#bcbd22", "v", ":"),
         "mpi": ("#2ca02c", "D", "--"), "mpi-ring": ("#9467bd", "D", ":")}


def plot_sizes(out_dir, rows, topologies, sizes, workers):
    plt = plots.import_pyplot()
    if plt is None:
        return []
    files = []
    for mib in sizes:
        topos = [t for t in topologies if any(r["topology"] == t and r["mib"] == mib for r in rows)]
        if not topos:
            continue
        fig, axes = plt.subplots(1, len(topos), figsize=(4.6 * len(topos), 4.2), squeeze=False)
        for ax, topo in zip(axes[0], topos):
            sel = [r for r in rows if r["topology"] == topo and r["mib"] == mib]

            def group(r):  # multips: one line per K relative to N (K = N, K = N/2, ...)
                return nets.k_label(r["ps_hosts"], r["workers"]) if r.get("ps_hosts") else ""
            groups = sorted({group(r) for r in sel}, key=lambda g: (g != "N", g))
            dashes = ["-", "--", ":", "-."]
            for key in TOPOLOGY_SYSTEMS[topo]:
                for gi, g in enumerate(groups):
                    pts = sorted((r["workers"], r["ms"]) for r in sel
                                 if r["system"] == key and group(r) == g)
                    if pts:
                        color, marker, ls = STYLE[key]
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker,
                                ls=dashes[gi % len(dashes)] if g else ls, color=color,
                                label=f"{key} K={g}" if g else key)
            for key, label in ((TOPOLOGY_PS[topo], "PS limit"), ("ring", "ring limit")):
                for gi, g in enumerate(groups):
                    pts = sorted((r["workers"], r["limit_ms"]) for r in sel
                                 if r["system"] == key and "limit_ms" in r and group(r) == g)
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], color="black",
                                ls="--" if label == "PS limit" else "-.",
                                lw=0.8 if gi == 0 else 0.5,
                                label=f"{label} K={g}" if g else label)
            ax.set_title(f"{topo}, S = {mib:g} MiB")
            ax.set_xlabel("workers N")
            ax.set_xticks(workers)
            ax.set_ylabel("time per iteration (ms)")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        name = f"exchange_S{mib:g}.png"
        plots.save(plt, fig, os.path.join(out_dir, name), dpi=110)
        files.append(name)
    return files


def plot_sweep(path, sweep_rows):
    plt = plots.import_pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6, 4.2))
    xs = [r["chunk_bytes"] / 1024 for r in sweep_rows]
    ax.plot(xs, [r["ps_rate"] for r in sweep_rows], "o-", label="PS (phubd)")
    ax.axhline(sweep_rows[0]["raw_rate"], color="#9e9e9e", ls="--", label="raw TCP")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x:g}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel("--chunk-bytes (KiB)")
    ax.set_ylabel("byte rate 2·N·S / t  (GB/s)")
    ax.set_title(f"chunk size sweep, loopback, N={SWEEP_WORKERS}, S={SWEEP_MIB} MiB")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    plots.save(plt, fig, path, dpi=110)
    return True


def chunk_sweep(args, settings, chunks, raw_dir):
    """PS time per --chunk-bytes on loopback (N=2, S=32 MiB) against raw TCP in the same loop."""
    net = nets.make("loopback", SWEEP_WORKERS, args.rate)
    raw_all, by_chunk = [], {c: [] for c in chunks}
    s = SWEEP_MIB * MIB
    for rep in range(args.reps):
        t, _ = systems.run(systems.BY_KEY["raw-tcp"], net, settings, SWEEP_WORKERS, SWEEP_MIB,
                           os.path.join(raw_dir, f"sweep-raw-r{rep}"))
        raw_all += t
        log(f"  raw TCP rep {rep + 1}/{args.reps}: {fmt_ms(t)}")
        # Rotate the order each repetition so load drift does not favour one size.
        for chunk in chunks[rep % len(chunks):] + chunks[:rep % len(chunks)]:
            t, _ = systems.run(systems.BY_KEY["ps"], net, settings, SWEEP_WORKERS, SWEEP_MIB,
                               os.path.join(raw_dir, f"sweep-ps-c{chunk}-r{rep}"),
                               chunk_bytes=chunk)
            by_chunk[chunk] += t
            log(f"  PS chunk={chunk} rep {rep + 1}/{args.reps}: {fmt_ms(t)}")
    raw = statistics.median(raw_all)
    rows = []
    for c in chunks:
        ps = statistics.median(by_chunk[c])
        rows.append({"chunk_bytes": c, "ps_ms": ps * 1e3, "ps_rate": 2 * SWEEP_WORKERS * s / ps / 1e9,
                     "raw_rate": 2 * SWEEP_WORKERS * s / raw / 1e9, "ratio": raw / ps})
    return rows


# ---- main ---------------------------------------------------------------------------------

def main():
    p = parser(__doc__)
    p.add_argument("--build", default="build", help="CMake build dir with the binaries (default: build)")
    p.add_argument("--topologies", default=None,
                   help=f"comma list of {','.join(TOPOLOGIES)} (default: "
                        f"{','.join(DEFAULT_TOPOLOGIES)})")
    p.add_argument("--ps-hosts", default="n/2,n", metavar="K,...",
                   help="multips: the numbers K of PS hosts, each a number or relative to N as "
                        "n or n/D (default: n/2,n)")
    p.add_argument("--systems", default=",".join(s.key for s in systems.SYSTEMS
                                                 if s.key != "ps-io4"),
                   help="comma list of systems (default: all but ps-io4)")
    p.add_argument("--sizes", default=None, help="tensor sizes S in MiB (default: 4,32,100; --quick: 4,32)")
    p.add_argument("--workers", default=None, help="worker counts N (default: 2,4,8; --quick: 2,4)")
    p.add_argument("--rate", default="1gbit", help="rack link rate B, tc syntax (default: 1gbit)")
    p.add_argument("--cores", type=int, default=2, help="phubd cores = TCP streams per worker (default: 2)")
    p.add_argument("--chunk-bytes", type=int, default=None, help="phubd --chunk-bytes (default: phubd's)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per run (default: 5; --quick: 3)")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations first (default: 2; --quick: 1)")
    p.add_argument("--reps", type=int, default=None, help="runs of each system per cell, alternated (default: 2; --quick: 1)")
    p.add_argument("--tcp-nagle", action="store_true", help="PS only: leave Nagle on")
    p.add_argument("--socket-buffer-bytes", type=int, default=0,
                   help="fixed SO_SNDBUF/SO_RCVBUF for PS and raw TCP (default: 0 = autotuning)")
    p.add_argument("--lr", type=float, default=1e-3, help="phubd's SGD learning rate (default: 1e-3)")
    p.add_argument("--out", default="results/exchange", help="output dir (default: results/exchange)")
    p.add_argument("--quick", action="store_true", help="a < 5 minute subset (see the defaults)")
    p.add_argument("--sweep-chunk", nargs="?", const=DEFAULT_SWEEP, default=None, metavar="BYTES,...",
                   help=f"also run the chunk-size sweep (loopback, N={SWEEP_WORKERS}, S={SWEEP_MIB} MiB); "
                        f"without a value: {DEFAULT_SWEEP}")
    p.add_argument("--skip-main", action="store_true", help="run only the chunk sweep")
    p.add_argument("--from-raw", default=None, metavar="DIR,...",
                   help="run nothing: rebuild the tables and plots from the raw/ folders of "
                        "earlier runs (with the same --rate)")
    args = p.parse_args()
    q = args.quick
    args.topologies = args.topologies or ",".join(DEFAULT_TOPOLOGIES)
    args.sizes = args.sizes or ("4,32" if q else "4,32,100")
    args.workers = args.workers or ("2,4" if q else "2,4,8")
    args.iters = args.iters if args.iters is not None else (3 if q else 5)
    args.warmup = args.warmup if args.warmup is not None else (1 if q else 2)
    args.reps = args.reps if args.reps is not None else (1 if q else 2)
    topologies = parse_list(args.topologies, str)
    sizes = parse_list(args.sizes, float)
    workers = parse_list(args.workers, int)
    chosen = parse_list(args.systems, str)
    sweep = parse_list(args.sweep_chunk, int) if args.sweep_chunk else []
    for bad in [t for t in topologies if t not in TOPOLOGIES]:
        p.error(f"--topologies: unknown '{bad}'; known: {', '.join(TOPOLOGIES)}")
    for bad in [s for s in chosen if s not in systems.BY_KEY]:
        p.error(f"--systems: unknown '{bad}'; known: {', '.join(systems.BY_KEY)}")
    if args.iters < 1 or args.warmup < 0 or args.reps < 1 or args.cores < 1:
        p.error("--iters, --reps and --cores must be >= 1, --warmup >= 0")
    collectives = [k for k in chosen if systems.BY_KEY[k].allreduce or k == "ps-colocated"]
    if any(n < 1 for n in workers) or (collectives and any(n < 2 for n in workers)):
        p.error("--workers: every N must be >= 2 (>= 1 with phubd's systems and raw-tcp only: "
                f"not {', '.join(collectives) or 'N < 1'})")
    try:
        specs = nets.parse_ps_hosts(args.ps_hosts)
        if "multips" in topologies:
            for n in workers:
                nets.ps_hosts_for(specs, n)
    except ValueError as e:
        p.error(str(e))
    args.ps_hosts_for = lambda n: nets.ps_hosts_for(specs, n)
    if args.skip_main and not sweep:
        p.error("--skip-main needs --sweep-chunk")
    if args.from_raw:
        rows = rows_from_raw(parse_list(args.from_raw, str), args.rate)
        if not rows:
            p.error(f"--from-raw: no complete runs under {args.from_raw}")
        sizes = sorted({r["mib"] for r in rows})
        workers = sorted({r["workers"] for r in rows})
        topologies = [t for t in TOPOLOGIES if any(r["topology"] == t for r in rows)]
        return report(args, rows, [], topologies, sizes, workers,
                      f"rebuilt from {args.from_raw} on {datetime.date.today()}")
    racks = [t for t in topologies if t != "loopback"] if not args.skip_main else []
    if racks:
        problem = nets.rack_problem()
        if problem:
            p.error(f"--topologies {','.join(racks)}: {problem}")

    needed = {"phubd": os.path.join(args.build, "phub", "server", "phubd")}
    used = set(chosen) if not args.skip_main else set()
    if sweep:
        used |= {"raw-tcp", "ps"}
    for key in used:
        binary = systems.BY_KEY[key].binary
        needed[binary] = os.path.join(args.build, "bench", "exchange", binary)
    missing = [b for b in needed.values() if not os.access(b, os.X_OK)]
    if missing:
        p.error(f"not built: {', '.join(missing)}; run deploy/build.sh (phub_gloo_worker and "
                f"phub_mpi_worker need libgloo-dev and libopenmpi-dev: deploy/install-deps.sh)")
    if used & {"mpi", "mpi-ring"} and shutil.which("mpirun") is None:
        p.error("--systems mpi: mpirun not on PATH (apt-get install openmpi-bin)")

    settings = systems.Settings(needed, args.iters, args.warmup, args.cores, args.lr,
                                args.chunk_bytes, args.tcp_nagle, args.socket_buffer_bytes)
    raw_dir = outdir.with_raw(args.out)

    def on_term(signum, frame):
        log(f"run_exchange: signal {signum}, stopping")
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored

    start_load = machine.load_average()
    rows, sweep_rows = [], []
    try:
        if not args.skip_main:
            for row in grid(args, settings, topologies, sizes, workers, chosen, raw_dir):
                rows.append(row)
        if sweep:
            log(f"[chunk sweep, loopback, N={SWEEP_WORKERS} S={SWEEP_MIB} MiB]")
            sweep_rows = chunk_sweep(args, settings, sweep, raw_dir)
    except BenchError as e:
        log(f"run_exchange: FAILED: {e}")
        return 1
    except KeyboardInterrupt:
        log("run_exchange: interrupted")
        return 130
    finally:
        kill_children()
        nets.cleanup()

    return report(args, rows, sweep_rows, topologies, sizes, workers,
                  machine_notes(args, start_load))


def report(args, rows, sweep_rows, topologies, sizes, workers, notes):
    os.makedirs(args.out, exist_ok=True)
    md = ["# exchange: PS vs ring allreduce", "", notes, "",
          "Time = median over iterations of the max over workers of one iteration "
          "(barrier-aligned), warm-up excluded, results checked. Speed-up = best allreduce "
          "time / the PS's time (> 1: the PS is faster). MiB = 2^20 B.", ""]
    for row in rows:  # the PS-vs-best-allreduce ratio in the PS's TSV rows
        if row["system"] == TOPOLOGY_PS[row["topology"]]:
            d = derived(rows, row["topology"], row["workers"], row["mib"], row.get("ps_hosts"))
            if "ps_speedup" in d:
                row["ps_vs_best_ring"] = d["ps_speedup"]
    md += markdown(rows, topologies, sizes, workers, args.rate)
    if rows:
        tables.write_tsv(os.path.join(args.out, "exchange.tsv"), rows, TSV_KEYS,
                         tables.short_float)
        for name in plot_sizes(args.out, rows, topologies, sizes, workers):
            md += [f"![time vs N]({name})", ""]
    if sweep_rows:
        keys = ["chunk_bytes", "ps_ms", "ps_rate", "raw_rate", "ratio"]
        tables.write_tsv(os.path.join(args.out, "exchange_chunk_sweep.tsv"), sweep_rows, keys,
                         tables.short_float)
        md += [f"### chunk size sweep (loopback, N={SWEEP_WORKERS}, S={SWEEP_MIB} MiB)", ""]
        md += tables.md_table(
            ["chunk bytes", "PS ms", "PS byte rate GB/s", "raw TCP GB/s", "PS/raw"],
            [[str(r["chunk_bytes"]), f"{r['ps_ms']:.1f}", f"{r['ps_rate']:.3f}",
              f"{r['raw_rate']:.3f}", f"{r['ratio']:.0%}"] for r in sweep_rows], "rrrrr")
        md.append("")
        if plot_sweep(os.path.join(args.out, "exchange_chunk_sweep.png"), sweep_rows):
            md += ["![chunk sweep](exchange_chunk_sweep.png)", ""]
    # Every section ends with a blank line; the file ends with its last line's newline.
    tables.write_markdown(os.path.join(args.out, "exchange.md"), md[:-1])
    print("\n".join(md[2:]))
    log(f"wrote {args.out}/exchange.md, .tsv, PNGs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
