#!/usr/bin/env python3
"""run_exchange.py: the `exchange` benchmark — push+pull through phubd vs raw TCP loopback.

For each worker count N and tensor size S it runs, alternately and --reps times each:
  raw TCP  phub_tcp_blaster --serve (C threads x N connections) + N --connect clients, which
           move exactly the PS's bytes (S up and S down per client over C streams) with no
           aggregation;
  PS       phubd --one-job (C cores) + N phub_exchange_worker processes, each pushing an S-byte
           tensor and waiting for its fresh weights.
Both start every iteration barrier-aligned. An iteration's time is the max over workers of
(first byte pushed -> last weight landed); the result is the median over all timed iterations
of all repetitions. Reported: PS time, algbw = S / t, PS byte rate = 2*N*S / t (what phubd
receives plus sends), the raw-TCP byte rate of the same bytes, and their ratio.
GB/s here is 1e9 bytes per second; S is in MiB (2^20 bytes).

The PS workers also check their final weights (SGD with --lr, known gradients) and write a
checksum of them: the run fails if any worker's weights are wrong or differ from another's.

--tcp-nagle and --socket-buffer-bytes pass phubd's TCP knobs through (to phubd and the
workers; the buffer size to the raw-TCP reference too), to measure what each is worth.

--ring, --gloo and --mpi add allreduce baselines to the same repetitions (after raw TCP and
the PS): our ring (phub_ring_worker), Gloo's AllreduceRingChunked and gloo::allreduce
(phub_gloo_worker), Open MPI's MPI_Allreduce with its own algorithm choice and with the ring
forced (phub_mpi_worker under mpirun, TCP loopback only). Each adds "<name> ms" and
"<name>/PS time"; with --ring and --gloo also "ring/gloo-ring-chunked time". All of them end
with the same buffer (the mean (N + 1) / 2): the run fails if any rank's differs.

--sweep-chunk adds a table for choosing phubd's --chunk-bytes: N=2, S=32 MiB, PS time per
chunk size, against raw TCP measured in the same loop.

Writes OUT/exchange.tsv, OUT/exchange_chunk_sweep.tsv (with --sweep-chunk), OUT/exchange.md,
OUT/exchange.png (needs matplotlib) and every process's log and raw timings under OUT/raw/.
Progress goes to stderr, the tables to stdout. Exit 1 (with the failing process's log tail) if
any process fails, times out, or the workers' weights differ. Child processes are killed on
exit, error or Ctrl-C.

  ninja -C build phubd phub_exchange_worker phub_tcp_blaster
  bench/exchange/run_exchange.py --build build            # S = 4,32,100 MiB; N = 2,4
  ninja -C build phub_ring_worker phub_gloo_worker phub_mpi_worker
  bench/exchange/run_exchange.py --build build --ring --gloo --mpi
  bench/exchange/run_exchange.py --quick                  # S = 4,32 MiB; 5 iterations
  bench/exchange/run_exchange.py --skip-main --sweep-chunk
"""

import argparse
import datetime
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time

MIB = 1 << 20
DEFAULT_SWEEP = "65536,262144,524288,1048576,4194304"
SWEEP_WORKERS = 2
SWEEP_MIB = 32


class BenchError(Exception):
    """A process failed, timed out, or produced wrong results."""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- processes ----------------------------------------------------------------------------

_children = []  # every Popen started, so they can all be killed on the way out


def session_members(sid):
    """Pids in session `sid`: a child started with start_new_session=True and everything it
    started (mpirun puts each rank in a process group of its own, but in its session)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # fields after "(comm)": state ppid pgrp session ...
            pids.append(int(entry))
    return pids


def kill_children():
    # SIGTERM first: mpirun forwards it to its ranks and reaps them; after a grace period,
    # SIGKILL to whatever is left in each child's session (ranks of a killed mpirun included).
    live = [proc for proc in _children if proc.poll() is None]
    for proc in live:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # each child leads its own process group
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and any(proc.poll() is None for proc in live):
        time.sleep(0.02)
    for proc in _children:  # an mpirun that exited may have left ranks behind
        for pid in session_members(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for proc in _children:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    _children.clear()


def start(argv, log_path):
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    _children.append(proc)
    return proc


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return "(no log)"


def wait_port_file(path, proc, name, log_path, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return text
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise BenchError(f"{name} exited with {proc.returncode} before listening; its log "
                             f"({log_path}):\n{tail(log_path)}")
        time.sleep(0.01)
    raise BenchError(f"{name} did not write {path} within {timeout:.0f} s; its log:\n"
                     f"{tail(log_path)}")


def wait_all(procs, timeout):
    """procs: [(name, Popen, log_path)]. Returns when all exited 0; raises on the first failure."""
    deadline = time.monotonic() + timeout
    pending = list(procs)
    while pending:
        for item in list(pending):
            name, proc, log_path = item
            rc = proc.poll()
            if rc is None:
                continue
            if rc != 0:
                raise BenchError(f"{name} exited with {rc}; its log ({log_path}):\n"
                                 f"{tail(log_path)}")
            pending.remove(item)
        if pending and time.monotonic() > deadline:
            names = ", ".join(name for name, _, _ in pending)
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {names}; last log "
                             f"({pending[0][2]}):\n{tail(pending[0][2])}")
        time.sleep(0.01)


def run_timeout(n, mib, rounds):
    # Generous: 20 ms per MiB moved per worker per round (~50 MB/s), plus start-up.
    return 60.0 + rounds * n * mib * 2 * 0.02


# ---- one measurement ----------------------------------------------------------------------

def read_samples(path):
    """Returns ([(t0_ns, t1_ns)], checksum or None) from a worker's or client's TSV."""
    samples, checksum = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("#") or line.startswith("iter"):
                continue
            fields = line.split()
            if fields[0] == "checksum":
                checksum = fields[1]
            elif fields:
                samples.append((int(fields[1]), int(fields[2])))
    return samples, checksum


def per_iteration(files):
    """Per-iteration max over workers of (t1 - t0), in seconds; plus the checksums."""
    runs = [read_samples(path) for path in files]
    counts = {len(samples) for samples, _ in runs}
    if len(counts) != 1 or 0 in counts:
        raise BenchError(f"workers wrote different or zero iteration counts: "
                         f"{[len(s) for s, _ in runs]} ({files[0]} ...)")
    times = []
    for i in range(counts.pop()):
        times.append(max(samples[i][1] - samples[i][0] for samples, _ in runs) * 1e-9)
    return times, [checksum for _, checksum in runs]


def run_blaster(args, bins, n, mib, rounds_dir, tag):
    d = os.path.join(rounds_dir, tag)
    os.makedirs(d, exist_ok=True)
    common = ["--world", str(n), "--mib", f"{mib:g}", "--iters", str(args.iters),
              "--warmup", str(args.warmup), "--socket-buffer-bytes", str(args.socket_buffer_bytes)]
    port_file = os.path.join(d, "ports")
    if os.path.exists(port_file):
        os.remove(port_file)  # a stale one would send the clients to a dead port
    server_log = os.path.join(d, "server.log")
    server = start([bins["blaster"], "--serve", "--listen", "127.0.0.1", "--cores",
                    str(args.cores), "--port-file", port_file] + common, server_log)
    try:
        ports = wait_port_file(port_file, server, "tcp_blaster server", server_log)
        procs, outs = [], []
        for r in range(n):
            out = os.path.join(d, f"client{r}.tsv")
            client_log = os.path.join(d, f"client{r}.log")
            procs.append((f"tcp_blaster client {r}",
                          start([bins["blaster"], "--connect", "--host", "127.0.0.1", "--ports",
                                 ports, "--rank", str(r), "--out", out] + common, client_log),
                          client_log))
            outs.append(out)
        procs.append(("tcp_blaster server", server, server_log))
        wait_all(procs, run_timeout(n, mib, args.iters + args.warmup))
    finally:
        kill_children()
    times, _ = per_iteration(outs)
    return times


def run_ps(args, bins, n, mib, rounds_dir, tag, chunk_bytes=None):
    d = os.path.join(rounds_dir, tag)
    os.makedirs(d, exist_ok=True)
    port_file = os.path.join(d, "port")
    if os.path.exists(port_file):
        os.remove(port_file)  # a stale one would send the workers to a dead port
    phubd_log = os.path.join(d, "phubd.log")
    argv = [bins["phubd"], "--port", "0", "--port-file", port_file, "--listen", "127.0.0.1",
            "--world-size", str(n), "--cores", str(args.cores), "--one-job", "--no-pin",
            "--log-level", "warn", "--optimizer", "sgd", "--lr", str(args.lr)]
    if chunk_bytes:
        argv += ["--chunk-bytes", str(chunk_bytes)]
    tcp = ["--socket-buffer-bytes", str(args.socket_buffer_bytes)]
    if args.tcp_nagle:
        tcp.append("--tcp-nagle")
    argv += tcp
    phubd = start(argv, phubd_log)
    try:
        port = wait_port_file(port_file, phubd, "phubd", phubd_log)
        procs, outs = [], []
        for r in range(n):
            out = os.path.join(d, f"worker{r}.tsv")
            worker_log = os.path.join(d, f"worker{r}.log")
            procs.append((f"exchange worker {r}",
                          start([bins["worker"], "--host", "127.0.0.1", "--port", port,
                                 "--rank", str(r), "--world", str(n), "--mib", f"{mib:g}",
                                 "--iters", str(args.iters), "--warmup", str(args.warmup),
                                 "--lr", str(args.lr), "--out", out] + tcp, worker_log),
                          worker_log))
            outs.append(out)
        procs.append(("phubd", phubd, phubd_log))
        wait_all(procs, run_timeout(n, mib, args.iters + args.warmup))
    finally:
        kill_children()
    times, checksums = per_iteration(outs)
    if None in checksums or len(set(checksums)) != 1:
        raise BenchError(f"workers' final weights differ (N={n}, S={mib} MiB): checksums "
                         f"{checksums}; files in {d}")
    return times, checksums[0]


class Baseline:
    """An allreduce system timed beside the PS. All write ring_worker.cc's per-rank TSV (same
    timing rule, data and checksum); they differ in binary and how their ranks are started:
    "ranks" starts N processes meeting in a rendezvous directory (--rank --world
    --rendezvous), "mpirun" starts them through Open MPI's mpirun."""

    def __init__(self, key, flag, name, binary, launch, extra=(), titles=None):
        self.key = key          # row keys KEY_ms, KEY_vs_ps
        self.flag = flag        # the driver flag that enables it (--ring, --gloo, --mpi)
        self.name = name        # in logs and column titles
        self.binary = binary    # target in bench/exchange
        self.launch = launch    # "ranks" or "mpirun"
        self.extra = list(extra)  # more arguments: the worker's for "ranks", mpirun's for "mpirun"
        self.titles = titles or (f"{name} ms", f"{name}/PS time")


# Open MPI on loopback TCP only (no shared memory, no UCX), ranks not bound to cores (nor
# are the other systems' processes); --allow-run-as-root is a no-op when not root.
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]
# 4 = ring in Open MPI 4.1's coll_tuned_allreduce_algorithm
# (`ompi_info --param coll tuned --level 9`); without these MPI picks by size.
MPI_RING = ["--mca", "coll_tuned_use_dynamic_rules", "1",
            "--mca", "coll_tuned_allreduce_algorithm", "4"]

BASELINES = [
    Baseline("ring", "ring", "ring", "phub_ring_worker", "ranks",
             titles=("ring time ms", "ring/PS time")),
    Baseline("gloo_chunked", "gloo", "gloo-ring-chunked", "phub_gloo_worker", "ranks",
             ["--algo", "ring-chunked"]),
    Baseline("gloo_allreduce", "gloo", "gloo-allreduce", "phub_gloo_worker", "ranks",
             ["--algo", "allreduce"]),
    Baseline("mpi", "mpi", "mpi", "phub_mpi_worker", "mpirun"),
    Baseline("mpi_ring", "mpi", "mpi-ring", "phub_mpi_worker", "mpirun", MPI_RING),
]


def run_baseline(args, bins, base, n, mib, rounds_dir, tag):
    """One run of an allreduce baseline: N ranks on this machine. Returns (per-iteration times,
    checksum), after checking that every rank holds the same result."""
    d = os.path.join(rounds_dir, tag)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    common = ["--mib", f"{mib:g}", "--iters", str(args.iters), "--warmup", str(args.warmup)]
    procs, outs = [], []
    try:
        if base.launch == "mpirun":
            prefix = os.path.join(d, "rank")
            outs = [f"{prefix}{r}.tsv" for r in range(n)]
            log_path = os.path.join(d, "mpirun.log")
            procs.append((f"{base.name} mpirun",
                          start(MPIRUN + base.extra + ["-np", str(n), bins[base.binary]] + common
                                + ["--out", prefix], log_path), log_path))
        else:
            rendezvous = os.path.join(d, "rendezvous")
            os.makedirs(rendezvous)
            for r in range(n):
                out = os.path.join(d, f"rank{r}.tsv")
                rank_log = os.path.join(d, f"rank{r}.log")
                procs.append((f"{base.name} rank {r}",
                              start([bins[base.binary], "--rank", str(r), "--world", str(n),
                                     "--rendezvous", rendezvous] + base.extra + common
                                    + ["--out", out], rank_log), rank_log))
                outs.append(out)
        wait_all(procs, run_timeout(n, mib, args.iters + args.warmup))
    finally:
        kill_children()
    times, checksums = per_iteration(outs)
    if None in checksums or len(set(checksums)) != 1:
        raise BenchError(f"{base.name} ranks' results differ (N={n}, S={mib} MiB): {checksums}; "
                         f"files in {d}")
    return times, checksums[0]


# ---- experiments --------------------------------------------------------------------------

def fmt_ms(times):
    return f"{statistics.median(times) * 1e3:.1f} ms"


def measure(args, bins, baselines, n, mib, raw_dir, chunk_bytes=None):
    """Alternates raw TCP, PS and each of `baselines` --reps times. Returns (ps_reps, raw_reps,
    baseline_reps): per repetition, the per-iteration times; baseline_reps by Baseline.key."""
    ps_reps, raw_reps, checksums = [], [], set()
    baseline_reps = {base.key: [] for base in baselines}
    results = set()  # every baseline ends with the same mean, bit for bit: one checksum
    chunk_tag = f"-c{chunk_bytes}" if chunk_bytes else ""
    for rep in range(args.reps):
        where = f"N={n} S={mib:g} MiB{' chunk=' + str(chunk_bytes) if chunk_bytes else ''} " \
                f"rep {rep + 1}/{args.reps}"
        t = run_blaster(args, bins, n, mib, raw_dir, f"raw-n{n}-s{mib:g}-r{rep}")
        raw_reps.append(t)
        log(f"  raw TCP {where}: {fmt_ms(t)}")
        t, checksum = run_ps(args, bins, n, mib, raw_dir, f"ps-n{n}-s{mib:g}{chunk_tag}-r{rep}",
                             chunk_bytes)
        ps_reps.append(t)
        checksums.add(checksum)
        log(f"  PS      {where}: {fmt_ms(t)}  (weights identical on all {n} workers)")
        for base in baselines:
            t, result = run_baseline(args, bins, base, n, mib, raw_dir,
                                     f"{base.key}-n{n}-s{mib:g}-r{rep}")
            baseline_reps[base.key].append(t)
            results.add(result)
            log(f"  {base.name:<7} {where}: {fmt_ms(t)}  (result checked on all {n} ranks)")
    if len(checksums) != 1:
        # Same inputs, same reduction order per chunk: the repetitions must agree too.
        raise BenchError(f"final weights differ between repetitions (N={n}, S={mib} MiB): "
                         f"{sorted(checksums)}")
    if len(results) > 1:
        # All sums are of small integers (exact in float), all scale by 1.0f / N: same bytes.
        raise BenchError(f"allreduce baselines' final buffers differ (N={n}, S={mib} MiB): "
                         f"{sorted(results)}; files in {raw_dir}")
    return ps_reps, raw_reps, baseline_reps


def row_for(n, mib, ps_reps, raw_reps, chunk_bytes=None, baseline_reps=None):
    """ps_reps, raw_reps: per repetition, the per-iteration times (s); baseline_reps: the same
    by Baseline.key. Medians pool all iterations; ratio_paired is the median over repetitions
    of raw/PS for runs made back to back, which cancels load that drifts slowly (other jobs on
    a shared machine)."""
    s = mib * MIB
    ps_times = [t for rep in ps_reps for t in rep]
    raw_times = [t for rep in raw_reps for t in rep]
    t_ps = statistics.median(ps_times)
    row = {"workers": n, "mib": mib, "ps_ms": t_ps * 1e3,
           "ps_ms_min": min(ps_times) * 1e3, "ps_ms_max": max(ps_times) * 1e3,
           "algbw": s / t_ps / 1e9, "ps_rate": 2 * n * s / t_ps / 1e9, "samples": len(ps_times)}
    if chunk_bytes is not None:
        row["chunk_bytes"] = chunk_bytes
    if raw_times:
        t_raw = statistics.median(raw_times)
        row.update({"raw_ms": t_raw * 1e3, "raw_rate": 2 * n * s / t_raw / 1e9,
                    "ratio": t_raw / t_ps})
        if len(raw_reps) == len(ps_reps):
            row["ratio_paired"] = statistics.median(
                statistics.median(r) / statistics.median(p) for r, p in zip(raw_reps, ps_reps))
    for key, reps in (baseline_reps or {}).items():
        t_base = statistics.median([t for rep in reps for t in rep])
        row.update({f"{key}_ms": t_base * 1e3, f"{key}_vs_ps": t_base / t_ps})
    if "ring_ms" in row and "gloo_chunked_ms" in row:
        row["ring_vs_gloo_chunked"] = row["ring_ms"] / row["gloo_chunked_ms"]
    return row


MAIN_COLUMNS = [("workers", "N", "{}"), ("mib", "S MiB", "{:g}"), ("ps_ms", "PS time ms", "{:.1f}"),
                ("algbw", "PS algbw GB/s", "{:.3f}"), ("ps_rate", "PS byte rate GB/s", "{:.3f}"),
                ("raw_rate", "raw TCP GB/s", "{:.3f}"), ("ratio", "PS/raw", "{:.0%}"),
                ("ratio_paired", "PS/raw paired", "{:.0%}")]
RING_VS_GLOO_COLUMN = ("ring_vs_gloo_chunked", "ring/gloo-ring-chunked time", "{:.2f}")


def baseline_columns(baselines):
    columns = []
    for base in baselines:
        columns += [(f"{base.key}_ms", base.titles[0], "{:.1f}"),
                    (f"{base.key}_vs_ps", base.titles[1], "{:.2f}")]
    keys = {base.key for base in baselines}
    if {"ring", "gloo_chunked"} <= keys:
        columns.append(RING_VS_GLOO_COLUMN)
    return columns


SWEEP_COLUMNS = [("chunk_bytes", "chunk bytes", "{}"), ("ps_ms", "PS time ms", "{:.1f}"),
                 ("ps_rate", "PS byte rate GB/s", "{:.3f}"), ("raw_rate", "raw TCP GB/s", "{:.3f}"),
                 ("ratio", "PS/raw", "{:.0%}"), ("ratio_paired", "PS/raw paired", "{:.0%}")]
TSV_EXTRA = ["ps_ms_min", "ps_ms_max", "raw_ms", "samples"]


def markdown_table(rows, columns):
    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |",
             "|" + "|".join("---:" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(f.format(row[key]) if key in row else "-"
                                       for key, _, f in columns) + " |")
    return "\n".join(lines)


def write_tsv(path, rows, columns):
    keys = [key for key, _, _ in columns] + TSV_EXTRA
    with open(path, "w") as f:
        f.write("\t".join(keys) + "\n")
        for row in rows:
            f.write("\t".join(f"{row[k]:.6g}" if isinstance(row.get(k), float) else str(row.get(k, ""))
                              for k in keys) + "\n")


def machine_notes(args, start_load):
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        rev = "?"
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        pass
    return (f"{datetime.datetime.now().isoformat(timespec='seconds')}, git {rev or '?'}, "
            f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, "
            f"load average {start_load} at start, "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at end; "
            f"phubd --cores {args.cores}"
            f"{' --chunk-bytes ' + str(args.chunk_bytes) if args.chunk_bytes else ' (default chunk size)'}"
            f"{', Nagle on (PS)' if args.tcp_nagle else ''}"
            f"{', socket buffers ' + str(args.socket_buffer_bytes) + ' B' if args.socket_buffer_bytes else ''}"
            f", SGD lr {args.lr}; {args.iters} timed + {args.warmup} warm-up iterations x "
            f"{args.reps} repetitions")


def plot(path, main_rows, sweep_rows):
    try:
        import matplotlib
    except ImportError:
        # A pyenv/venv python may not see Debian's python3-matplotlib: try its path once.
        sys.path.append("/usr/lib/python3/dist-packages")
        try:
            import matplotlib
        except ImportError:
            log("matplotlib not found (apt-get install python3-matplotlib): no exchange.png")
            return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (1 if main_rows else 0) + (1 if sweep_rows else 0)
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
    axes = axes[0]
    if main_rows:
        ax = axes[0]
        labels = [f"N={r['workers']}\nS={r['mib']:g} MiB" for r in main_rows]
        x = range(len(main_rows))
        w = 0.38
        ax.bar([i - w / 2 for i in x], [r.get("raw_rate", 0) for r in main_rows], w,
               label="raw TCP (tcp_blaster)", color="#9e9e9e")
        ax.bar([i + w / 2 for i in x], [r["ps_rate"] for r in main_rows], w,
               label="PS (phubd)", color="#1f77b4")
        for i, r in zip(x, main_rows):
            if "ratio" in r:
                top = max(r["ps_rate"], r["raw_rate"])
                ax.annotate(f"{r['ratio']:.0%}", (i, top), ha="center", va="bottom",
                            xytext=(0, 3), textcoords="offset points", fontsize=9)
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylabel("byte rate 2·N·S / t  (GB/s)")
        ax.set_title("push+pull on loopback: PS vs raw TCP (label: PS/raw)")
        ax.legend(fontsize=8)
        ax.margins(y=0.15)
    if sweep_rows:
        ax = axes[-1]
        xs = [r["chunk_bytes"] / 1024 for r in sweep_rows]
        ax.plot(xs, [r["ps_rate"] for r in sweep_rows], "o-", label="PS (phubd)")
        raws = [r["raw_rate"] for r in sweep_rows if "raw_rate" in r]
        if raws:
            ax.axhline(statistics.median(raws), color="#9e9e9e", ls="--", label="raw TCP")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:g}" for x in xs])
        ax.minorticks_off()
        ax.set_xlabel("--chunk-bytes (KiB)")
        ax.set_ylabel("byte rate 2·N·S / t  (GB/s)")
        ax.set_title(f"chunk size sweep, N={SWEEP_WORKERS}, S={SWEEP_MIB} MiB")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def parse_list(text, kind):
    return [kind(x) for x in text.split(",") if x.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--build", default="build", help="CMake build dir with the binaries (default: build)")
    p.add_argument("--sizes", default=None, help="tensor sizes S in MiB (default: 4,32,100; --quick: 4,32)")
    p.add_argument("--workers", default="2,4", help="worker counts N (default: 2,4)")
    p.add_argument("--cores", type=int, default=2, help="phubd cores = TCP streams per worker (default: 2)")
    p.add_argument("--chunk-bytes", type=int, default=None, help="phubd --chunk-bytes (default: phubd's)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per run (default: 10; --quick: 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first (default: 2)")
    p.add_argument("--reps", type=int, default=3, help="runs of each method per (N, S), alternated (default: 3)")
    p.add_argument("--tcp-nagle", action="store_true",
                   help="PS only: leave Nagle on (phubd and workers' --tcp-nagle); raw TCP keeps NODELAY")
    p.add_argument("--socket-buffer-bytes", type=int, default=0,
                   help="fixed SO_SNDBUF/SO_RCVBUF for PS and raw TCP alike (default: 0 = autotuning)")
    p.add_argument("--lr", type=float, default=1e-3, help="phubd's SGD learning rate (default: 1e-3)")
    p.add_argument("--out", default="results/exchange", help="output dir (default: results/exchange)")
    p.add_argument("--ring", action="store_true",
                   help="also run our ring allreduce (phub_ring_worker) on the same sizes: "
                        "adds 'ring ms' and 'ring/PS' (time ratio, > 1: the PS is faster)")
    p.add_argument("--gloo", action="store_true",
                   help="also run Gloo's allreduce (phub_gloo_worker): AllreduceRingChunked and "
                        "gloo::allreduce, columns 'gloo-ring-chunked' and 'gloo-allreduce'")
    p.add_argument("--mpi", action="store_true",
                   help="also run Open MPI's MPI_Allreduce (phub_mpi_worker under mpirun, TCP "
                        "loopback): MPI's own choice and the forced ring, columns 'mpi', 'mpi-ring'")
    p.add_argument("--quick", action="store_true", help="defaults of sizes 4,32 and 5 iterations")
    p.add_argument("--sweep-chunk", nargs="?", const=DEFAULT_SWEEP, default=None, metavar="BYTES,...",
                   help=f"also run the chunk-size sweep (N={SWEEP_WORKERS}, S={SWEEP_MIB} MiB); "
                        f"without a value: {DEFAULT_SWEEP}")
    p.add_argument("--skip-main", action="store_true", help="run only the chunk sweep")
    args = p.parse_args()
    if args.sizes is None:
        args.sizes = "4,32" if args.quick else "4,32,100"
    if args.iters is None:
        args.iters = 5 if args.quick else 10
    sizes = parse_list(args.sizes, float)
    workers = parse_list(args.workers, int)
    sweep = parse_list(args.sweep_chunk, int) if args.sweep_chunk else []
    if args.iters < 1 or args.warmup < 0 or args.reps < 1 or args.cores < 1:
        p.error("--iters, --reps and --cores must be >= 1, --warmup >= 0")
    if args.skip_main and not sweep:
        p.error("--skip-main needs --sweep-chunk")

    bins = {"phubd": os.path.join(args.build, "phub", "server", "phubd"),
            "worker": os.path.join(args.build, "bench", "exchange", "phub_exchange_worker"),
            "blaster": os.path.join(args.build, "bench", "exchange", "phub_tcp_blaster")}
    baselines = [base for base in BASELINES if getattr(args, base.flag)]
    for base in baselines:
        bins[base.binary] = os.path.join(args.build, "bench", "exchange", base.binary)
    missing = [b for b in bins.values() if not os.access(b, os.X_OK)]
    if missing:
        targets = " ".join(os.path.basename(b) for b in bins.values())
        p.error(f"not built: {', '.join(missing)}; run `ninja -C {args.build} {targets}` "
                f"(phub_gloo_worker and phub_mpi_worker need libgloo-dev and libopenmpi-dev: "
                f"deploy/install-deps.sh, then re-run cmake)")
    if args.mpi and shutil.which(MPIRUN[0]) is None:
        p.error("--mpi: mpirun not on PATH (apt-get install openmpi-bin)")

    os.makedirs(args.out, exist_ok=True)
    raw_dir = os.path.join(args.out, "raw")
    shutil.rmtree(raw_dir, ignore_errors=True)
    os.makedirs(raw_dir)

    def on_term(signum, frame):
        log(f"run_exchange: signal {signum}, stopping")
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored

    cpus = os.cpu_count() or 1
    start_load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    main_rows, sweep_rows = [], []
    try:
        if not args.skip_main:
            for n in workers:
                if n + args.cores > cpus:
                    log(f"note: N={n} workers + {args.cores} server threads on {cpus} CPUs: "
                        f"oversubscribed, both PS and raw TCP share the CPUs")
                for mib in sizes:
                    log(f"[N={n} S={mib:g} MiB]")
                    ps_reps, raw_reps, baseline_reps = measure(args, bins, baselines, n, mib,
                                                               raw_dir, args.chunk_bytes)
                    row = row_for(n, mib, ps_reps, raw_reps, baseline_reps=baseline_reps)
                    main_rows.append(row)
                    log(f"  => PS {row['ps_ms']:.1f} ms, {row['ps_rate']:.3f} GB/s; raw TCP "
                        f"{row['raw_rate']:.3f} GB/s; PS/raw {row['ratio']:.0%}")
        if sweep:
            log(f"[chunk sweep N={SWEEP_WORKERS} S={SWEEP_MIB} MiB]")
            raw_all = []
            for rep in range(args.reps):
                raw_all.append(run_blaster(args, bins, SWEEP_WORKERS, SWEEP_MIB, raw_dir,
                                           f"raw-sweep-r{rep}"))
                log(f"  raw TCP rep {rep + 1}/{args.reps}: {fmt_ms(raw_all[-1])}")
                # Rotate the order each repetition so load drift does not favour one size.
                for chunk in sweep[rep % len(sweep):] + sweep[:rep % len(sweep)]:
                    t, _ = run_ps(args, bins, SWEEP_WORKERS, SWEEP_MIB, raw_dir,
                                  f"ps-sweep-c{chunk}-r{rep}", chunk)
                    log(f"  PS chunk={chunk} rep {rep + 1}/{args.reps}: {fmt_ms(t)}")
                    sweep_rows.append((chunk, t))
            by_chunk = {}
            for chunk, t in sweep_rows:
                by_chunk.setdefault(chunk, []).append(t)
            sweep_rows = [row_for(SWEEP_WORKERS, SWEEP_MIB, by_chunk[c], raw_all, chunk_bytes=c)
                          for c in sweep]
    except BenchError as e:
        log(f"run_exchange: FAILED: {e}")
        return 1
    except KeyboardInterrupt:
        log("run_exchange: interrupted")
        return 130
    finally:
        kill_children()

    notes = machine_notes(args, start_load)
    md = ["# exchange: push+pull through phubd vs raw TCP loopback", "", notes, "",
          "Time = median over iterations of the max over workers of (first push -> last weight "
          "landed), barrier-aligned. algbw = S / t; byte rate = 2·N·S / t (bytes phubd receives "
          "plus sends); raw TCP moves the same bytes over the same streams "
          "(phub_tcp_blaster). PS/raw = raw time / PS time (medians of all iterations); "
          "paired = median over repetitions of that ratio for the back-to-back runs of one "
          "repetition (less sensitive to load that drifts). GB/s = 1e9 B/s, MiB = 2^20 B.", ""]
    if any(n + args.cores > cpus for n in workers) and main_rows:
        md += [f"N + {args.cores} server threads > {cpus} CPUs oversubscribes the machine; "
               "both columns share the CPUs the same way.", ""]
    if baselines and main_rows:
        md += ["Allreduce baselines, run in the same repetitions after raw TCP and the PS: "
               + ", ".join(f"{b.name} ({b.binary}{' ' + ' '.join(b.extra) if b.extra else ''})"
                           for b in baselines)
               + ". Each: a 1-float allreduce (MPI: MPI_Barrier) aligns the ranks, then the "
               "S-byte sum is timed (Gloo and MPI scale to the mean after the timed span; our "
               "ring's time includes it); time = median of the max over ranks. X/PS time > 1: "
               "the PS is faster. MPI runs under `" + " ".join(MPIRUN) + "`.", ""]
    if main_rows:
        columns = MAIN_COLUMNS + baseline_columns(baselines)
        md += [markdown_table(main_rows, columns), ""]
        write_tsv(os.path.join(args.out, "exchange.tsv"), main_rows, columns)
    if sweep_rows:
        md += [f"## Chunk size sweep (N={SWEEP_WORKERS}, S={SWEEP_MIB} MiB)", "",
               markdown_table(sweep_rows, SWEEP_COLUMNS), ""]
        write_tsv(os.path.join(args.out, "exchange_chunk_sweep.tsv"), sweep_rows, SWEEP_COLUMNS)
    if plot(os.path.join(args.out, "exchange.png"), main_rows, sweep_rows):
        md += ["![PS vs raw TCP](exchange.png)", ""]
    with open(os.path.join(args.out, "exchange.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md[2:]))
    log(f"wrote {args.out}/exchange.md, .tsv, .png; logs and raw timings in {raw_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
