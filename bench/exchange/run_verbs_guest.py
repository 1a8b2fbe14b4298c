#!/usr/bin/python3
"""The exchange on verbs, measured in the soft-RoCE guest against ib_write_bw in the same guest.

    bench/exchange/run_verbs_guest.py                 # N=2, S=32 MiB: about 5 minutes
    bench/exchange/run_verbs_guest.py --mib 8 --reps 2 --out results/verbs

On the host it builds phubd and the bench workers for the guest's CPU (no -march=native) into
build/guest, boots tests/verbs/run_in_guest.sh once and runs this same script inside with
--in-guest; there every measurement prints one RESULT line, which the host turns into
verbs.tsv, verbs.md and verbs.png in --out.

In the guest, alternating, --reps times each:
  ib_write_bw   perftest, rxe0, 1 MiB writes (the PS's chunk), one QP: unidirectional, and
                bidirectional (-b: both sides write at once, as a PS and its workers do)
  ps verbs      phubd --transport verbs --cores 2 + N phub_exchange_worker (S MiB each)
  ps tcp        the same over TCP on the guest's loopback
  ring verbs/tcp  phub_ring_worker, our ring allreduce on each transport
Per-iteration time = max over workers of (t1 - t0); median over all timed iterations.

The ratio the bar is about (issue 7: >= 60 %): the PS's bytes through rxe0 per second,
2 N S / t (N S pushed and N S of weights back), over ib_write_bw's bidirectional total.
Everything runs on the guest's two emulated (TCG) CPUs: these are emulation speeds, tens of
MB/s, not hardware speeds; docs/benchmarks.md has the model for ConnectX hardware.

phubd's CPU per byte received (issue 18), both ps runs: the cores' CPU over the bytes pushed to
them, from phubd's job-end log line (systems.phubd_cpu, as run_exchange.py reads it), and the
whole phubd process's user and system time (/proc/PID/stat at its exit); ns per byte, cycles per
byte at the clock the guest's /proc/cpuinfo reports, verbs over TCP. Under soft-RoCE the NIC's
work is the guest kernel's, and under TCG every figure is an emulation figure: see verbs.md.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
from benchlib import BenchError, plots, tables  # noqa: E402
from benchlib.cli import parser  # noqa: E402
from benchlib.log import log  # noqa: E402
from benchlib.procs import kill_children, start, tail, wait_all, wait_port_file  # noqa: E402
import systems  # noqa: E402  (phubd_cpu: phubd's job-end CPU line, as run_exchange.py reads it)
from timing import per_iteration  # noqa: E402

MiB = 1 << 20


# ---- in the guest --------------------------------------------------------------------------

def ib_write_bw(bidirectional, iters):
    """Median-free single run: returns bytes/s (both directions summed with -b)."""
    args = ["ib_write_bw", "-d", "rxe0", "-x", "1", "-s", str(MiB), "-n", str(iters), "-F",
            "--report_gbits"] + (["-b"] if bidirectional else [])
    with tempfile.TemporaryDirectory() as tmp:
        server_log = os.path.join(tmp, "server.log")
        server = start(args, server_log)
        client = None
        for _ in range(50):  # the server needs a moment to listen
            client = subprocess.run(args + ["127.0.0.1"], capture_output=True, text=True)
            if client.returncode == 0:
                break
            time.sleep(0.1)
        server.wait(timeout=60)
        if client.returncode != 0:
            raise BenchError(f"ib_write_bw client failed:\n{client.stdout}{client.stderr}")
    # The data line: "#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]".
    for line in client.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0] == str(MiB) and re.match(r"^[0-9.]+$", fields[3]):
            return float(fields[3]) * 1e9 / 8
    raise BenchError(f"no bandwidth line in ib_write_bw's output:\n{client.stdout}")


def ps(build, transport, n, mib, iters, warmup, tmp):
    """Returns (per-iteration times, phubd's CPU: {cpu_s, bytes_in} from its job-end line,
    {user_s, sys_s} of its whole process)."""
    run_dir = tempfile.mkdtemp(dir=tmp, prefix=f"ps-{transport}-")  # one run's files only
    port_file = os.path.join(run_dir, "port")
    log_path = os.path.join(run_dir, "phubd.log")  # the name systems.phubd_cpu globs
    phubd = start([os.path.join(build, "phub/server/phubd"), "--max-world-size", str(n),
                   "--cores", "2", "--no-pin", "--port", "0", "--port-file", port_file,
                   "--optimizer", "sgd", "--lr", "0.001", "--one-job", "--log-level", "info",
                   "--transport", transport], log_path)
    port = wait_port_file(port_file, phubd, "phubd", log_path)
    try:
        times = run_ranks("ps", n, run_dir, lambda r, out: [
            os.path.join(build, "bench/exchange/phub_exchange_worker"), "--port", port, "--rank",
            str(r), "--world", str(n), "--mib", str(mib), "--iters", str(iters), "--warmup",
            str(warmup), "--lr", "0.001", "--out", out])
    except BenchError as e:
        raise BenchError(f"{e}\nphubd's log ({log_path}):\n{tail(log_path)}") from None
    user_s, sys_s = exited_process_cpu(phubd, "phubd", log_path, timeout=120)
    wait_all([("phubd", phubd, log_path)], timeout=10)  # reaps it, checks its exit status
    cpu = systems.phubd_cpu(run_dir)
    if cpu is None:
        raise BenchError(f"phubd logged no job-end CPU line; its log ({log_path}):\n"
                         f"{tail(log_path)}")
    return times, {"cpu_s": cpu[0], "bytes_in": cpu[1], "user_s": user_s, "sys_s": sys_s}


def exited_process_cpu(proc, name, log_path, timeout):
    """(user s, system s) of a child's whole process, all its threads, read from /proc/PID/stat
    once it has exited but before it is reaped (waitid WNOWAIT keeps the zombie). phubd's own
    figure sums CLOCK_THREAD_CPUTIME_ID over its core threads and does not split the two."""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > deadline:
            raise BenchError(f"{name} still running {timeout} s after its workers ended; its "
                             f"log ({log_path}):\n{tail(log_path)}")
        time.sleep(0.01)
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)": state ppid ... utime stime
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def guest_cpu_mhz():
    """The clock this machine's /proc/cpuinfo reports (0 if none), read as run_exchange.py's
    CPU table reads it."""
    from run_exchange import cpu_mhz  # only here: it pulls in the racks' modules
    return cpu_mhz()


def ring(build, transport, n, mib, iters, warmup, tmp):
    rendezvous = tempfile.mkdtemp(dir=tmp)
    return run_ranks("ring", n, tmp, lambda r, out: [
        os.path.join(build, "bench/exchange/phub_ring_worker"), "--rank", str(r), "--world",
        str(n), "--rendezvous", rendezvous, "--mib", str(mib), "--iters", str(iters),
        "--warmup", str(warmup), "--transport", transport, "--out", out])


def run_ranks(name, n, tmp, argv, others=()):
    """Starts n ranks (argv(rank, out_path)), waits for them and `others`, checks they agree;
    returns the per-iteration times."""
    procs, outs = [], []
    for r in range(n):
        out = os.path.join(tmp, f"{name}{r}.tsv")
        log_path = os.path.join(tmp, f"{name}{r}.log")
        outs.append(out)
        procs.append((f"{name} rank {r}", start(argv(r, out), log_path), log_path))
    wait_all(procs + list(others), timeout=900)
    times, checksums = per_iteration(outs)
    if len(set(checksums)) != 1:
        raise BenchError(f"{name} ranks disagree on their results: {checksums}")
    return times


def ns_per_byte(cpu):
    """phubd's cores' CPU per byte received, from ps()'s CPU dict."""
    return 1e9 * cpu["cpu_s"] / cpu["bytes_in"]


def in_guest(args):
    tmp = os.environ.get("TMPDIR", "/tmp")
    print("RESULT " + json.dumps({"system": "guest cpu MHz", "rep": 0, "value": guest_cpu_mhz()}),
          flush=True)
    for rep in range(1, args.reps + 1):
        for name, run in [
                ("ib_write_bw", lambda: ib_write_bw(False, args.ib_iters)),
                ("ib_write_bw -b", lambda: ib_write_bw(True, args.ib_iters)),
                ("ps verbs", lambda: ps(args.build, "verbs", args.workers, args.mib, args.iters, args.warmup, tmp)),
                ("ps tcp", lambda: ps(args.build, "tcp", args.workers, args.mib, args.iters, args.warmup, tmp)),
                ("ring verbs", lambda: ring(args.build, "verbs", args.workers, args.mib, args.iters, args.warmup, tmp)),
                ("ring tcp", lambda: ring(args.build, "tcp", args.workers, args.mib, args.iters, args.warmup, tmp))]:
            log(f"[rep {rep}/{args.reps}] {name} ...")
            value, cpu = run(), None
            if name.startswith("ps "):
                value, cpu = value
            result = {"system": name, "rep": rep, "value": value}
            if cpu:
                result["phubd"] = cpu
            print("RESULT " + json.dumps(result), flush=True)
            log(f"[rep {rep}/{args.reps}] {name}: "
                + (f"{value / 1e6:.1f} MB/s" if name.startswith("ib_") else
                   f"median {statistics.median(value) * 1e3:.0f} ms")
                + (f", phubd's cores {ns_per_byte(cpu):.2f} ns per byte in" if cpu else ""))
    kill_children()


# ---- on the host ---------------------------------------------------------------------------

def build_guest_binaries(build):
    subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DPHUB_NATIVE=OFF", "-DPHUB_WITH_CUDA=OFF", "-DPHUB_BUILD_BENCH=ON"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", build, "-j", os.environ.get("PHUB_JOBS", "2"), "phubd",
                    "phub_exchange_worker", "phub_ring_worker"], check=True)


def report(args, results):
    ib = [r["value"] for r in results if r["system"] == "ib_write_bw"]
    ib_bi = [r["value"] for r in results if r["system"] == "ib_write_bw -b"]
    uni, bi = statistics.median(ib), statistics.median(ib_bi)
    n, s = args.workers, args.mib * MiB
    rows = [{"label": "ib_write_bw", "system": "ib_write_bw (1 QP, 1 MiB writes)", "ms": "",
             "mb_per_s": uni / 1e6, "ratio": ""},
            {"label": "ib_write_bw -b", "system": "ib_write_bw -b (both directions, total)",
             "ms": "", "mb_per_s": bi / 1e6, "ratio": ""}]
    for name in ["ps verbs", "ps tcp", "ring verbs", "ring tcp"]:
        times = [t for r in results if r["system"] == name for t in r["value"]]
        t = statistics.median(times)
        # Bytes through the device per second: the PS moves N S up and N S down; a ring rank
        # sends 2 (N-1)/N S and receives as much, N ranks.
        moved = 2 * n * s if name.startswith("ps") else 2 * (n - 1) * s
        rows.append({"label": name, "system": f"{name} (N={n}, S={args.mib} MiB)", "ms": t * 1e3,
                     "mb_per_s": moved / t / 1e6, "ratio": moved / t / bi})
    cpu_rows, mhz = phubd_cpu_rows(results)
    for row in rows:
        row.update(cpu_rows.get(row["label"], {}))
    os.makedirs(args.out, exist_ok=True)
    tsv = os.path.join(args.out, "verbs.tsv")
    tables.write_tsv(tsv, rows, ["label", "system", "ms", "mb_per_s", "ratio", "phubd_ns_per_byte",
                                 "phubd_cycles_per_byte", "phubd_user_ns_per_byte",
                                 "phubd_sys_ns_per_byte", "phubd_cpu_vs_tcp",
                                 "phubd_user_vs_tcp", "cpu_mhz"])
    md = tables.md_table(
        ["system", "time per iteration (ms)", "bytes moved (MB/s)", "of ib_write_bw -b"],
        [[r["system"], tables.fmt(r["ms"], ".0f", missing=""),
          tables.fmt(r["mb_per_s"], ".1f", missing=""), tables.fmt(r["ratio"], ".0%", missing="")]
         for r in rows], "lrrr")
    md.append("")
    md.append(f"Soft-RoCE (rdma_rxe) in a QEMU TCG guest with 2 emulated CPUs; medians of "
              f"{args.reps} runs x {args.iters} iterations. Bytes moved: PS 2 N S per iteration, "
              f"ring 2 (N-1) S; the tcp rows run over the guest's loopback, not rxe0 (context "
              f"only). Emulation speeds, not hardware speeds.")
    if cpu_rows:
        md += [""] + phubd_cpu_markdown(args, results, cpu_rows, mhz)
    print(tables.write_markdown(os.path.join(args.out, "verbs.md"), md))
    plots.plot_tsv_or_log(tsv, os.path.join(args.out, "verbs.png"), x="label", y="mb_per_s",
                          kind="bar", annotate=True, ylabel="bytes moved, MB/s",
                          xlabel=f"N = {n}, S = {args.mib} MiB",
                          title="Exchange on soft-RoCE vs ib_write_bw (same guest)")


CPU_SYSTEMS = ["ps verbs", "ps tcp"]


def phubd_cpu_rows(results):
    """({label: phubd's CPU columns, medians over the reps}, the guest's MHz) for the ps runs
    that carry phubd's figures (raw.jsonl files of earlier versions do not: then ({}, 0))."""
    mhz = next((r["value"] for r in results if r["system"] == "guest cpu MHz"), 0.0)
    rows = {}
    for name in CPU_SYSTEMS:
        cpus = [r["phubd"] for r in results if r["system"] == name and r.get("phubd")]
        if not cpus:
            continue
        ns = statistics.median(ns_per_byte(c) for c in cpus)
        rows[name] = {
            "phubd_ns_per_byte": ns,
            "phubd_cycles_per_byte": ns * mhz / 1e3 if mhz else "",
            "phubd_user_ns_per_byte": statistics.median(1e9 * c["user_s"] / c["bytes_in"]
                                                        for c in cpus),
            "phubd_sys_ns_per_byte": statistics.median(1e9 * c["sys_s"] / c["bytes_in"]
                                                       for c in cpus),
            "cpu_mhz": mhz or "", "reps": len(cpus)}
    if len(rows) == len(CPU_SYSTEMS):
        verbs, tcp = rows["ps verbs"], rows["ps tcp"]
        verbs["phubd_cpu_vs_tcp"] = verbs["phubd_ns_per_byte"] / tcp["phubd_ns_per_byte"]
        if tcp["phubd_user_ns_per_byte"]:
            verbs["phubd_user_vs_tcp"] = (verbs["phubd_user_ns_per_byte"]
                                          / tcp["phubd_user_ns_per_byte"])
    return rows, mhz


def phubd_cpu_markdown(args, results, rows, mhz):
    """The lines of verbs.md's section on phubd's CPU per byte received."""
    clock = (f"{mhz:.0f} MHz, the clock the guest's /proc/cpuinfo reports (calibrated from the "
             f"TSC; under TCG a cycle of that clock is not an emulated instruction's cycle)"
             if mhz else "no clock: the guest's /proc/cpuinfo reports none")
    reps = min(r["reps"] for r in rows.values())
    md = ["### phubd's CPU per byte received (issue 18)", "",
          f"N = {args.workers}, S = {args.mib} MiB, medians of {reps} runs of each (each run "
          f"{args.warmup} + {args.iters} iterations, set-up included), verbs and TCP alternated "
          f"in one guest boot; cycles at {clock}.", ""]
    md += tables.md_table(
        ["system", "cores: ns / byte in", "cycles / byte", "GB/s per core", "of TCP",
         "process user: ns / byte", "of TCP", "process system: ns / byte"],
        [[name, f"{r['phubd_ns_per_byte']:.2f}",
          tables.fmt(r["phubd_cycles_per_byte"], ".1f"), f"{1 / r['phubd_ns_per_byte']:.3f}",
          tables.fmt(r.get("phubd_cpu_vs_tcp"), ".2f", missing=""),
          f"{r['phubd_user_ns_per_byte']:.2f}",
          tables.fmt(r.get("phubd_user_vs_tcp"), ".2f", missing=""),
          f"{r['phubd_sys_ns_per_byte']:.2f}"]
         for name, r in rows.items()], "lrrrrrrr")

    def per_run(name, key):
        return ", ".join(f"{1e9 * r['phubd'][key] / r['phubd']['bytes_in']:.2f}"
                         for r in results if r["system"] == name and r.get("phubd"))
    md += ["", "Per run, ns / byte in: " + "; ".join(
        f"{name} cores {per_run(name, 'cpu_s')}, user {per_run(name, 'user_s')}"
        for name in rows) + ".", "",
           "**Cores** is phubd's own figure, its job-end log line (as in benchmarks.md's TCP "
           "table): the CPU time (CLOCK_THREAD_CPUTIME_ID, user + system) of each core thread "
           "from the moment the job's shard is installed (slots allocated; the memory "
           "registration, the connections' set-up and the warm-up iteration inside) to the "
           "job's end, summed over the cores, over the payload bytes of the PUSH and INIT "
           "messages they received. It counts the aggregation, the optimizer, the bookkeeping "
           "and all the kernel does inside those threads' system calls: over TCP recv's and "
           "send's copies and the loopback delivery a send triggers; over soft-RoCE rxe's "
           "protocol work, which kernel 6.1 runs in the posting thread's system call (the "
           "copies and ICRCs of the weights phubd sends and, rxe0 being its own peer, likely "
           "much of the receiving side's). It does not count phubd's other threads, nor kernel work in "
           "ksoftirqd, kworkers or other threads' context (rxe's work for the pushes runs "
           "mostly in the workers' system calls). It does count, under TCG, the moments the "
           "host deschedules the emulator while a core thread runs: the guest's clocks go on. "
           "**Process user / system** "
           "split the whole phubd process's CPU (all threads, /proc/PID/stat at exit, tick-"
           "sampled) over the same bytes: user is phubd's own work, system the kernel's.",
           "",
           "So the verbs row is not a RoCE NIC's figure: on soft-RoCE the NIC is the guest "
           "kernel, and everything runs under TCG emulation, so the absolute numbers are "
           "emulation numbers. What carries over is the ratio to TCP in the same boot and "
           "phubd's own (user) work per byte: zero-copy landing in the slots leaves the "
           "aggregation pass and the bookkeeping, against TCP's recv copies and system calls; "
           "on a hardware NIC the system part of the verbs row (rxe) is the NIC's."]
    return md


def main():
    p = parser(__doc__)
    p.add_argument("--workers", type=int, default=2, help="N (default 2)")
    p.add_argument("--mib", type=int, default=32, help="S in MiB (default 32)")
    p.add_argument("--iters", type=int, default=3, help="timed iterations per run (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    p.add_argument("--reps", type=int, default=3, help="runs of each, alternated (default 3)")
    p.add_argument("--ib-iters", type=int, default=200, help="ib_write_bw -n (default 200)")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "guest"),
                   help="build dir for the guest's binaries (default build/guest)")
    p.add_argument("--out", default="results/verbs", help="output dir (default results/verbs)")
    p.add_argument("--from-raw", metavar="JSONL", help="only rebuild the tables from a raw.jsonl")
    p.add_argument("--in-guest", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.build = os.path.abspath(args.build)
    if args.in_guest:
        return in_guest(args)
    if args.from_raw:
        with open(args.from_raw) as f:
            report(args, [json.loads(line) for line in f if line.strip()])
        return 0

    build_guest_binaries(args.build)
    cmd = [os.path.join(ROOT, "tests/verbs/run_in_guest.sh"), "--timeout", "3000", "--",
           "/usr/bin/python3", os.path.abspath(__file__), "--in-guest", "--build", args.build,
           "--workers", str(args.workers), "--mib", str(args.mib), "--iters", str(args.iters),
           "--warmup", str(args.warmup), "--reps", str(args.reps), "--ib-iters", str(args.ib_iters)]
    results = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=args.build) as guest:
        for line in guest.stdout:
            if line.startswith("RESULT "):
                results.append(json.loads(line[7:]))
            else:
                sys.stdout.write(line)
    if guest.returncode == 77:
        log("skipped: no guest can be had on this machine (run_in_guest.sh exit 77)")
        return 77
    if guest.returncode != 0:
        log(f"the guest run failed (exit {guest.returncode})")
        return guest.returncode
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "raw.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    report(args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
