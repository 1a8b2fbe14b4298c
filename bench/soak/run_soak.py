#!/usr/bin/python3
"""run_soak.py: soak test of recovery — N workers train for many iterations on loopback while
workers and phubd are killed and restarted; phubd's memory and fds, the final weights, and the
time each failure costs.

Two runs of the same job (N phub-worker processes, synthetic data, same seeds, phubd with
--checkpoint-every K into a temporary folder, --one-job):
  1. reference: uninterrupted; its wall time, its cadence (median time between two step lines
     of rank 0) and every rank's final weights (--save-weights).
  2. soak: every ~--kill-every iterations a random worker (seeded RNG, schedule printed at the
     start) is SIGKILLed and the driver starts it again with the same rank, as a launcher
     would; --phubd-kills times (default 2, between two worker kills) phubd is SIGKILLed and
     started again on the same port with --resume on its checkpoint folder. A worker that
     exits non-zero without being killed is started again too (a launcher's restart policy)
     and counted as an "unplanned" failure: it is a bug.
Progress (when to kill) is read from the workers' logs (--log-every 1: one line per step; the
latest step of any live worker), not from the clock. phubd's RSS (/proc/PID/status VmRSS) and
open fds (/proc/PID/fd) are sampled every --sample-s seconds in both runs, one timeline across
phubd's lives.

Reported (OUT/soak.md, soak_failures.tsv, soak_summary.tsv, soak_samples.tsv, soak.png):
  - RSS and fds flat? After warm-up (the first --warmup-frac of each phubd life) and outside
    the failures' recovery windows (kill -> back past the step it was at, + 2 s), the largest
    deviation from the median, in %; "flat" if within +-5 % (--flat-pct); per phubd life and
    over the whole timeline. Also the 95th percentile of the deviation, the largest over every
    post-warm-up sample, and the drift (median of the last tenth vs the first tenth).
  - per failure: detection (kill -> phubd logs the rank lost / a worker logs "reconnecting"),
    rejoin (-> phubd logs "rejoined" / the last worker logs "reconnected"), replay (iterations
    redone x the reference's cadence), their sum, and the stall measured on the logs (last
    step before the kill -> first step past it, minus one cadence); the median per kind; the
    soak's extra wall time over the reference divided among the failures.
  - final weights: every rank's file bitwise equal to the reference's (exit 1 if not, or if a
    worker exited by itself).

  bench/soak/run_soak.py                      # 8 x 10,000 iterations, resnet56 b1: ~55 min, 2 CPUs
  bench/soak/run_soak.py --iters 3500         # kills every ~350, same shape: ~20 min on 2 CPUs
  bench/soak/run_soak.py --iters 300 --checkpoint-every 20      # ~2 minutes, to try it
  bench/soak/run_soak.py --from-raw bench/soak/results/<ts>     # the report again, from the logs

Writes bench/soak/results/<timestamp>/ (--out) and its raw/ (every process's log). The binaries
are copied to a temporary folder first, so a rebuild of --build during the run cannot swap them
between restarts. Needs build/phub/server/phubd and build/worker/phub-worker (deploy/build.sh).
"""
import array
import datetime
import hashlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from benchlib import BenchError, machine, outdir, plots, tables  # noqa: E402
from benchlib.cli import parser  # noqa: E402
from benchlib.log import Progress, log  # noqa: E402
from benchlib.procs import kill_children, start, tail, wait_port_file  # noqa: E402

POLL_S = 0.05  # how often the driver reads the logs and checks its children
RECOVERY_MARGIN_S = 2.0  # after a failure's stall, samples still counted as its transient

STEP_RE = re.compile(r"^\[(\d\d):(\d\d):(\d\d)\.(\d\d\d)\] \[phub-worker\] \[info\] step (\d+)/")
STAMP_RE = re.compile(r"^\[(\d\d):(\d\d):(\d\d)\.(\d\d\d)\] ")
CKPT_RE = re.compile(r"checkpoint of iteration (\d+) written to \S+ in (\d+) ms; the cores "
                     r"paused ([\d.]+) ms")


# ---- processes ------------------------------------------------------------------------------

class Job:
    """One run of the job: phubd (one life per start) and N workers (one incarnation per
    start), their logs under raw/, and what the driver did to them, with time.time() stamps
    (the logs' stamps are the same wall clock, to the millisecond)."""

    def __init__(self, a, tag, bins, ckpt_dir, raw):
        self.a, self.tag, self.bins, self.ckpt_dir, self.raw = a, tag, bins, ckpt_dir, raw
        self.port = 0
        self.phubd = None
        self.phubd_lives = []  # [{"life", "pid", "log", "t_start", "t_end"}]
        self.workers = [None] * a.n  # Popen of each rank's current incarnation
        self.incarnation = [0] * a.n
        self.worker_logs = [[] for _ in range(a.n)]  # every incarnation's log, per rank
        self.tails = [None] * a.n
        self.latest = [0] * a.n  # latest step line of each rank's current incarnation
        self.done = [False] * a.n
        self.killed = set()  # pids the driver killed on purpose
        self.samples = []  # {"t", "life", "rss_kb", "fds"}
        self.failures = []  # what the driver did: kills, restarts, unplanned exits
        self.t_start = self.t_end = None

    # phubd
    def start_phubd(self, resume):
        life = len(self.phubd_lives) + 1
        log_path = os.path.join(self.raw, f"{self.tag}_phubd{life}.log")
        port_file = os.path.join(self.raw, f"{self.tag}_port{life}")
        a = self.a
        argv = [self.bins["phubd"], "--port", str(self.port), "--port-file", port_file,
                "--max-world-size", str(a.n), "--cores", str(a.ps_cores), "--optimizer", "momentum",
                "--lr", "0.01", "--one-job", "--checkpoint-dir", self.ckpt_dir,
                "--checkpoint-every", str(a.checkpoint_every),
                "--rejoin-timeout-ms", str(a.rejoin_timeout_ms),
                "--liveness-timeout-ms", str(a.liveness_timeout_ms), "--log-level", "info"]
        if resume:
            argv += ["--resume", self.ckpt_dir]
        proc = start(argv, log_path)
        self.port = int(wait_port_file(port_file, proc, f"{self.tag} phubd (life {life})",
                                       log_path))
        self.phubd = proc
        self.phubd_lives.append({"life": life, "pid": proc.pid, "log": log_path,
                                 "t_start": time.time(), "t_end": None})

    def kill_phubd(self):
        self.killed.add(self.phubd.pid)
        os.killpg(self.phubd.pid, signal.SIGKILL)
        self.phubd.wait()
        self.phubd_lives[-1]["t_end"] = time.time()

    # workers
    def worker_argv(self, rank):
        a = self.a
        return [self.bins["worker"], "--comm", "ps", "--ps", f"127.0.0.1:{self.port}",
                "--rank", str(rank), "--world", str(a.n), "--model", a.model,
                "--batch", str(a.batch), "--iters", str(a.iters), "--warmup", "0",
                "--seed", str(a.seed), "--log-level", "info", "--log-every", "1",
                "--reconnect-timeout-ms", str(a.reconnect_timeout_ms),
                "--save-weights", os.path.join(self.raw, f"{self.tag}_weights{rank}.bin")]

    def start_worker(self, rank):
        self.incarnation[rank] += 1
        log_path = os.path.join(self.raw, f"{self.tag}_w{rank}_{self.incarnation[rank]}.log")
        self.workers[rank] = start(self.worker_argv(rank), log_path, {"OMP_NUM_THREADS": "1"})
        self.worker_logs[rank].append(log_path)
        self.tails[rank] = LogTail(log_path)
        self.done[rank] = False

    def kill_worker(self, rank):
        proc = self.workers[rank]
        self.killed.add(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def progress(self):
        """The latest step of any live worker (they are in lock step, give or take one)."""
        for r in range(self.a.n):
            if self.tails[r] is not None:
                step = self.tails[r].latest_step()
                if step is not None:
                    self.latest[r] = step
        return max(self.latest)

    def sample(self):
        if self.phubd is None or self.phubd.poll() is not None:
            return
        pid = self.phubd.pid
        try:
            with open(f"/proc/{pid}/status") as f:
                rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, StopIteration):
            return  # it just exited
        self.samples.append({"t": time.time(), "life": len(self.phubd_lives), "rss_kb": rss,
                             "fds": fds})


class LogTail:
    """Reads a growing log from where it last stopped; remembers its latest step line."""

    def __init__(self, path):
        self.path, self.offset, self.partial, self.step = path, 0, b"", None

    def latest_step(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.step
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            m = STEP_RE.match(line.decode(errors="replace"))
            if m:
                self.step = int(m.group(5))
        return self.step


def make_schedule(a, rng):
    """The soak's planned failures: a worker every ~kill_every iterations (+-10 %), phubd
    --phubd-kills times half-way between two of them; sorted by iteration."""
    every, jitter = a.kill_every, max(0, a.kill_every // 10)
    plan = []
    for k in range(1, a.iters // every + 1):
        at = k * every + rng.randint(-jitter, jitter)
        if at < a.iters - max(2, every // 4):
            plan.append({"at": at, "kind": "worker", "rank": rng.randrange(a.n)})
    for j in range(1, a.phubd_kills + 1):
        at = (j * a.iters // (a.phubd_kills + 1)) // every * every + every // 2
        at += rng.randint(-jitter, jitter)
        if at < a.iters - max(2, every // 4):
            plan.append({"at": at, "kind": "phubd", "rank": None})
    plan.sort(key=lambda p: p["at"])
    return plan


def run_job(a, job, plan, deadline_s, cadence_s=0.0):
    """Runs the job to its end, carrying out `plan` (empty: the reference); a kill comes
    uniformly within the `cadence_s` after the planned step's line. Raises BenchError when a
    process fails in a way a launcher cannot mend, or past the deadline."""
    job.start_phubd(resume=False)
    job.t_start = time.time()
    for r in range(a.n):
        job.start_worker(r)
    pending = list(plan)
    next_sample = 0.0
    last_log = time.monotonic()
    progress = Progress(len(plan)) if plan else None
    phubd_gone_at = None
    kill_at = None
    jitter_rng = random.Random(a.rng_seed + 1)
    while True:
        now = time.monotonic()
        if now >= next_sample:
            job.sample()
            next_sample = now + a.sample_s
        step = job.progress()
        if now - last_log > 60:
            last_log = now
            log(f"{job.tag}: step {step}/{a.iters}, phubd RSS "
                f"{job.samples[-1]['rss_kb'] / 1024 if job.samples else 0:.1f} MiB, "
                f"{job.samples[-1]['fds'] if job.samples else 0} fds"
                + (f", failures {progress}" if progress else ""))
        # Workers: done, or died without being asked to.
        for r in range(a.n):
            proc = job.workers[r]
            rc = proc.poll()
            if rc is None or job.done[r]:
                continue
            if rc == 0:
                job.done[r] = True
                continue
            if proc.pid in job.killed:
                continue  # restarted below, by the plan's step
            log(f"{job.tag}: UNPLANNED: rank {r} exited with {rc} at step ~{step}; its log "
                f"({job.worker_logs[r][-1]}) ends:\n{tail(job.worker_logs[r][-1], 6)}")
            if not a.restart_crashed:
                raise BenchError(f"rank {r} exited with {rc} (--no-restart-crashed)")
            job.failures.append({"kind": "unplanned", "rank": r, "at": None, "rc": rc,
                                 "t_kill": time.time(), "step_live": step})
            job.start_worker(r)
            job.failures[-1]["t_restart"] = time.time()
        if all(job.done):
            break
        if job.phubd.poll() is not None and job.phubd.pid not in job.killed:
            # --one-job: phubd ends with the job, a moment before the workers exit.
            if job.phubd.returncode != 0 or phubd_gone_at and now - phubd_gone_at > 30:
                lf = job.phubd_lives[-1]["log"]
                raise BenchError(f"{job.tag}: phubd exited with {job.phubd.returncode} before "
                                 f"the workers were done; its log ({lf}):\n{tail(lf)}")
            phubd_gone_at = phubd_gone_at or now
        # The plan: kill when the job has reached the next point, at a random moment of the
        # step (the logs show when a step ends; killing right then would always hit its start).
        if pending and step >= pending[0]["at"] and kill_at is None:
            kill_at = now + jitter_rng.random() * cadence_s
        if kill_at is not None and now >= kill_at:
            kill_at = None
            p = pending.pop(0)
            event = dict(p, t_kill=time.time(), step_live=step)
            if p["kind"] == "worker":
                r = p["rank"]
                job.kill_worker(r)
                job.start_worker(r)
            else:
                job.kill_phubd()
                event["t_reaped"] = time.time()
                job.start_phubd(resume=True)
            event["t_restart"] = time.time()
            job.failures.append(event)
            progress.step()
            who = f"rank {p['rank']}" if p["kind"] == "worker" else "phubd"
            log(f"{job.tag}: step {step}: killed {who} (planned at {p['at']}), started again "
                f"in {1000 * (event['t_restart'] - event['t_kill']):.0f} ms ({progress})")
        if time.time() - job.t_start > deadline_s:
            raise BenchError(f"{job.tag}: not done after {deadline_s:.0f} s (step {step}); "
                             f"phubd's log:\n{tail(job.phubd_lives[-1]['log'])}")
        time.sleep(POLL_S)
    job.t_end = time.time()
    # phubd --one-job ends with the job; give it a moment to write its last lines.
    try:
        rc = job.phubd.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{job.tag}: phubd did not exit 30 s after the job's end")
    job.phubd_lives[-1]["t_end"] = min(time.time(), job.t_end)
    if rc != 0:
        raise BenchError(f"{job.tag}: phubd exited with {rc} at the job's end")
    if pending:
        log(f"{job.tag}: {len(pending)} planned failure(s) not reached: "
            + ", ".join(str(p["at"]) for p in pending))


# ---- what a run leaves for --from-raw -------------------------------------------------------

STATE_KEYS = ("tag", "phubd_lives", "worker_logs", "samples", "failures", "t_start", "t_end")


def save_state(path, a, jobs, header):
    """raw/soak_run.json: the flags, the header and each job's timeline, so the report can be
    made again from the logs (--from-raw) without running anything."""
    state = {"args": {k: v for k, v in vars(a).items() if k not in ("out", "from_raw")},
             "header": header, "jobs": {j.tag: {k: getattr(j, k) for k in STATE_KEYS}
                                        for j in jobs}}
    with open(path, "w") as f:
        json.dump(state, f, indent=1)


def load_state(folder, a):
    """(ref, soak, header) from folder/raw/soak_run.json; the logs are looked for in
    folder/raw, wherever they were written; a takes the run's flags (not --out)."""
    raw = os.path.join(folder, "raw")
    with open(os.path.join(raw, "soak_run.json")) as f:
        state = json.load(f)
    for k, v in state["args"].items():
        setattr(a, k, v)
    jobs = []
    for tag in ("reference", "soak"):
        job = Job(a, tag, None, None, raw)
        for k in STATE_KEYS:
            setattr(job, k, state["jobs"][tag][k])
        job.worker_logs = [[os.path.join(raw, os.path.basename(p)) for p in paths]
                           for paths in job.worker_logs]
        for life in job.phubd_lives:
            life["log"] = os.path.join(raw, os.path.basename(life["log"]))
        jobs.append(job)
    return jobs[0], jobs[1], state["header"]


# ---- the logs, afterwards -------------------------------------------------------------------

def stamp_of(line, day0):
    """The epoch seconds of a log line's [HH:MM:SS.mmm] (local time), on the day of `day0`
    (epoch) or the next one (a run across midnight); None for a line without a stamp."""
    m = STAMP_RE.match(line)
    if not m:
        return None
    h, mi, s, ms = (int(x) for x in m.groups())
    base = datetime.datetime.fromtimestamp(day0).replace(hour=0, minute=0, second=0,
                                                         microsecond=0)
    t = (base + datetime.timedelta(hours=h, minutes=mi, seconds=s, milliseconds=ms)).timestamp()
    return t + 86400 if t < day0 - 3600 else t


def read_lines(path, day0):
    """[(t, text)] of a log's stamped lines."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            t = stamp_of(line, day0)
            if t is not None:
                out.append((t, line.rstrip("\n")))
    return out


def parse_job(job):
    """Steps [(t, rank, step)], worker lines {rank: [(t, text)]}, phubd lines [(t, life,
    text)], sorted by time."""
    day0 = job.t_start
    steps, wlines = [], {}
    for r, paths in enumerate(job.worker_logs):
        wlines[r] = []
        for path in paths:
            for t, text in read_lines(path, day0):
                wlines[r].append((t, text))
                m = STEP_RE.match(text)
                if m:
                    steps.append((t, r, int(m.group(5))))
    steps.sort()
    plines = []
    for life in job.phubd_lives:
        plines += [(t, life["life"], text) for t, text in read_lines(life["log"], day0)]
    plines.sort(key=lambda x: x[0])
    return steps, wlines, plines


def cadence_ms(steps, rank=0):
    """Median time between two consecutive step lines of `rank` (the job's pace), in ms."""
    ts = [t for t, r, _ in steps if r == rank]
    gaps = [1000 * (b - a) for a, b in zip(ts, ts[1:]) if b > a]
    return statistics.median(gaps) if gaps else float("nan")


def first_after(lines, t0, pattern, t1=float("inf")):
    """(t, match) of the first line in [t0, t1) matching pattern; (None, None) if none."""
    rx = re.compile(pattern)
    for t, text in lines:
        if t >= t1:
            break
        if t >= t0 - 0.0005:  # the logs' stamps are truncated to the millisecond
            m = rx.search(text)
            if m:
                return t, m
    return None, None


def analyse_failures(a, job, steps, wlines, plines, cadence):
    """One row per failure: what it cost, from the logs."""
    rows = []
    plain = [(t, text) for t, _, text in plines]
    for i, f in enumerate(job.failures):
        tk = f["t_kill"]
        # What follows the next failure is not this one's.
        t1 = job.failures[i + 1]["t_kill"] if i + 1 < len(job.failures) else float("inf")
        # The job's progress at the kill: each rank's latest step line before it, the max.
        last = {}
        for t, r, s in steps:
            if t > tk:
                break
            last[r] = (s, t)
        s_k = max((s for s, _ in last.values()), default=0)
        t_sk = min((t for s, t in last.values() if s == s_k), default=tk)
        row = {"n": i + 1, "kind": f["kind"], "rank": "-" if f["rank"] is None else f["rank"],
               "planned_at": f["at"] if f["at"] is not None else "-", "step_at_kill": s_k}
        if f["kind"] in ("worker", "unplanned"):
            r = f["rank"]
            t_det, _ = first_after(plain, tk, rf"job \d+: rank {r} was lost", t1)
            t_rej, m = first_after(plain, tk, rf"job \d+: rank {r} rejoined from \S+; it "
                                              r"replays from iteration (\d+)", t1)
            if t_rej is None:  # rejoined a resumed phubd's job instead
                t_rej, m = first_after(wlines[r], tk, r"resumes the job at step (\d+)", t1)
            resume = int(m.group(1)) if m else None
        else:
            det = [first_after(wlines[r], tk, r"reconnecting for up to", t1)
                   for r in range(a.n)]
            t_det = min((t for t, _ in det if t is not None), default=None)
            back = [first_after(wlines[r], tk, r"(?:reconnected \(\d+ so far\): going on from "
                                               r"step|resumes the job at step) (\d+)", t1)
                    for r in range(a.n)]
            t_rej = max((t for t, _ in back), default=None) if all(t for t, _ in back) else None
            _, m = first_after(plain, tk, r"resuming from \S+: iteration (\d+)", t1)
            resume = int(m.group(1)) if m else None
        t_back = next((t for t, _, s in steps if t > tk and s > s_k), None)
        redone = s_k - resume if resume is not None else None
        row.update({
            "resume_iter": resume if resume is not None else "-",
            "redone": redone if redone is not None else "-",
            "restart_ms": 1000 * (f["t_restart"] - tk),
            "detect_ms": 1000 * (t_det - tk) if t_det else None,
            "rejoin_ms": 1000 * (t_rej - t_det) if t_rej and t_det else None,
            "replay_ms": redone * cadence if redone is not None else None,
            "stall_ms": 1000 * (t_back - t_sk) - cadence if t_back else None,
        })
        parts = [row[k] for k in ("detect_ms", "rejoin_ms", "replay_ms")]
        row["lost_ms"] = sum(parts) if all(p is not None for p in parts) else None
        row["window"] = (tk, (t_back or tk) + RECOVERY_MARGIN_S)
        rows.append(row)
    return rows


def checkpoints(plines):
    """[(iteration, write_ms, pause_ms, t written)] of the checkpoints phubd logged."""
    out = []
    for t, _, text in plines:
        m = CKPT_RE.search(text)
        if m:
            out.append((int(m.group(1)), float(m.group(2)), float(m.group(3)), t))
    return out


# ---- flatness -------------------------------------------------------------------------------

def spread(samples, key, med):
    """The largest deviation of `key` from `med` over `samples`, in % of med."""
    return 100 * max(abs(x[key] - med) for x in samples) / med if samples else 0.0


def quantile_spread(samples, key, med, q=0.95):
    """The q-quantile of |key - med| over `samples`, in % of med: the deviation most samples
    stay within (one-sample spikes, such as a checkpoint's snapshot, left out)."""
    devs = sorted(abs(x[key] - med) for x in samples)
    return 100 * devs[min(len(devs) - 1, int(q * len(devs)))] / med if devs else 0.0


def tenths_drift(samples, key, med):
    """Median of the last tenth minus the first tenth's, in % of med."""
    tenth = max(1, len(samples) // 10)
    first = statistics.median(x[key] for x in samples[:tenth])
    last = statistics.median(x[key] for x in samples[-tenth:])
    return 100 * (last - first) / med


def job_ending(a, steps):
    """When the first worker logged the last step: from then on the job is ending (Goodbyes,
    phubd --one-job freeing the job and closing its connections), not running."""
    last = [t for t, _, step in steps if step >= a.iters]
    return min(last) if last else float("inf")


def flatness(job, windows, key, warmup_frac, until=float("inf")):
    """Rows for the flatness table: every phubd life on its own, then "all" (one timeline, one
    median), over the samples taken before `until` (job_ending). Each: median, range and largest
    deviation from the median (%) of the steady
    samples (after the life's warm-up, outside the recovery windows), the largest deviation
    over every post-warm-up sample, and the drift."""
    rows, kept_all, steady_all = [], [], []
    for life in job.phubd_lives:
        t0, t1 = life["t_start"], life["t_end"] or job.t_end
        warm = t0 + warmup_frac * (t1 - t0)
        kept = [x for x in job.samples
                if x["life"] == life["life"] and warm <= x["t"] <= until]
        steady = [x for x in kept if not any(w0 <= x["t"] <= w1 for w0, w1 in windows)]
        kept_all += kept
        steady_all += steady
        if steady:
            rows.append(flat_row(str(life["life"]), kept, steady, key))
    if steady_all and len(job.phubd_lives) > 1:
        rows.append(flat_row("all", kept_all, steady_all, key))
    return rows


def flat_row(life, kept, steady, key):
    med = statistics.median(x[key] for x in steady)
    return {"life": life, "median": med, "min": min(x[key] for x in steady),
            "max": max(x[key] for x in steady), "dev_steady": spread(steady, key, med),
            "dev_p95": quantile_spread(steady, key, med),
            "dev_all": spread(kept, key, med), "drift": tenths_drift(steady, key, med),
            "samples": len(steady)}


# ---- weights --------------------------------------------------------------------------------

def compare_weights(a, ref, soak):
    """Per rank: (equal bitwise?, sha256 prefix of the soak's file, a note where they differ)."""
    out = []
    for r in range(a.n):
        pr = os.path.join(ref.raw, f"{ref.tag}_weights{r}.bin")
        ps = os.path.join(soak.raw, f"{soak.tag}_weights{r}.bin")
        try:
            with open(pr, "rb") as f:
                br = f.read()
            with open(ps, "rb") as f:
                bs = f.read()
        except OSError as e:
            out.append((False, "-", str(e)))
            continue
        note = ""
        if br != bs:
            if len(br) != len(bs):
                note = f"sizes {len(br)} vs {len(bs)} B"
            else:
                fr, fs = array.array("f", br), array.array("f", bs)
                diff = [abs(x - y) for x, y in zip(fr, fs) if x != y]
                note = f"{len(diff)} of {len(fr)} floats differ, max |diff| {max(diff):.3g}"
        out.append((br == bs, hashlib.sha256(bs).hexdigest()[:12], note))
    return out


# ---- the plot -------------------------------------------------------------------------------

def plot(path, a, ref, soak, rows, steps_ref, steps_soak, flat, ckpts):
    plt = plots.import_pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    series = [("reference (uninterrupted)", ref, steps_ref, "0.6"),
              ("soak", soak, steps_soak, "C0")]
    for label, job, steps, color in series:
        for life in job.phubd_lives:
            pts = [s for s in job.samples if s["life"] == life["life"]]
            lab = label if life["life"] == 1 else None
            axes[0].plot([s["t"] - job.t_start for s in pts], [s["rss_kb"] / 1024 for s in pts],
                         color=color, lw=1.2, label=lab)
            axes[1].plot([s["t"] - job.t_start for s in pts], [s["fds"] for s in pts],
                         color=color, lw=1.2, label=lab, drawstyle="steps-post")
        mine = [(t, s) for t, r, s in steps if r == 0]
        axes[2].plot([t - job.t_start for t, _ in mine], [s for _, s in mine], color=color,
                     lw=1.2, label=label + " (rank 0)")
    for ax, key, scale in ((axes[0], "rss_kb", 1 / 1024), (axes[1], "fds", 1)):
        f = flat.get(key)
        if f:
            m = f[-1]["median"] * scale
            ax.axhspan(m * (1 - a.flat_pct / 100), m * (1 + a.flat_pct / 100), color="C2",
                       alpha=0.12, label=f"soak median ±{a.flat_pct:g} %")
    for life in soak.phubd_lives:  # warm-up of each phubd life, shaded
        t0, t1 = life["t_start"], life["t_end"] or soak.t_end
        for ax in axes[:2]:
            ax.axvspan(t0 - soak.t_start, t0 + a.warmup_frac * (t1 - t0) - soak.t_start,
                       color="0.85", alpha=0.5, lw=0)
    labels = {"worker": ("C3", "--", "worker killed + restarted"),
              "phubd": ("k", "-", "phubd killed + resumed"),
              "unplanned": ("C1", ":", "worker exited by itself (restarted)")}
    seen = set()
    for row, f in zip(rows, soak.failures):
        color, style, text = labels[f["kind"]]
        for ax in axes:
            ax.axvline(f["t_kill"] - soak.t_start, color=color, ls=style, lw=1,
                       label=text if f["kind"] not in seen and ax is axes[2] else None)
        seen.add(f["kind"])
    if ckpts:  # when the soak's checkpoints were written: RSS spikes line up with them
        top = max(s["rss_kb"] for s in soak.samples) / 1024 * 1.08
        axes[0].plot([c[3] - soak.t_start for c in ckpts], [top] * len(ckpts), "|", color="C4",
                     ms=6, label="checkpoint written (soak)")
    axes[0].set_ylabel("phubd RSS (MiB)")
    axes[1].set_ylabel("phubd open fds")
    axes[2].set_ylabel("iteration")
    axes[2].set_xlabel("seconds since the workers started (grey band: warm-up of a phubd life)")
    axes[0].set_title(f"soak: {a.n} × {a.model} b{a.batch}, {a.iters} iterations on loopback; "
                      f"phubd sampled every {a.sample_s:g} s")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(bottom=0)
    plots.save(plt, fig, path, dpi=110)
    return True


# ---- main -----------------------------------------------------------------------------------

def copy_binaries(a, tmp):
    bins = {}
    for key, rel in (("phubd", ("phub", "server", "phubd")), ("worker", ("worker", "phub-worker"))):
        src = os.path.join(a.build, *rel)
        if not os.access(src, os.X_OK):
            raise SystemExit(f"run_soak.py: {src} missing: run deploy/build.sh first")
        bins[key] = os.path.join(tmp, os.path.basename(src))
        shutil.copy2(src, bins[key])
    stamp = datetime.datetime.fromtimestamp(os.path.getmtime(os.path.join(a.build, "phub", "server",
                                                                          "phubd")))
    return bins, f"{a.build}, phubd built {stamp:%Y-%m-%d %H:%M}"


def ms(v, spec=".0f"):
    return tables.fmt(v, spec)


def report(a, ref, soak, rows, flat, flat_ref, weights, ckpts, cadence, header, plotted):
    failures = [r for r in rows if r["kind"] in ("worker", "phubd")]
    unplanned = [r for r in rows if r["kind"] == "unplanned"]
    ref_wall = ref.t_end - ref.t_start
    soak_wall = soak.t_end - soak.t_start
    extra = soak_wall - ref_wall
    all_equal = all(eq for eq, _, _ in weights)
    md = ["# soak: recovery under repeated failures", "", header, "",
          f"N = {a.n} workers, {a.model} batch {a.batch} per worker (synthetic data, seed "
          f"{a.seed}), {a.iters} iterations, loopback; phubd --cores {a.ps_cores}, momentum, "
          f"--checkpoint-every {a.checkpoint_every}, --liveness-timeout-ms "
          f"{a.liveness_timeout_ms}, --rejoin-timeout-ms {a.rejoin_timeout_ms}; workers "
          f"--reconnect-timeout-ms {a.reconnect_timeout_ms}. Planned: a worker killed every "
          f"~{a.kill_every} iterations (RNG seed {a.rng_seed}), phubd killed {a.phubd_kills}× "
          f"(SIGKILL; restarted by this driver at once, phubd with --resume).", ""]
    md += ["## wall time and final weights", ""]
    md += tables.md_table(
        ["run", "wall time", "cadence (ms / iteration)", "failures", "final weights"],
        [["reference (uninterrupted)", f"{ref_wall:.1f} s", f"{cadence:.1f}", "0", "-"],
         ["soak", f"{soak_wall:.1f} s", f"{cadence_ms(parse_job(soak)[0]):.1f}",
          f"{len(failures)} planned" + (f" + {len(unplanned)} unplanned" if unplanned else ""),
          "**bitwise equal** on every rank" if all_equal else "**DIFFERENT**"]], "lrrrl")
    md += ["", f"Extra wall time of the soak: {extra:.1f} s = "
           + (f"**{1000 * extra / len(failures):.0f} ms per planned failure** "
              f"({len(failures)})" if failures else "-")
           + (f"; {len(unplanned)} unplanned failure(s) in it" if unplanned else "") + ".", ""]
    md += tables.md_table(["rank", "equal to the reference", "sha256 (soak)", "note"],
                          [[str(r), "yes" if eq else "**no**", h, note or ""]
                           for r, (eq, h, note) in enumerate(weights)], "rlll")
    md += ["", "## phubd's RSS and open fds", ""]
    frow, verdicts = [], {}
    for name, fl in (("reference", flat_ref), ("soak", flat)):
        for key, what, scale, spec in (("rss_kb", "RSS MiB", 1 / 1024, ".1f"),
                                       ("fds", "open fds", 1, ".0f")):
            for f in fl[key]:
                ok = f["dev_steady"] <= a.flat_pct
                verdicts.setdefault((name, key), []).append((f["life"], ok, f["dev_steady"]))
                lo, hi = format(f["min"] * scale, spec), format(f["max"] * scale, spec)
                frow.append([name, what, f["life"], format(f["median"] * scale, spec),
                             f"{lo} – {hi}",
                             f"±{f['dev_steady']:.1f} % " + ("flat" if ok else "**not flat**"),
                             f"±{f['dev_p95']:.1f} %", f"±{f['dev_all']:.1f} %",
                             f"{f['drift']:+.1f} %", str(f["samples"])])
    md += tables.md_table(["run", "what", "phubd life", "median", "range (steady)",
                           "max dev. (steady)", "95 % of steady within", "max dev. (all after "
                           "warm-up)", "drift", "samples"], frow, "llrrrrrrrr")
    md += ["", f"Sampled every {a.sample_s:g} s. Warm-up: the first {100 * a.warmup_frac:.0f} % "
           f"of each phubd life, left out, and so is the job's end (from the first worker's "
           f"last step: Goodbyes, phubd freeing the job). Steady: also without the failures' "
           f"recovery windows "
           f"(kill → the job past the step it was at, + {RECOVERY_MARGIN_S:g} s), where phubd "
           f"holds one worker's connections fewer. Flat: steady within ±{a.flat_pct:g} % of the "
           f"median. 95 % within: the 95th percentile of the steady samples' deviation (a "
           f"one-sample spike left out). Drift: median of the last tenth of the steady "
           f"samples minus the first tenth's, over the median. Purple ticks on the plot: "
           f"checkpoints written.", ""]
    for key, what in (("rss_kb", "RSS"), ("fds", "open fds")):
        v = verdicts.get(("soak", key), [])
        whole = [x for x in v if x[0] == "all"] or v[-1:]
        lives = [x for x in v if x[0] != "all"]
        if whole:
            md.append(f"- soak, phubd {what}: " + (
                f"**flat** (±{whole[0][2]:.1f} % over the whole timeline)" if whole[0][1] else
                f"**not flat** over the whole timeline (±{whole[0][2]:.1f} %)")
                + f"; within each life ±{max(x[2] for x in lives):.1f} % at most.")
    md.append("")
    if plotted:
        md += ["![RSS, fds and progress](soak.png)", ""]
    md += ["## time lost per failure", ""]
    md += tables.md_table(
        ["#", "kind", "rank", "planned at", "step at kill", "resumes at", "redone",
         "driver restart ms", "detect ms", "rejoin ms", "replay ms", "sum ms", "stall ms"],
        [[str(r["n"]), r["kind"], str(r["rank"]), str(r["planned_at"]), str(r["step_at_kill"]),
          str(r["resume_iter"]), str(r["redone"]), ms(r["restart_ms"]), ms(r["detect_ms"]),
          ms(r["rejoin_ms"]), ms(r["replay_ms"]), ms(r["lost_ms"]), ms(r["stall_ms"])]
         for r in rows], "rllrrrrrrrrrr")
    md += ["", "detect: kill → phubd logs the rank lost (worker) / the first worker logs "
           "\"reconnecting\" (phubd). rejoin: → phubd logs \"rank R rejoined\" (worker) / the "
           "last worker logs \"reconnected\" (phubd; this includes the driver starting phubd "
           "with --resume and it loading the checkpoint). replay: iterations redone (step at "
           f"kill − the iteration it resumes at) × the reference's cadence, {cadence:.1f} ms. "
           "stall: measured on the workers' step lines, last step before the kill → first step "
           "past it, minus one cadence (the whole cost, replay included).", ""]
    summary = []
    for kind in ("worker", "phubd", "unplanned"):
        sel = [r for r in rows if r["kind"] == kind]
        if not sel:
            continue

        def med(key):
            vals = [r[key] for r in sel if r[key] is not None and r[key] != "-"]
            return statistics.median(vals) if vals else None
        summary.append({"kind": kind, "count": len(sel), **{k: med(k) for k in (
            "detect_ms", "rejoin_ms", "redone", "replay_ms", "lost_ms", "stall_ms")}})
    md += ["### median per kind", ""]
    md += tables.md_table(
        ["kind", "failures", "detect ms", "rejoin ms", "redone", "replay ms", "sum ms",
         "stall ms"],
        [[s["kind"], str(s["count"]), ms(s["detect_ms"]), ms(s["rejoin_ms"]),
          ms(s["redone"], ".1f"), ms(s["replay_ms"]), ms(s["lost_ms"]), ms(s["stall_ms"])]
         for s in summary], "lrrrrrrr")
    total_stall = sum(r["stall_ms"] for r in rows if r["stall_ms"] is not None) / 1000
    md += ["", f"Sum of the stalls: {total_stall:.1f} s; the soak's extra wall time over the "
           f"reference: {extra:.1f} s (the rest: noise of a shared box, and each restarted "
           f"worker's own start).", ""]
    if ckpts:
        md += [f"Checkpoints (soak, all lives): {len(ckpts)} written, median "
               f"{statistics.median(c[1] for c in ckpts):.0f} ms to write, the cores paused "
               f"{statistics.median(c[2] for c in ckpts):.2f} ms (median) for each.", ""]
    tables.write_markdown(os.path.join(a.out, "soak.md"), md[:-1])
    keys = ["n", "kind", "rank", "planned_at", "step_at_kill", "resume_iter", "redone",
            "restart_ms", "detect_ms", "rejoin_ms", "replay_ms", "lost_ms", "stall_ms"]
    tables.write_tsv(os.path.join(a.out, "soak_failures.tsv"),
                     [{k: ("" if r[k] is None else r[k]) for k in keys} for r in rows], keys,
                     tables.short_float)
    tables.write_tsv(os.path.join(a.out, "soak_summary.tsv"),
                     [{k: ("" if s[k] is None else s[k]) for k in s} for s in summary],
                     ["kind", "count", "detect_ms", "rejoin_ms", "redone", "replay_ms",
                      "lost_ms", "stall_ms"], tables.short_float)
    samples = [{"run": job.tag, "t_s": s["t"] - job.t_start, "life": s["life"],
                "rss_kb": s["rss_kb"], "fds": s["fds"]}
               for job in (ref, soak) for s in job.samples]
    tables.write_tsv(os.path.join(a.out, "soak_samples.tsv"), samples,
                     ["run", "t_s", "life", "rss_kb", "fds"], tables.short_float)
    print("\n".join(md[2:]))
    log(f"wrote {a.out}/soak.md, soak_failures.tsv, soak_summary.tsv, soak_samples.tsv"
        + (", soak.png" if plotted else ""))
    if not all_equal:
        log("run_soak: FAILED: the final weights differ from the reference's (soak.md)")
    if unplanned:
        log(f"run_soak: FAILED: {len(unplanned)} worker(s) exited by themselves (soak.md)")
    return 0 if all_equal and not unplanned else 1


def main():
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=8, help="workers (default: 8)")
    p.add_argument("--iters", type=int, default=10000, help="iterations (default: 10000)")
    p.add_argument("--model", default="resnet56",
                   help="zoo model (default: resnet56, the smallest: 0.85 M parameters)")
    p.add_argument("--batch", type=int, default=1, help="mini-batch per worker (default: 1)")
    p.add_argument("--seed", type=int, default=1, help="phub-worker --seed (default: 1)")
    p.add_argument("--kill-every", type=int, default=None,
                   help="iterations between worker kills, +-10 %% (default: --iters / 10)")
    p.add_argument("--phubd-kills", type=int, default=2, help="phubd kills (default: 2)")
    p.add_argument("--rng-seed", type=int, default=1,
                   help="seed of the kill schedule: which rank, jitter (default: 1)")
    p.add_argument("--checkpoint-every", type=int, default=100,
                   help="phubd --checkpoint-every (default: 100)")
    p.add_argument("--ps-cores", type=int, default=1, help="phubd --cores (default: 1)")
    p.add_argument("--liveness-timeout-ms", type=int, default=10000,
                   help="phubd --liveness-timeout-ms (default: 10000, phubd's)")
    p.add_argument("--rejoin-timeout-ms", type=int, default=60000,
                   help="phubd --rejoin-timeout-ms (default: 60000, phubd's)")
    p.add_argument("--reconnect-timeout-ms", type=int, default=120000,
                   help="phub-worker --reconnect-timeout-ms (default: 120000)")
    p.add_argument("--no-restart-crashed", dest="restart_crashed", action="store_false",
                   help="a worker exiting non-zero by itself fails the run instead of being "
                        "started again")
    p.add_argument("--sample-s", type=float, default=1.0,
                   help="seconds between RSS/fd samples (default: 1)")
    p.add_argument("--warmup-frac", type=float, default=0.1,
                   help="share of each phubd life left out of the flatness (default: 0.1)")
    p.add_argument("--flat-pct", type=float, default=5.0,
                   help="flat: steady samples within +-this %% of the median (default: 5)")
    p.add_argument("--timeout", type=int, default=0,
                   help="seconds per run (default: reference iters x 2 s + 600; soak 3 x the "
                        "reference + 600 + 120 per failure)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=None,
                   help="output folder (default: bench/soak/results/<timestamp>)")
    p.add_argument("--from-raw", default=None, metavar="DIR",
                   help="run nothing: make the report again from DIR/raw (an earlier run's "
                        "output folder; written to --out, default DIR)")
    a = p.parse_args()
    if a.from_raw:
        a.out = a.out or a.from_raw
        os.makedirs(a.out, exist_ok=True)
        ref, soak, header = load_state(a.from_raw, a)
        return analyse_and_report(a, ref, soak, header)
    a.kill_every = a.kill_every or max(1, a.iters // 10)
    if a.n < 2 or a.iters < 10 or a.checkpoint_every < 1 or a.phubd_kills < 0:
        p.error("--n >= 2, --iters >= 10, --checkpoint-every >= 1, --phubd-kills >= 0")
    a.out = a.out or os.path.join(HERE, "results", datetime.datetime.now().strftime(
        "%Y%m%d-%H%M%S"))
    raw = outdir.with_raw(a.out)

    def on_term(signum, frame):
        log(f"run_soak: signal {signum}, stopping")
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    rng = random.Random(a.rng_seed)
    plan = make_schedule(a, rng)
    log(f"run_soak: {a.n} × {a.model} b{a.batch}, {a.iters} iterations; {len(plan)} planned "
        f"failures (rng seed {a.rng_seed}): "
        + ", ".join(f"{p['at']}:{'phubd' if p['kind'] == 'phubd' else 'rank ' + str(p['rank'])}"
                    for p in plan))
    start_load = machine.load_average()
    tmp = tempfile.mkdtemp(prefix="phub-soak-")
    try:
        bins, built = copy_binaries(a, tmp)
        ref = Job(a, "reference", bins, os.path.join(tmp, "ckpt-reference"), raw)
        soak = Job(a, "soak", bins, os.path.join(tmp, "ckpt-soak"), raw)
        os.makedirs(ref.ckpt_dir)
        os.makedirs(soak.ckpt_dir)
        log("reference: the same job, uninterrupted")
        run_job(a, ref, [], a.timeout or a.iters * 2 + 600)
        ref_wall = ref.t_end - ref.t_start
        log(f"reference: {ref_wall:.1f} s")
        log(f"soak: {len(plan)} planned failures")
        run_job(a, soak, plan, a.timeout or 3 * ref_wall + 600 + 120 * len(plan),
                cadence_ms(parse_job(ref)[0]) / 1000)
        log(f"soak: {soak.t_end - soak.t_start:.1f} s")
    except BenchError as e:
        log(f"run_soak: FAILED: {e}")
        return 1
    except KeyboardInterrupt:
        log("run_soak: interrupted")
        return 130
    finally:
        kill_children()
        shutil.rmtree(tmp, ignore_errors=True)

    header = (f"{machine.describe(start_load)}{dirty()}; binaries: {built}; "
              f"{datetime.datetime.fromtimestamp(ref.t_start):%H:%M}–"
              f"{datetime.datetime.fromtimestamp(soak.t_end):%H:%M}")
    save_state(os.path.join(raw, "soak_run.json"), a, (ref, soak), header)
    return analyse_and_report(a, ref, soak, header)


def dirty():
    """The note for the header where the checkout's tracked files differ from its commit."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, cwd=ROOT).stdout
    except OSError:
        return ""
    return "; the checkout has uncommitted changes" if out.strip() else ""


def analyse_and_report(a, ref, soak, header):
    steps_ref, _, _ = parse_job(ref)
    steps, wlines, plines = parse_job(soak)
    cadence = cadence_ms(steps_ref)
    rows = analyse_failures(a, soak, steps, wlines, plines, cadence)
    windows = [r["window"] for r in rows]
    flat = {k: flatness(soak, windows, k, a.warmup_frac, job_ending(a, steps))
            for k in ("rss_kb", "fds")}
    flat_ref = {k: flatness(ref, [], k, a.warmup_frac, job_ending(a, steps_ref))
                for k in ("rss_kb", "fds")}
    weights = compare_weights(a, ref, soak)
    ckpts = checkpoints(plines)
    plotted = plot(os.path.join(a.out, "soak.png"), a, ref, soak, rows, steps_ref, steps, flat,
                   ckpts)
    if not plotted:
        log("no soak.png (matplotlib missing)")
    return report(a, ref, soak, rows, flat, flat_ref, weights, ckpts, cadence, header, plotted)


if __name__ == "__main__":
    sys.exit(main())
