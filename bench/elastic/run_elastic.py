#!/usr/bin/python3
"""run_elastic.py: what a membership change costs an elastic job (docs/design.md "Elastic jobs").

Per topology (loopback; pbox: the emulated PBox rack, root) and repeat, two runs of phub-worker
on synthetic data (one OpenMP thread each):

  elastic   --min-workers 2 --max-workers 4: ranks 0 and 1 start; rank 2 joins at 20 % of the
            iterations, rank 3 at 35 %; rank 3 is SIGKILLed at 55 %, rank 2 gets SIGTERM (leaves
            at the next boundary) at 70 %.
  restart   today's only way to change a fixed job: at 50 % phubd is stopped (SIGTERM: it
            writes a checkpoint of that very iteration, the best case) and both workers are
            killed; phubd restarts with --resume and the workers start again, as a scheduler
            would. (A fixed job's checkpoint holds its world size: it can only restart at the
            same size; a new size means starting from scratch.)

Iterations of progress lost, in rank 0's own iteration time: for a change of the elastic job,
over the iterations from 5 before the change's first iteration E to 10 after, the sum of
(interval - steady interval) / steady interval, the steady interval being the median of the 30
iterations before the window (before E) or after it (from E on). The bar (issue 41): <= 1
iteration for a join and for a leave by SIGKILL (on loopback and the rack a SIGKILL closes the
connections at once: detection is immediate; a stopped worker would add --liveness-timeout-ms).
For the restart: (time from the stop to rank 0's first iteration after it) / steady interval.
This box has 2 cores: a worker starting (process, model, oneDNN) takes CPU from the others
while it does, which the join's window counts; medians of the repeats.

  sudo bench/elastic/run_elastic.py                     # loopback + pbox, 2 repeats (~6 min)
  bench/elastic/run_elastic.py --topologies loopback --repeats 1

Writes OUT/elastic.tsv, OUT/elastic.md and OUT/elastic_<topology>.png (rank 0's iteration time
across the run, the changes marked).
"""
import json
import os
import re
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench", "topo"))
sys.path.insert(0, os.path.join(ROOT, "bench", "exchange"))

import nets  # noqa: E402
from benchlib import BenchError, outdir, plots, tables  # noqa: E402
from benchlib.cli import parse_list, parser  # noqa: E402
from benchlib.log import log  # noqa: E402
from benchlib.procs import kill_children, start, tail, wait_all, wait_port_file  # noqa: E402

STEP = re.compile(r"^\[(\d+):(\d+):(\d+)\.(\d+)\].*step (\d+)/")
HELD = re.compile(r"from iteration (\d+) the job has .*the cores were held ([\d.]+) ms")


def find_binaries(a):
    """a.worker and a.phubd from a.build (both drivers of this folder), or SystemExit."""
    a.worker = os.path.join(a.build, "worker", "phub-worker")
    a.phubd = os.path.join(a.build, "phub", "server", "phubd")
    for b in (a.worker, a.phubd):
        if not os.access(b, os.X_OK):
            raise SystemExit(f"{b} missing: run deploy/build.sh first")


def worker_argv(a, extra):
    return [a.worker, "--model", a.model, "--batch", str(a.batch), "--iters", str(a.iters),
            "--warmup", "0", "--lr", "0.01", "--optimizer", "momentum", "--log-every", "1",
            "--comm", "ps", "--reconnect-timeout-ms", "0"] + extra


def start_phubd(a, net, run_dir, tag, extra=()):
    port_file = os.path.join(run_dir, f"{tag}_port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log_path = os.path.join(run_dir, f"{tag}_phubd.log")
    argv = [a.phubd, "--listen", net.ip("ps"), "--port", "0", "--port-file", port_file,
            "--max-world-size", "4", "--cores", str(a.ps_cores), "--one-job",
            "--liveness-timeout-ms", "3000"] + net.phubd_access() + list(extra)
    proc = start(net.wrap("ps", argv), log_path)
    port = wait_port_file(port_file, proc, "phubd", log_path)
    return proc, log_path, f"{net.ip('ps')}:{port}"


def last_step(log_path):
    """Rank 0's last step from its log ("step N/..."), 0 before the first."""
    try:
        with open(log_path, errors="replace") as f:
            steps = [int(m.group(5)) for m in map(STEP.match, f) if m]
    except OSError:
        return 0
    return steps[-1] if steps else 0


def wait_step(log_path, proc, step, timeout):
    deadline = time.monotonic() + timeout
    while last_step(log_path) < step:
        if proc.poll() is not None:
            raise BenchError(f"{log_path} ended before step {step}:\n{tail(log_path)}")
        if time.monotonic() > deadline:
            raise BenchError(f"{log_path} did not reach step {step} in {timeout} s:\n"
                             f"{tail(log_path)}")
        time.sleep(0.005)


def steady(intervals, lo, hi):
    window = [x for x in intervals[max(0, lo):max(0, hi)]]
    return statistics.median(window) if window else None


def run_elastic(a, net, run_dir, tag):
    """Returns rank 0's record (iterations, worlds, at) and the changes: [(kind, E)]."""
    _, phubd_log, ps = start_phubd(a, net, run_dir, tag)
    elastic = ["--ps", ps, "--min-workers", "2", "--max-workers", "4", "--start-workers", "2"]
    procs, logs = {}, {}

    def launch(rank):
        logs[rank] = os.path.join(run_dir, f"{tag}_w{rank}.log")
        out = os.path.join(run_dir, f"{tag}_w{rank}.json")
        procs[rank] = start(net.wrap(f"w{rank}", worker_argv(
            a, elastic + ["--rank", str(rank), "--results", out])), logs[rank],
            {"OMP_NUM_THREADS": "1"})

    launch(0)
    launch(1)
    marks = {"join": [0.20, 0.35], "kill": [0.55], "term": [0.70]}
    events = sorted([(f, kind) for kind, fs in marks.items() for f in fs])
    joined = 2
    for fraction, kind in events:
        wait_step(logs[0], procs[0], int(fraction * a.iters), a.timeout)
        if kind == "join":
            launch(joined)
            joined += 1
        elif kind == "kill":
            wait_step(logs[3], procs[3], 1, a.timeout)  # it has joined and trained
            procs[3].send_signal(signal.SIGKILL)
            procs[3].wait()
        else:
            wait_step(logs[2], procs[2], 1, a.timeout)
            procs[2].send_signal(signal.SIGTERM)
    wait_all([(f"phub-worker rank {r}", procs[r], logs[r]) for r in (0, 1, 2)], a.timeout)
    record = json.load(open(os.path.join(run_dir, f"{tag}_w0.json")))["elastic"]
    # The changes, in order, from rank 0's member counts: 2 -> 3 (join), 3 -> 4 (join),
    # 4 -> 3 (SIGKILL), 3 -> 2 (SIGTERM).
    changes = []
    worlds = record["worlds"]
    kinds = iter(["join", "join", "leave (SIGKILL)", "leave (SIGTERM)"])
    for i in range(1, len(worlds)):
        if worlds[i] != worlds[i - 1]:
            changes.append((next(kinds, "change"), record["iterations"][i]))
    # phubd's own account: how long each change held the cores, by its first iteration.
    held = {}
    with open(phubd_log, errors="replace") as f:
        for m in filter(None, map(HELD.search, f)):
            held[int(m.group(1))] = float(m.group(2))
    return record, changes, held


def lost_at(record, e):
    """Iterations lost around the change whose first iteration is e (see the docstring)."""
    its, at = record["iterations"], record["at"]
    intervals = [at[i] - at[i - 1] for i in range(1, len(at))]  # intervals[i-1]: ends at its[i]
    index = {it: i for i, it in enumerate(its)}
    ie = index[e]
    lo, hi = ie - 5, ie + 10
    before = steady(intervals, lo - 1 - 30, lo - 1)
    after = steady(intervals, hi, hi + 30)
    if before is None or after is None:
        return None, after
    lost = 0.0
    for i in range(lo, hi):
        base = before if i < ie else after
        lost += (intervals[i - 1] - base) / after
    return lost, after


def step_times(log_path):
    """(step, seconds of the day) of every step line of a worker's log."""
    out = []
    with open(log_path, errors="replace") as f:
        for m in map(STEP.match, f):
            if m:
                h, mi, s, ms = (int(m.group(i)) for i in range(1, 5))
                out.append((int(m.group(5)), h * 3600 + mi * 60 + s + ms / 1000))
    return out


def run_restart(a, net, run_dir, tag):
    """Iterations lost by a fixed job of 2 stopped and resumed from a checkpoint."""
    ckpt = os.path.join(run_dir, f"{tag}_ckpt")
    os.makedirs(ckpt, exist_ok=True)
    phubd, phubd_log, ps = start_phubd(a, net, run_dir, tag,
                                       ["--checkpoint-dir", ckpt, "--checkpoint-every", "50"])
    fixed = ["--ps", ps, "--world", "2"]
    logs = [os.path.join(run_dir, f"{tag}_w{r}.log") for r in (0, 1)]
    procs = [start(net.wrap(f"w{r}", worker_argv(a, fixed + ["--rank", str(r)])), logs[r],
                   {"OMP_NUM_THREADS": "1"}) for r in (0, 1)]
    wait_step(logs[0], procs[0], a.iters // 2, a.timeout)
    stopped_day = time.time() % 86400
    phubd.send_signal(signal.SIGTERM)  # a checkpoint of this very iteration first
    for p in procs:
        p.send_signal(signal.SIGKILL)
    phubd.wait()
    for p in procs:
        p.wait()
    before = step_times(logs[0])
    _, _, ps = start_phubd(a, net, run_dir, tag + "_resumed", ["--checkpoint-dir", ckpt,
                                                                 "--resume", ckpt])
    fixed = ["--ps", ps, "--world", "2"]
    logs2 = [os.path.join(run_dir, f"{tag}_resumed_w{r}.log") for r in (0, 1)]
    procs = [start(net.wrap(f"w{r}", worker_argv(a, fixed + ["--rank", str(r)])), logs2[r],
                   {"OMP_NUM_THREADS": "1"}) for r in (0, 1)]
    wait_all([(f"resumed rank {r}", procs[r], logs2[r]) for r in (0, 1)], a.timeout)
    after = step_times(logs2[0])
    intervals = [b[1] - a_[1] for a_, b in zip(before, before[1:])][-20:]
    base = statistics.median(intervals)
    first = after[0][1]
    if first < stopped_day:
        first += 86400
    return (first - stopped_day) / base, base, after[0][0]


def main():
    p = parser(__doc__, epilog=False)
    p.add_argument("--topologies", default="loopback,pbox")
    p.add_argument("--model", default="fashion-cnn")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--rate", default="1gbit", help="link rate of the rack")
    p.add_argument("--ps-cores", type=int, default=2)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "elastic"))
    a = p.parse_args()
    find_binaries(a)
    topologies = parse_list(a.topologies, str)
    if any(t != "loopback" for t in topologies) and nets.rack_problem():
        raise SystemExit("run_elastic.py: " + nets.rack_problem())
    run_dir = outdir.with_raw(a.out)
    rows, traces = [], {}
    nets.cleanup()
    try:
        for topo in topologies:
            net = nets.make(topo, 4, a.rate)
            try:
                for rep in range(a.repeats):
                    tag = f"{topo}_{rep}"
                    record, changes, held = run_elastic(a, net, run_dir, tag + "_elastic")
                    traces.setdefault(topo, (record, changes))
                    for kind, e in changes:
                        lost, base = lost_at(record, e)
                        rows.append({"topology": topo, "repeat": rep + 1, "event": kind,
                                     "iteration": e,
                                     "lost_iterations": "" if lost is None else round(lost, 2),
                                     "iteration_ms": "" if base is None else round(1000 * base, 1),
                                     "held_ms": held.get(e, "")})
                        log(f"{topo} #{rep + 1}: {kind} from iteration {e}: "
                            f"{'-' if lost is None else f'{lost:.2f}'} iterations lost")
                    lost, base, resumed_at = run_restart(a, net, run_dir, tag + "_restart")
                    rows.append({"topology": topo, "repeat": rep + 1,
                                 "event": "restart from a checkpoint (fixed job)",
                                 "iteration": resumed_at, "lost_iterations": round(lost, 2),
                                 "iteration_ms": round(1000 * base, 1), "held_ms": ""})
                    log(f"{topo} #{rep + 1}: restart from a checkpoint: {lost:.1f} iterations lost")
            finally:
                net.close()
    except BenchError as e:
        log(f"a run failed:\n{e}")
        return 1
    finally:
        kill_children()
        nets.cleanup()
        tables.write_tsv(os.path.join(a.out, "elastic.tsv"), rows,
                         ["topology", "repeat", "event", "iteration", "lost_iterations",
                          "iteration_ms", "held_ms"])
    lines = [f"Elastic job vs restart, phub-worker {a.model} b{a.batch} on synthetic data, "
             f"{a.iters} iterations, 1 OpenMP thread per worker; iterations lost in rank 0's "
             f"steady iteration time (median of {a.repeats} runs; each run's in brackets).", ""]
    summary = []
    for topo in topologies:
        for event in dict.fromkeys(r["event"] for r in rows if r["topology"] == topo):
            values = [r["lost_iterations"] for r in rows
                      if r["topology"] == topo and r["event"] == event and r["lost_iterations"] != ""]
            if not values:
                continue
            med = statistics.median(values)
            bar = "" if event.startswith("restart") else ("yes" if med <= 1 else "no")
            helds = [r["held_ms"] for r in rows if r["topology"] == topo and r["event"] == event
                     and r["held_ms"] != ""]
            summary.append([topo, event, f"{med:.2f}", ", ".join(f"{v:.2f}" for v in values),
                            f"{statistics.median(helds):.2f}" if helds else "-", bar])
    lines += tables.md_table(["topology", "event", "iterations lost (median)", "each",
                              "cores held (ms)", "<= 1"], summary, "llrrrl")
    table = tables.write_markdown(os.path.join(a.out, "elastic.md"), lines)
    plt = plots.import_pyplot()
    if plt is not None:
        for topo, (record, changes) in traces.items():
            its, at = record["iterations"], record["at"]
            fig, ax = plt.subplots(figsize=(9, 4))
            ax.plot(its[1:], [1000 * (at[i] - at[i - 1]) for i in range(1, len(at))], lw=0.8)
            for kind, e in changes:
                ax.axvline(e, color="grey", ls="--", lw=0.8)
                ax.annotate(kind, (e, ax.get_ylim()[1]), rotation=90, va="top", fontsize=7)
            ax.set_xlabel("iteration")
            ax.set_ylabel("rank 0's iteration time (ms)")
            ax.set_title(f"{topo}: an elastic job 2 -> 4 -> 2 ({a.model} b{a.batch})")
            plots.save(plt, fig, os.path.join(a.out, f"elastic_{topo}.png"), 110)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
