#!/usr/bin/env python3
"""run_tenants.py: a shared PBox — k jobs at once through one phubd, isolated and fairly served.

On an emulated rack (deploy/netns/rack.sh) with N worker hosts and one phubd on the PS host,
k = 1, 2, 4 concurrent jobs of the exchange benchmark (phub_exchange_worker: every worker pushes
an S-byte tensor per iteration and waits for the new weights), the N workers split evenly among
them (job j on hosts w[j*N/k] .. w[(j+1)*N/k - 1]), equal weights, then two jobs weighted 2:1;
and real training: two phub-worker jobs of different models, alone and together.

  pbox   the PS host has N.B: each job is bound by its own workers' links, so k jobs of N/k
         workers move what one job of N does: the aggregate-throughput bar (>= 0.9x one job).
  cloud  the PS host has one link of B: the PBox is the bottleneck, and what each job gets is
         what phubd's weighted fair queueing gives it (Jain's index, the 2:1 shares).

For each run: each job's rate (iterations per second within the window in which every job ran,
bench/tenants/shares.py), its time per iteration (the same window), its throughput (rate x
workers x S: gradient bytes phubd took in per second), the aggregate, Jain's index over the
jobs' throughputs (over throughput/weight where weights differ), and each job's slowdown
against the same job alone on the same rack, measured in the same run. Medians of --reps runs.

Bars (issue 21): k equal jobs sharing the N workers: aggregate >= 0.9x one job alone (pbox);
Jain's index >= 0.95 for k = 2 and 4 (both racks); weights 2:1 give shares within 10 % of 2:1
(cloud: a saturated PBox). Each is printed met or not.

Writes OUT/tenants.tsv (one row per rack x scenario x job x repetition), OUT/tenants.md, and
OUT/tenants.png (each job's share of the aggregate, per scenario); every process's log and
timings under OUT/raw/. Needs root (ip netns, tc).

  sudo bench/tenants/run_tenants.py                  # both racks, N = 4, S = 32 MiB, 3 reps
  sudo bench/tenants/run_tenants.py --racks cloud --reps 1 --no-training
"""

import json
import os
import statistics
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "topo"))
sys.path.insert(0, os.path.join(HERE, "..", "exchange"))

import nets  # noqa: E402
import shares  # noqa: E402
from benchlib import BenchError, machine, plots, tables  # noqa: E402
from benchlib.cli import parse_list, parser  # noqa: E402
from benchlib.log import log  # noqa: E402
from benchlib.outdir import fresh_dir  # noqa: E402
from benchlib.procs import kill_children, start, wait_all, wait_port_file  # noqa: E402
from timing import read_samples  # noqa: E402

MIB = 1 << 20
BARS = {"aggregate": 0.9, "jain": 0.95, "weight_tolerance": 0.10}


def scenarios(n):
    """(name, k, weights) of the exchange runs on each rack."""
    out = [("alone", 1, [1.0])]
    for k in (2, 4):
        if n % k == 0:
            out.append((f"k{k}", k, [1.0] * k))
    if n % 2 == 0:
        out.append(("k2-weighted", 2, [2.0, 1.0]))
    return out


class Phubd:
    """One phubd on the PS host for a whole rack's runs: jobs come and go through it."""

    def __init__(self, a, net, run_dir, weights, tag="phubd", nic_gbps=0.0, data_port_base=0):
        port_file = os.path.join(run_dir, f"{tag}.port")
        self.log = os.path.join(run_dir, f"{tag}.log")
        argv = [a.phubd, "--listen", net.ip("ps"), "--port", "0", "--port-file", port_file,
                "--cores", str(a.cores), "--no-pin", "--optimizer", "sgd", "--lr", str(a.lr),
                "--log-level", "info"] + net.phubd_access()
        for name, w in weights.items():
            argv += ["--job-weight", f"{name}={w:g}"]
        if nic_gbps > 0:
            argv += ["--nic-gbps", f"{nic_gbps:g}"]
        if data_port_base:
            argv += ["--data-port-base", str(data_port_base), "--max-jobs", str(MAX_JOBS)]
        self.proc = start(net.wrap("ps", argv), self.log)
        self.address = f"{net.ip('ps')}:{wait_port_file(port_file, self.proc, 'phubd', self.log)}"

    def check(self):
        if self.proc.poll() is not None:
            raise BenchError(f"phubd exited with {self.proc.returncode}; its log: {self.log}")


def run_exchange_jobs(a, net, phubd, jobs, run_dir, mib=None):
    """jobs: [(name, hosts, iterations)]. Starts them together; returns {name: [(t0, t1)]}
    (seconds, timed iterations only). `mib`: each worker's MiB per iteration (default --mib)."""
    fresh_dir(run_dir)
    procs, outs = [], {}
    mib = a.mib if mib is None else mib
    for name, hosts, iters in jobs:
        outs[name] = []
        for r, host in enumerate(hosts):
            out = os.path.join(run_dir, f"{name}_w{r}.tsv")
            path = os.path.join(run_dir, f"{name}_w{r}.log")
            argv = [a.exchange_worker, "--servers", phubd.address, "--job", name,
                    "--rank", str(r), "--world", str(len(hosts)), "--mib", f"{mib:g}",
                    "--iters", str(iters), "--warmup", str(a.warmup), "--lr", str(a.lr),
                    "--out", out, "--streams", str(a.streams)] + (["--wire", a.wire, "--wire-weights", "fp32"] if a.wire != "fp32" else [])
            procs.append((f"job {name} rank {r}", start(net.wrap(host, argv), path), path))
            outs[name].append(out)
    try:
        wait_all(procs, 120 + 4 * mib * max(i for _, _, i in jobs))
    finally:
        for name, proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
    phubd.check()
    spans = {}
    for name, files in outs.items():
        runs = [read_samples(f) for f in files]
        checksums = {c for _, c in runs}
        if None in checksums or len(checksums) != 1:
            raise BenchError(f"job {name}: the workers' weights differ: {checksums} ({run_dir})")
        count = min(len(s) for s, _ in runs)
        spans[name] = [(min(s[i][0] for s, _ in runs) * 1e-9, max(s[i][1] for s, _ in runs) * 1e-9)
                       for i in range(count)]
    return spans


def exchange_rack(a, rack, rep_dirs):
    """Every exchange scenario on one rack, --reps times; rows for the table."""
    n = a.n
    rows = []
    net = nets.make(rack, n, a.rate)
    try:
        all_scenarios = [sc for sc in scenarios(n)
                         if not a.scenarios or sc[0] in a.scenarios or sc[0] == "alone"]
        weights = {}
        for name, k, ws in all_scenarios:
            for j, w in enumerate(ws):
                if w != 1.0:
                    weights[f"{name}-j{j}"] = w
        # What the PS host's NIC carries (pbox N.B, cloud B), a little under line rate: what
        # TCP achieves on it (phubd --nic-gbps).
        link = nets.topology.parse_rate(a.rate) * (n if rack == "pbox" else 1)
        phubd = Phubd(a, net, rep_dirs, weights, nic_gbps=a.nic_share * link / 1e9)
        workers = [f"w{r}" for r in range(n)]
        for rep in range(a.reps):
            alone_ms = {}  # job size -> ms per iteration alone, this repetition
            for size in sorted({n // k for _, k, _ in all_scenarios}):
                spans = run_exchange_jobs(a, net, phubd, [(f"ref{size}-r{rep}", workers[:size],
                                                          a.iters)],
                                          os.path.join(rep_dirs, f"{rack}_ref{size}_r{rep}"))
                times = [e - s for s, e in next(iter(spans.values()))]
                alone_ms[size] = 1e3 * statistics.median(times)
                log(f"{rack} rep {rep + 1}: a job of {size} workers alone: "
                    f"{alone_ms[size]:.1f} ms per iteration")
            one_job_total = None  # the "alone" scenario's aggregate, this repetition
            for name, k, ws in all_scenarios:
                size = n // k
                # A job of weight w runs w/min(w) as many iterations, so all compete to the end.
                jobs = [(f"{name}-j{j}", workers[j * size:(j + 1) * size],
                         int(round(a.iters * ws[j] / min(ws)))) for j in range(k)]
                spans = run_exchange_jobs(a, net, phubd, jobs,
                                          os.path.join(rep_dirs, f"{rack}_{name}_r{rep}"))
                per_job = shares.rates(spans)
                w = {f"{name}-j{j}": ws[j] for j in range(k)}
                throughput = {job: per_job[job] * size * a.mib * MIB for job in per_job}
                total = sum(throughput.values())
                fairness = shares.jain(shares.normalized(throughput, w).values())
                if name == "alone":
                    one_job_total = total
                for j, (job, hosts, _) in enumerate(jobs):
                    ms = 1e3 / per_job[job]
                    rows.append({"rack": rack, "scenario": name, "k": k, "job": f"j{j}",
                                 "workers": size, "weight": ws[j], "rep": rep + 1,
                                 "ms_per_iter": ms, "alone_ms": alone_ms[size],
                                 "slowdown": ms / alone_ms[size],
                                 "throughput_MBps": throughput[job] / 1e6,
                                 "share": throughput[job] / total,
                                 "aggregate_MBps": total / 1e6,
                                 # One job of all N workers, in the same repetition
                                 # (the k = 1 scenario, run first).
                                 "alone_aggregate_MBps": (one_job_total or total) / 1e6,
                                 "jain": fairness})
                log(f"{rack} rep {rep + 1} {name}: " + ", ".join(
                    f"{job} {1e3 / per_job[job]:.0f} ms ({throughput[job] / total:.0%})"
                    for job in per_job) + f"; aggregate {total / 1e6:.0f} MB/s, Jain {fairness:.3f}")
    finally:
        kill_children()
        net.close()
    return rows


MAX_JOBS = 8  # phubd's --max-jobs where the bench fixes the data ports (stalled A jobs linger)

FLOOD = """
import os, signal, socket, sys, time
host, ports, seconds = sys.argv[1], [int(p) for p in sys.argv[2].split(",")], float(sys.argv[3])
end, sent = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for port in ports:
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                s.sendall(os.urandom(4096))
                sent += 1
        except OSError:
            pass
print(f"flood: {sent} connections of garbage", flush=True)
"""


def slowdown_table(rows, beside, beside_key, slowdown_key, digits):
    """Markdown rows: B alone, B beside (column `beside`), B's slowdown, per repetition."""
    return tables.md_table(["rep", "B alone ms/iter", beside, "slowdown"],
                           [[str(r["rep"]), f"{r['b_alone_ms']:.1f}", f"{r[beside_key]:.1f}",
                             f"{r[slowdown_key]:.{digits}f}"] for r in rows])


def misbehave_rack(a, run_dir):
    """Job B (workers w0, w1) trains while job A (w2, w3) misbehaves through the same phubd: a
    host of A floods every phubd port with garbage connections, and one of A's workers is
    killed mid-iteration (A stalls, waits for a rejoin that never comes). B's time per
    iteration against B alone, same rack, same phubd; B's weights checked as always."""
    n = a.n
    net = nets.make("pbox", n, a.rate)
    rows = []
    try:
        # A job's data ports exist only while it runs (one per job and core): the flood covers
        # every port phubd may give a job, base .. base + cores x --max-jobs - 1.
        base = 9100
        phubd = Phubd(a, net, run_dir, {}, "phubd-misbehave",
                      nic_gbps=a.nic_share * nets.topology.parse_rate(a.rate) * n / 1e9,
                      data_port_base=base)
        data_ports = ",".join(str(p) for p in range(base, base + a.cores * MAX_JOBS))
        control_port = phubd.address.rsplit(":", 1)[1]
        for rep in range(a.reps):
            alone = run_exchange_jobs(a, net, phubd, [(f"b-alone{rep}", ["w0", "w1"], a.iters)],
                                      os.path.join(run_dir, f"alone_r{rep}"))
            alone_ms = 1e3 * statistics.median(e - s for s, e in next(iter(alone.values())))
            # A first (2 workers, far more iterations than B needs), then B, then the trouble.
            rep_dir = os.path.join(run_dir, f"shared_r{rep}")
            fresh_dir(rep_dir)
            a_procs = []
            for r, host in enumerate(["w2", "w3"]):
                argv = [a.exchange_worker, "--servers", phubd.address, "--job", f"a{rep}",
                        "--rank", str(r), "--world", "2", "--mib", f"{a.mib:g}", "--iters",
                        "100000", "--warmup", "0", "--lr", str(a.lr), "--streams",
                        str(a.streams), "--out", os.path.join(rep_dir, f"a_w{r}.tsv")]
                a_procs.append(start(net.wrap(host, argv), os.path.join(rep_dir, f"a_w{r}.log")))
            flood = start(net.wrap("w3", [sys.executable, "-c", FLOOD, net.ip("ps"),
                                          f"{data_ports},{control_port}", "30"]),
                          os.path.join(rep_dir, "flood.log"))
            killer = threading.Timer(2.0, a_procs[1].kill)  # A's rank 1 dies mid-iteration
            killer.start()
            try:
                shared = run_exchange_jobs(a, net, phubd,
                                           [(f"b-shared{rep}", ["w0", "w1"], a.iters * 2)],
                                           os.path.join(rep_dir, "b"))
            finally:
                killer.cancel()
                for p in a_procs + [flood]:
                    if p.poll() is None:
                        p.kill()
            ms = 1e3 * statistics.median(e - s for s, e in next(iter(shared.values())))
            rows.append({"rep": rep + 1, "b_alone_ms": alone_ms, "b_beside_ms": ms,
                         "slowdown": ms / alone_ms})
            log(f"misbehave rep {rep + 1}: B {alone_ms:.1f} ms alone, {ms:.1f} ms while A "
                f"floods and dies ({ms / alone_ms:.2f}x)")
    finally:
        kill_children()
        net.close()
    return rows


def start_flooder(a, net, phubd, name, hosts, mib, run_dir):
    """A job whose workers push `mib` MiB per iteration as fast as phubd answers, with no
    compute, for far more iterations than anyone waits: the caller kills them."""
    procs = []
    for r, host in enumerate(hosts):
        argv = [a.exchange_worker, "--servers", phubd.address, "--job", name, "--rank", str(r),
                "--world", str(len(hosts)), "--mib", f"{mib:g}", "--iters", "1000000",
                "--warmup", "0", "--lr", str(a.lr), "--streams", str(a.streams), "--out",
                os.path.join(run_dir, f"{name}_w{r}.tsv")]
        procs.append(start(net.wrap(host, argv), os.path.join(run_dir, f"{name}_w{r}.log")))
    return procs


class PinnedNet:
    """A PBox's cores are its own: phubd (the "ps" host) runs on CPU 0 and every worker on the
    other CPUs (taskset), so what B waits for is phubd's order of work, not the kernel's
    scheduling of phubd's threads among the workers' (on a 2-CPU machine the two differ)."""

    def __init__(self, net):
        self.net = net
        self.name = net.name
        cpus = os.sched_getaffinity(0)
        self.ps_cpu = str(min(cpus))
        self.worker_cpus = ",".join(str(c) for c in sorted(cpus) if c != min(cpus)) or self.ps_cpu

    def __getattr__(self, attr):
        return getattr(self.net, attr)

    def wrap(self, host, argv):
        cpus = self.ps_cpu if host == "ps" else self.worker_cpus
        return self.net.wrap(host, ["taskset", "-c", cpus] + list(argv))


def flood_rack(a, run_dir):
    """Issue 38's fairness bar. Job B (w0, w1, --flood-b-mib per worker) alone; then beside job
    A (w2, w3, --flood-a-mib, no compute, as fast as phubd answers) on the same phubd; then with
    A on a phubd of its own on the same PS host. B's slowdown beside A on one phubd against its
    slowdown with A apart: what sharing phubd costs B beyond sharing the machine. Bar: <= 1.25."""
    n = a.n
    net = nets.make(a.flood_net, n, a.rate)
    if a.flood_pin:
        net = PinnedNet(net)
    rows = []
    nic_gbps = a.nic_share * nets.topology.parse_rate(a.rate) * n / 1e9 if a.flood_paced else 0
    try:
        shared = Phubd(a, net, run_dir, {}, "phubd-flood", nic_gbps=nic_gbps)
        apart = Phubd(a, net, run_dir, {}, "phubd-flood-a", nic_gbps=nic_gbps)
        for rep in range(a.reps):
            def b_ms(tag, a_phubd, stop_a=False):
                rep_dir = os.path.join(run_dir, f"{tag}_r{rep}")
                fresh_dir(rep_dir)
                flooders = []
                if a_phubd is not None:
                    flooders = start_flooder(a, net, a_phubd, f"a-{tag}{rep}", ["w2", "w3"],
                                             a.flood_a_mib, rep_dir)
                    time.sleep(1.0)  # A is flooding before B starts
                if stop_a:
                    # A's workers stop reading (SIGSTOP): its weights stay in flight for good.
                    for p in flooders:
                        p.send_signal(signal.SIGSTOP)
                    time.sleep(0.5)
                try:
                    spans = run_exchange_jobs(a, net, shared,
                                              [(f"b-{tag}{rep}", ["w0", "w1"], a.iters)],
                                              os.path.join(rep_dir, "b"), mib=a.flood_b_mib)
                finally:
                    for p in flooders:
                        if p.poll() is None:
                            p.kill()
                            p.send_signal(signal.SIGCONT)
                    for p in flooders:
                        p.wait()
                return 1e3 * statistics.median(e - s for s, e in next(iter(spans.values())))
            alone = b_ms("alone", None)
            beside = b_ms("beside", shared)
            away = b_ms("apart", apart)
            row = {"rep": rep + 1, "b_alone_ms": alone, "b_beside_ms": beside,
                   "b_apart_ms": away, "slowdown_beside": beside / alone,
                   "slowdown_apart": away / alone, "ratio": beside / away}
            if a.flood_paced:
                # Paced: a tenant that reads nothing must not count as active (issue 38).
                stopped = b_ms("stopped", shared, stop_a=True)
                row.update({"b_stopped_ms": stopped, "slowdown_stopped": stopped / alone})
            rows.append(row)
            log(f"flood rep {rep + 1}: B {alone:.1f} ms alone, {beside:.1f} ms beside A on its "
                f"phubd ({beside / alone:.2f}x), {away:.1f} ms with A on its own phubd "
                f"({away / alone:.2f}x): ratio {beside / away:.2f} (bar <= 1.25)" +
                (f"; beside A stopped (reading nothing) {row['b_stopped_ms']:.1f} ms "
                 f"({row['slowdown_stopped']:.2f}x)" if a.flood_paced else ""))
    finally:
        kill_children()
        net.close()
    return rows


def training_rack(a, run_dir):
    """Two phub-worker jobs of different models (N/2 workers each) on the pbox rack: each alone,
    both at once through one shared phubd, and both at once through a phubd each (on the same PS
    host): the last isolates what sharing phubd costs from what sharing this machine's CPUs
    costs (the workers' compute contends for them whichever phubd serves them)."""
    n = a.n
    models = [m.split(":") for m in parse_list(a.models, str)]
    net = nets.make("pbox", n, a.rate)
    rows = []
    try:
        shared = Phubd(a, net, run_dir, {}, "phubd-shared")
        own = [shared, Phubd(a, net, run_dir, {}, "phubd-second")]
        half = n // 2
        hosts = [[f"w{r}" for r in range(j * half, (j + 1) * half)] for j in range(2)]

        def run(jobs, tag, phubds):
            procs, outs = [], {}
            for j, (model, batch) in jobs:
                for r, host in enumerate(hosts[j]):
                    out = os.path.join(run_dir, f"{tag}_{model}_w{r}.json")
                    path = os.path.join(run_dir, f"{tag}_{model}_w{r}.log")
                    argv = [a.worker, "--model", model, "--batch", batch, "--iters",
                            str(a.train_iters), "--warmup", "2", "--lr", "0.01", "--log-level",
                            "warn", "--comm", "ps", "--ps", phubds[j].address, "--job",
                            f"{tag}-{model}", "--rank", str(r), "--world", str(half),
                            "--results", out]
                    procs.append((f"{model} rank {r}", start(net.wrap(host, argv), path,
                                                             {"OMP_NUM_THREADS": "1"}), path))
                    outs.setdefault(model, []).append(out)
            try:
                wait_all(procs, a.timeout)
            finally:
                kill_children_of(procs)
            for p in phubds:
                p.check()
            return {m: max(json.load(open(f))["median_ms"] for f in files)
                    for m, files in outs.items()}

        for rep in range(a.reps):
            alone = {}
            for j, (model, batch) in enumerate(models):
                alone.update(run([(j, (model, batch))], f"alone{rep}", own))
            together = run(list(enumerate(models)), f"shared{rep}", [shared, shared])
            apart = run(list(enumerate(models)), f"apart{rep}", own)
            for model, _ in models:
                rows.append({"model": model, "rep": rep + 1, "alone_ms": alone[model],
                             "shared_ms": together[model], "apart_ms": apart[model],
                             "slowdown": together[model] / alone[model],
                             "sharing_cost": together[model] / apart[model]})
                log(f"training rep {rep + 1}: {model} {alone[model]:.0f} ms alone, "
                    f"{together[model]:.0f} ms beside the other through one phubd, "
                    f"{apart[model]:.0f} ms through a phubd each")
    finally:
        kill_children()
        net.close()
    return rows


def kill_children_of(procs):
    for _, proc, _ in procs:
        if proc.poll() is None:
            proc.kill()


def medians(rows, keys, fields):
    """Median of each field over repetitions, per distinct `keys`."""
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, group in groups.items():
        row = dict(zip(keys, key))
        for f in fields:
            row[f] = statistics.median(g[f] for g in group)
        row["reps"] = len(group)
        out.append(row)
    return out


def bar_lines(summary):
    lines = []
    by = {(r["rack"], r["scenario"], r["job"]): r for r in summary}
    for rack in ("pbox", "cloud"):
        alone = by.get((rack, "alone", "j0"))
        for k in (2, 4):
            first = by.get((rack, f"k{k}", "j0"))
            if not first or not alone:
                continue
            ratio = first["aggregate_MBps"] / alone["aggregate_MBps"]
            if rack == "pbox":
                ok = ratio >= BARS["aggregate"]
                lines.append(f"- {rack}, k = {k}: aggregate {ratio:.2f}x one job alone "
                             f"(bar >= {BARS['aggregate']}): **{'met' if ok else 'NOT met'}**")
            ok = first["jain"] >= BARS["jain"]
            lines.append(f"- {rack}, k = {k}: Jain's index {first['jain']:.3f} "
                         f"(bar >= {BARS['jain']}): **{'met' if ok else 'NOT met'}**")
        w = [by.get((rack, "k2-weighted", j)) for j in ("j0", "j1")]
        if all(w):
            ratio = w[0]["throughput_MBps"] / w[1]["throughput_MBps"]
            if rack == "pbox":
                # Each job is bound by its own workers' links: there is nothing to share out.
                lines.append(f"- {rack}, weights 2:1: shares {ratio:.2f}:1 (no bar: the PBox is "
                             f"not the bottleneck here, each job has its own links)")
                continue
            ok = abs(ratio / 2 - 1) <= BARS["weight_tolerance"]
            lines.append(f"- {rack}, weights 2:1: shares {ratio:.2f}:1 (bar: within "
                         f"{BARS['weight_tolerance']:.0%} of 2:1): **{'met' if ok else 'NOT met'}**")
    return lines


def markdown(a, summary, training, notes):
    lines = ["# A shared PBox: k jobs through one phubd", "",
             f"N = {a.n} worker hosts, links B = {a.rate}, S = {a.mib:g} MiB per worker per "
             f"iteration, phubd --cores {a.cores}; medians of {a.reps} repetition(s). "
             f"Time per iteration and throughput within the window all jobs ran in; slowdown "
             f"against the same job alone on the same rack, same run.", ""]
    lines += notes + [""]
    head = ["rack", "scenario", "job", "workers", "weight", "ms/iter", "alone ms", "slowdown",
            "MB/s", "share", "aggregate MB/s", "x one job", "Jain"]
    body = []
    for r in summary:
        body.append([r["rack"], r["scenario"], r["job"], str(r["workers"]), f"{r['weight']:g}",
                     f"{r['ms_per_iter']:.1f}", f"{r['alone_ms']:.1f}", f"{r['slowdown']:.2f}",
                     f"{r['throughput_MBps']:.0f}", f"{r['share']:.3f}",
                     f"{r['aggregate_MBps']:.0f}",
                     f"{r['aggregate_MBps'] / r['alone_aggregate_MBps']:.2f}",
                     f"{r['jain']:.3f}"])
    if summary:
        lines += tables.md_table(head, body) + ["", "## Bars", ""] + bar_lines(summary)
    if training:
        lines += ["", "## Real training: two jobs of different models", ""]
        lines += ["Each job alone; both at once through one shared phubd; both at once through "
                  "a phubd each on the same PS host (what the machine's CPUs, shared by both "
                  "jobs' workers either way, cost). ms per mini-batch, median of the workers' "
                  "medians.", ""]
        lines += tables.md_table(
            ["model", "alone", "both, one phubd", "both, a phubd each", "slowdown vs alone",
             "one phubd vs a phubd each"],
            [[r["model"], f"{r['alone_ms']:.0f}", f"{r['shared_ms']:.0f}", f"{r['apart_ms']:.0f}",
              f"{r['slowdown']:.2f}", f"{r['sharing_cost']:.2f}"] for r in training])
    return lines


def plot(path, summary):
    plt = plots.import_pyplot()
    if plt is None:
        log("matplotlib is missing: no plot")
        return
    racks = [r for r in ("pbox", "cloud") if any(s["rack"] == r for s in summary)]
    fig, axes = plt.subplots(1, len(racks), figsize=(6 * len(racks), 4), squeeze=False)
    for ax, rack in zip(axes[0], racks):
        rows = [r for r in summary if r["rack"] == rack]
        names = list(dict.fromkeys(r["scenario"] for r in rows))
        for x, name in enumerate(names):
            bottom = 0.0
            for r in [r for r in rows if r["scenario"] == name]:
                ax.bar(x, r["aggregate_MBps"] * r["share"], bottom=bottom, edgecolor="black",
                       label=None)
                ax.text(x, bottom + r["aggregate_MBps"] * r["share"] / 2,
                        f"{r['job']} w{r['weight']:g}\n{r['share']:.0%}", ha="center",
                        va="center", fontsize=7)
                bottom += r["aggregate_MBps"] * r["share"]
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel("gradient MB/s into phubd (stacked by job)")
        ax.set_title(f"{rack} rack")
    plots.save(plt, fig, path, 120)


def main():
    p = parser(__doc__)
    p.add_argument("--racks", default="pbox,cloud", help="comma list of pbox, cloud")
    p.add_argument("--n", type=int, default=4, help="worker hosts (default: 4)")
    p.add_argument("--rate", default="1gbit", help="link rate B (default: 1gbit)")
    p.add_argument("--mib", type=float, default=32, help="S, MiB per worker per iteration")
    p.add_argument("--iters", type=int, default=12, help="timed iterations of a job of weight 1")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cores", type=int, default=2, help="phubd --cores")
    p.add_argument("--nic-share", type=float, default=0.9,
                   help="phubd --nic-gbps as a share of the PS host's link (pbox N.B, cloud B); "
                        "0: phubd does not pace (default: 0.9)")
    p.add_argument("--streams", type=int, default=16,
                   help="phub_exchange_worker --streams: S in this many tensors, each pushed "
                        "again as soon as its weights are in (default 16: a job that keeps "
                        "bytes on the way both ways, as layer-wise overlap does; 1: push all, "
                        "then wait)")
    p.add_argument("--wire", default="fp32",
                   help="the exchange jobs' pushes: fp32, or bf16/fp16 (weights stay float32: "
                        "phubd's send side then carries twice its receive side)")
    p.add_argument("--scenarios", default="",
                   help="comma list of k2, k4, k2-weighted (default: all; 'alone' always runs)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--models", default="resnet56:16,alexnet:2",
                   help="the two training jobs' MODEL:BATCH (per worker)")
    p.add_argument("--train-iters", type=int, default=6)
    p.add_argument("--no-training", action="store_true", help="exchange runs only")
    p.add_argument("--misbehave", action="store_true",
                   help="also: job B's time while job A floods phubd and loses a worker")
    p.add_argument("--flood", action="store_true",
                   help="also (or only, with --racks none --no-training): job B's slowdown "
                        "beside a job A that pushes as fast as it can, on one phubd and apart")
    p.add_argument("--flood-net", default="loopback",
                   help="loopback (issue 38's measurement: A as fast as the CPUs allow) or pbox")
    p.add_argument("--flood-pin", action="store_true",
                   help="phubd on CPU 0, the workers on the others, as on a PBox")
    p.add_argument("--flood-a-mib", type=float, default=8)
    p.add_argument("--flood-b-mib", type=float, default=1)
    p.add_argument("--flood-paced", action="store_true",
                   help="the flood runs with --nic-gbps (--nic-share of the PS host's links)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per training run")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "tenants"))
    a = p.parse_args()
    a.scenarios = parse_list(a.scenarios, str)
    problem = nets.rack_problem(otherwise=None)
    if problem:
        p.error(problem)
    if a.n % 2:
        p.error("--n must be even (jobs split the workers)")
    a.phubd = os.path.join(a.build, "phub", "server", "phubd")
    a.exchange_worker = os.path.join(a.build, "bench", "exchange", "phub_exchange_worker")
    a.worker = os.path.join(a.build, "worker", "phub-worker")
    for path in (a.phubd, a.exchange_worker, a.worker):
        if not os.path.exists(path):
            p.error(f"{path} is missing: build first (deploy/build.sh)")
    if nets.racks_up():
        p.error(f"a rack is up already ({', '.join(nets.racks_up())}): one at a time")
    raw = os.path.join(a.out, "raw")
    fresh_dir(a.out)
    os.makedirs(raw)
    start_load = machine.load_average()
    rows, training, misbehaving, flooding = [], [], [], []
    try:
        for rack in [r for r in parse_list(a.racks, str) if r != "none"]:
            rack_dir = os.path.join(raw, rack)
            os.makedirs(rack_dir)
            rows += exchange_rack(a, rack, rack_dir)
        if not a.no_training:
            train_dir = os.path.join(raw, "training")
            os.makedirs(train_dir)
            training = training_rack(a, train_dir)
        if a.misbehave:
            bad_dir = os.path.join(raw, "misbehave")
            os.makedirs(bad_dir)
            misbehaving = misbehave_rack(a, bad_dir)
        if a.flood:
            flood_dir = os.path.join(raw, "flood")
            os.makedirs(flood_dir)
            flooding = flood_rack(a, flood_dir)
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    finally:
        kill_children()
        nets.cleanup()
    keys = ["rack", "scenario", "k", "job", "workers", "weight"]
    fields = ["ms_per_iter", "alone_ms", "slowdown", "throughput_MBps", "share",
              "aggregate_MBps", "alone_aggregate_MBps", "jain"]
    summary = medians(rows, keys, fields) if rows else []
    if rows:
        tables.write_tsv(os.path.join(a.out, "tenants.tsv"), rows, list(rows[0].keys()),
                         cell=tables.short_float)
    train_summary = medians(training, ["model"], ["alone_ms", "shared_ms", "apart_ms",
                                                  "slowdown", "sharing_cost"]) if training else []
    if training:
        tables.write_tsv(os.path.join(a.out, "training.tsv"), training,
                         list(training[0].keys()), cell=tables.short_float)
    notes = [machine.describe(start_load)]
    md = markdown(a, summary, train_summary, notes)
    if misbehaving:
        md += ["", "## A misbehaving job beside another", "",
               "Job B (2 workers) alone, then while job A (2 workers) shares phubd, floods "
               "every phubd port with garbage from one of A's hosts and loses a worker "
               "mid-iteration (SIGKILL; A stalls).", ""]
        md += slowdown_table(misbehaving, "B beside A", "b_beside_ms", "slowdown", 3)
        tables.write_tsv(os.path.join(a.out, "misbehave.tsv"), misbehaving,
                         list(misbehaving[0].keys()), cell=tables.short_float)
    if flooding:
        ratios = [r["ratio"] for r in flooding]
        md += ["", "## A flooding job beside another (issue 38's fairness bar)", "",
               f"Job B (2 workers, {a.flood_b_mib:g} MiB each) alone, then beside job A (2 "
               f"workers, {a.flood_a_mib:g} MiB each, no compute, as fast as phubd answers) "
               "on the same phubd, then with A on a phubd of its own on the same PS host, "
               f"network {a.flood_net}"
               f"{' (both with --nic-gbps)' if a.flood_paced else ''}. Ratio: B's slowdown "
               "beside A over its slowdown with A apart; bar <= 1.25: "
               f"median {statistics.median(ratios):.2f}, "
               + (f"{'met' if statistics.median(ratios) <= 1.25 else 'NOT met'}." if not a.flood_paced
                  else "not the bar's run: paced, B beside A gets its weight's share of "
                  "--nic-gbps (half, here), which B with A apart is never held to."), ""]
        md += tables.md_table(["rep", "B alone ms/iter", "B beside A, one phubd",
                               "B, A apart", "slowdown beside", "slowdown apart", "ratio"],
                              [[str(r["rep"]), f"{r['b_alone_ms']:.1f}",
                                f"{r['b_beside_ms']:.1f}", f"{r['b_apart_ms']:.1f}",
                                f"{r['slowdown_beside']:.2f}", f"{r['slowdown_apart']:.2f}",
                                f"{r['ratio']:.2f}"] for r in flooding])
        if a.flood_paced:
            md += ["", "Paced: B beside A whose workers are stopped (SIGSTOP: A reads nothing, "
                   "its weights stay in flight), against B alone; a tenant that reads nothing "
                   "must not count as active, so this slowdown should be near 1.", ""]
            md += slowdown_table(flooding, "B beside A stopped", "b_stopped_ms",
                                 "slowdown_stopped", 2)
        tables.write_tsv(os.path.join(a.out, "flood.tsv"), flooding, list(flooding[0].keys()),
                         cell=tables.short_float)
    tables.write_markdown(os.path.join(a.out, "tenants.md"), md)
    if summary:
        plot(os.path.join(a.out, "tenants.png"), summary)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
