#!/usr/bin/env python3
"""run_nics.py: a PBox with two NICs against one — is phubd's PS link the sum of its NICs?

On emulated racks (deploy/netns/rack.sh --topology pbox): N worker hosts with links of B and a
PS host whose NIC capacity is N.B, either as one NIC of N.B ("one full link") or as two NICs of
N.B/2 each (rack.sh --ps-nics 2). phubd's cores alternate over the NICs it is given (--nics):

  1-nic-full    one NIC of N.B (rack 1)                     phubd --nics eth0
  2-nics-half   two NICs of N.B/2, both used (rack 2)       phubd --nics eth0,eth1
  1-nic-half    one of those two NICs alone (rack 2)        phubd --nics eth0

Each moves one S-byte float32 tensor per iteration (bench/exchange/systems.py's PS: the same
workers, timing rule and result check as the exchange benchmark); every system runs --reps
times, alternating within a repetition. Printed: median time per iteration, the link-bound
limit at the PS capacity it has (ps_limit_s below), the
ratios the bars are about, and per NIC the bytes the PS host sent and received through it
(/sys/class/net/ethK/statistics, read in its namespace), which show whether both were used.

Bars (issue 23): two half links <= 1.1x one full link per iteration; >= 1.8x faster than one
half link alone.

Steering (--steer-reps, on the two-NIC rack, 2-nics-half with phubd's cores pinned): where does
the kernel handle each core's packets, before and after deploy/pbox/tune-nics.sh --apply in the
PS host's namespace (RPS and RFS on its single-queue veths, XPS; the map from phubd
--print-core-map)? Counted from phubd's own per-connection sample (SO_INCOMING_CPU against the
core's CPU), with phubd's CPU per byte (its job-end line) and the whole machine's (/proc/stat:
every CPU's busy time over the bytes pushed), untuned and tuned alternating.

Writes OUT/nics.tsv (one row per system x repetition), OUT/nics.md and OUT/nics.png; every
process's log under OUT/raw/. Needs root (ip netns, tc); one rack at a time, a quiet machine.

  sudo bench/pbox/run_nics.py                        # N = 4, B = 500mbit, S = 32 MiB, 3 reps
  sudo bench/pbox/run_nics.py --mib 8 --reps 1
"""

import os
import re
import statistics
import subprocess
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
from benchlib.cli import parser  # noqa: E402
from benchlib.log import log  # noqa: E402
from benchlib.outdir import fresh_dir  # noqa: E402
from benchlib.procs import kill_children  # noqa: E402

MIB = 1 << 20
TUNE = os.path.join(ROOT, "deploy", "pbox", "tune-nics.sh")
BAR_FULL, BAR_HALF = 1.1, 1.8
# (system, rack, phubd's --nics, PS capacity in NIC-worths of N.B)
CASES = [("1-nic-full", "one", "eth0", 1.0),
         ("2-nics-half", "two", "eth0,eth1", 1.0),
         ("1-nic-half", "two", "eth0", 0.5)]


def ps_limit_s(size_bytes, n, b, capacity):
    """The link-bound limit with a PS capacity of capacity.N.B (all its NICs together): each
    worker link carries S each way (S/B), the PS's links N.S each way (N.S / (capacity.N.B)),
    full duplex and pipelined (topology.pbox_ps_limit_s, whose PS capacity is N.B): the slower
    of the two."""
    return max(topology.pbox_ps_limit_s(size_bytes, n, b), 8.0 * n * size_bytes / (capacity * n * b))


STEER_LINE = re.compile(r"core \d+: packets from \S+ handled on CPU \d+, (the core's own|not)")
RPS_FLOW_ENTRIES = "/proc/sys/net/core/rps_sock_flow_entries"


def steered(run_dir):
    """(connections handled on their core's CPU, elsewhere) from phubd's debug log."""
    on = off = 0
    with open(os.path.join(run_dir, "phubd.log"), errors="replace") as f:
        for m in STEER_LINE.finditer(f.read()):
            if m.group(1) == "not":
                off += 1
            else:
                on += 1
    return on, off


def busy_seconds():
    """Every CPU's busy time so far (user, nice, system, irq, softirq), seconds."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def set_flow_entries(value):
    with open(RPS_FLOW_ENTRIES, "w") as f:
        f.write(f"{value}\n")


def set_tuning(a, net, raw, tag, on):
    """tune-nics.sh --apply with phubd's map in the PS namespace (on), or every queue's
    RPS/RFS/XPS back to off. RFS's global table lives in the root namespace only, where the
    script cannot reach it from the PS's: set here (32768, the script's default), and put back
    to the machine's own value for the untuned runs."""
    set_flow_entries(32768 if on else a.flow_entries)
    if on:
        map_path = os.path.join(raw, f"{tag}-map.tsv")
        with open(map_path, "w") as f:
            subprocess.run(net.wrap("ps", [a.settings.bins["phubd"], "--nics", "eth0,eth1",
                                           "--cores", str(a.cores), "--print-core-map"]),
                           check=True, stdout=f)
        with open(os.path.join(raw, f"{tag}-tune.log"), "w") as f:
            subprocess.run(net.wrap("ps", ["bash", TUNE, "--apply", map_path]), check=True,
                           stdout=f, stderr=subprocess.STDOUT)
        return
    for nic in ("eth0", "eth1"):
        for path, value in (("rx-0/rps_cpus", "0"), ("rx-0/rps_flow_cnt", "0"),
                            ("tx-0/xps_cpus", "0")):
            subprocess.run(net.wrap("ps", ["sh", "-c", f"echo {value} > "
                                           f"/sys/class/net/{nic}/queues/{path}"]), check=True)


def run_steering(a, net, raw):
    """2-nics-half pinned, untuned and tuned alternating, --steer-reps times each."""
    rows = []
    system = systems.System("2-nics-half", "phub_exchange_worker", "ps", needs_ps_host=True,
                            phubd_extra=["--nics", "eth0,eth1"])
    # Long enough that every connection lives past phubd's sample (2 s after it is ready).
    iters = a.settings.iters
    a.settings.iters = max(iters, a.steer_iters)
    pushed = a.n * a.mib * MIB * (a.settings.iters + a.warmup)
    a.settings.pin = True
    try:
        for rep in range(a.steer_reps):
            modes = [False, True] if rep % 2 == 0 else [True, False]
            for tuned in modes:
                tag = f"steer-{'tuned' if tuned else 'untuned'}-r{rep}"
                set_tuning(a, net, raw, tag, tuned)
                run_dir = os.path.join(raw, tag)
                busy = busy_seconds()
                times, _ = systems.run(system, net, a.settings, a.n, a.mib, run_dir)
                busy = busy_seconds() - busy
                on, off = steered(run_dir)
                cpu = systems.phubd_cpu(run_dir)
                row = {"tuned": tuned, "rep": rep,
                       "ms_per_iter": statistics.median(times) * 1e3,
                       "on_core": on, "elsewhere": off,
                       "phubd_ns_per_byte": cpu[0] * 1e9 / cpu[1] if cpu else None,
                       "machine_ns_per_byte": busy * 1e9 / pushed}
                rows.append(row)
                log(f"  steering rep {rep + 1}/{a.steer_reps} {'tuned  ' if tuned else 'untuned'}"
                    f" {row['ms_per_iter']:8.1f} ms; {on} connections on their core's CPU, "
                    f"{off} elsewhere; machine {row['machine_ns_per_byte']:.2f} ns/byte")
    finally:
        a.settings.pin = False
        a.settings.iters = iters
        set_tuning(a, net, raw, "reset", False)
    return rows


def nic_bytes(net, nics):
    """{nic: (tx, rx)} bytes so far of the PS host's interfaces."""
    out = {}
    for nic in nics:
        vals = []
        for what in ("tx_bytes", "rx_bytes"):
            text = subprocess.run(net.wrap("ps", ["cat", f"/sys/class/net/{nic}/statistics/{what}"]),
                                  check=True, capture_output=True, text=True).stdout
            vals.append(int(text.strip()))
        out[nic] = tuple(vals)
    return out


def run_rack(a, rack, raw):
    """The bars' systems on one rack ('one': a PS NIC of N.B; 'two': two of N.B/2), and on
    'two' the steering runs. Returns (rows, steering rows)."""
    ps_nics = 2 if rack == "two" else 1
    net = nets.RackNet("pbox", a.n, a.rate, extra=["--ps-nics", "2"] if ps_nics > 1 else None)
    rows, steering = [], []
    try:
        log(f"[rack {rack}: {ps_nics} PS NIC(s)] {net.describe()}")
        mine = [c for c in CASES if c[1] == rack]
        nics = [f"eth{k}" for k in range(ps_nics)]
        for rep in range(a.reps):
            order = mine if rep % 2 == 0 else list(reversed(mine))
            for key, _, phubd_nics, capacity in order:
                system = systems.System(key, "phub_exchange_worker", "ps", needs_ps_host=True,
                                        phubd_extra=["--nics", phubd_nics])
                limit = ps_limit_s(a.mib * MIB, a.n, topology.parse_rate(a.rate), capacity)
                before = nic_bytes(net, nics)
                times, checksum = systems.run(system, net, a.settings, a.n, a.mib,
                                              os.path.join(raw, f"{key}-r{rep}"), limit)
                after = nic_bytes(net, nics)
                ms = statistics.median(times) * 1e3
                row = {"system": key, "rack": rack, "phubd_nics": phubd_nics, "rep": rep,
                       "ms_per_iter": ms, "limit_ms": limit * 1e3,
                       "over_limit": ms / (limit * 1e3), "checksum": checksum}
                for nic in ("eth0", "eth1"):
                    moved = [after[nic][i] - before[nic][i] for i in (0, 1)] if nic in after \
                        else [0, 0]
                    row[f"{nic}_tx_mib"] = moved[0] / MIB
                    row[f"{nic}_rx_mib"] = moved[1] / MIB
                rows.append(row)
                log(f"  rep {rep + 1}/{a.reps} {key:<12} {ms:8.1f} ms (limit {limit * 1e3:.0f} ms, "
                    f"{ms / (limit * 1e3):.2f}x); PS eth0 tx {row['eth0_tx_mib']:.0f} MiB, "
                    f"eth1 tx {row['eth1_tx_mib']:.0f} MiB")
        if rack == "two" and a.steer_reps > 0:
            steering = run_steering(a, net, raw)
    finally:
        kill_children()
        net.close()
    return rows, steering


def summarize(rows):
    out = {}
    for key, _, _, _ in CASES:
        mine = [r for r in rows if r["system"] == key]
        out[key] = {
            "ms": statistics.median(r["ms_per_iter"] for r in mine),
            "limit_ms": mine[0]["limit_ms"],
            "eth0_tx_mib": statistics.median(r["eth0_tx_mib"] for r in mine),
            "eth1_tx_mib": statistics.median(r["eth1_tx_mib"] for r in mine),
            "eth0_rx_mib": statistics.median(r["eth0_rx_mib"] for r in mine),
            "eth1_rx_mib": statistics.median(r["eth1_rx_mib"] for r in mine),
            "reps": len(mine)}
    return out


def markdown(a, s, notes):
    two, full, half = s["2-nics-half"]["ms"], s["1-nic-full"]["ms"], s["1-nic-half"]["ms"]
    md = [f"N = {a.n} workers at B = {a.rate}, S = {a.mib:g} MiB, phubd --cores {a.cores}, "
          f"{a.iters} timed iterations after {a.warmup}, medians of {a.reps} repetitions:", ""]
    body = []
    for key, _, nics, _ in CASES:
        r = s[key]
        body.append([key, nics, f"{r['ms']:.1f}", f"{r['limit_ms']:.0f}",
                     f"{r['ms'] / r['limit_ms']:.2f}x",
                     f"{r['eth0_tx_mib']:.0f} / {r['eth0_rx_mib']:.0f}",
                     f"{r['eth1_tx_mib']:.0f} / {r['eth1_rx_mib']:.0f}"])
    md += tables.md_table(["system", "phubd --nics", "ms / iter", "limit ms", "vs limit",
                           "PS eth0 MiB out / in", "PS eth1 MiB out / in"], body)
    ok_full, ok_half = two <= BAR_FULL * full, half / two >= BAR_HALF
    md += ["", f"Two half links / one full link: **{two / full:.2f}x** (bar <= {BAR_FULL}: "
               f"{'met' if ok_full else 'NOT met'}); one half link / two half links: "
               f"**{half / two:.2f}x** (bar >= {BAR_HALF}: {'met' if ok_half else 'NOT met'})."]
    md += [""] + notes
    return md


def steering_markdown(a, steering):
    md = ["", f"Steering: 2-nics-half with phubd's {a.cores} cores pinned, {a.steer_reps} runs "
              f"each, medians (connections summed over the runs):", ""]
    body = []
    for tuned in (False, True):
        mine = [r for r in steering if r["tuned"] == tuned]
        on = sum(r["on_core"] for r in mine)
        off = sum(r["elsewhere"] for r in mine)
        phubd = [r["phubd_ns_per_byte"] for r in mine if r["phubd_ns_per_byte"] is not None]
        body.append(["tune-nics.sh --apply" if tuned else "untuned",
                     f"{statistics.median(r['ms_per_iter'] for r in mine):.1f}",
                     f"{on} of {on + off}",
                     f"{statistics.median(phubd):.3f}" if phubd else "-",
                     f"{statistics.median(r['machine_ns_per_byte'] for r in mine):.2f}"])
    md += tables.md_table(["PS host", "ms / iter", "connections handled on their core's CPU",
                           "phubd ns / byte in", "machine CPU ns / byte pushed"], body)
    return md


def plot(path, s):
    plt = plots.import_pyplot()
    if plt is None:
        return
    keys = [c[0] for c in CASES]
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = range(len(keys))
    ax.bar(xs, [s[k]["ms"] for k in keys], color=["tab:gray", "tab:green", "tab:orange"])
    ax.scatter(xs, [s[k]["limit_ms"] for k in keys], marker="_", s=900, color="black",
               label="link-bound limit", zorder=3)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(keys)
    ax.set_ylabel("ms per iteration")
    ax.set_title("PS time per iteration: one NIC of N.B, two of N.B/2, one of N.B/2",
                 fontsize=10)
    ax.legend()
    plots.save(plt, fig, path, 120)


def main():
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=4, help="workers (default: 4)")
    p.add_argument("--rate", default="500mbit", help="worker link rate B (default: 500mbit)")
    p.add_argument("--mib", type=float, default=32, help="S, MiB per worker per iteration")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steer-reps", type=int, default=2,
                   help="steering runs, untuned and tuned each (0: none)")
    p.add_argument("--steer-iters", type=int, default=10,
                   help="timed iterations of a steering run (at least --iters)")
    p.add_argument("--cores", type=int, default=2, help="phubd --cores (alternating over NICs)")
    p.add_argument("--chunk-bytes", type=int, default=256 << 10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "pbox-nics"))
    a = p.parse_args()
    problem = nets.rack_problem(otherwise=None)
    if problem:
        p.error(problem)
    needed = {"phubd": os.path.join(a.build, "phub", "server", "phubd"),
              "phub_exchange_worker": os.path.join(a.build, "bench", "exchange",
                                                   "phub_exchange_worker")}
    missing = [b for b in needed.values() if not os.access(b, os.X_OK)]
    if missing:
        p.error(f"not built: {', '.join(missing)} (deploy/build.sh)")
    if nets.racks_up():
        p.error(f"a rack is up already ({', '.join(nets.racks_up())}): one at a time")
    a.settings = systems.Settings(needed, a.iters, a.warmup, a.cores, a.lr, a.chunk_bytes)
    raw = os.path.join(a.out, "raw")
    fresh_dir(a.out)
    os.makedirs(raw)
    start_load = machine.load_average()
    rows, steering = [], []
    with open(RPS_FLOW_ENTRIES) as f:
        a.flow_entries = f.read().strip()  # global, not per namespace: put back at the end
    try:
        for rack in ("one", "two"):
            got, steer = run_rack(a, rack, raw)
            rows += got
            steering += steer
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    finally:
        kill_children()
        nets.cleanup()
        set_flow_entries(a.flow_entries)
    for key, _, _, _ in CASES:
        if len({r["checksum"] for r in rows if r["system"] == key}) > 1:
            log(f"FAILED: {key}: results differ between repetitions")
            return 1
    tables.write_tsv(os.path.join(a.out, "nics.tsv"), rows, list(rows[0].keys()),
                     cell=tables.short_float)
    s = summarize(rows)
    md = markdown(a, s, [machine.describe(start_load)])
    if steering:
        tables.write_tsv(os.path.join(a.out, "steering.tsv"), steering,
                         list(steering[0].keys()), cell=tables.short_float)
        md += steering_markdown(a, steering)
    tables.write_markdown(os.path.join(a.out, "nics.md"), md)
    plot(os.path.join(a.out, "nics.png"), s)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
