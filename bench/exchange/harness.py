"""Process handling and timing files shared by the `exchange` driver's systems: start children
in their own sessions (killed on every way out), wait for them with a timeout, read the
per-iteration TSVs every worker writes, and reduce them to per-iteration times by the one
timing rule (max over workers of t1 - t0)."""

import os
import signal
import subprocess
import sys
import time


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


def start(argv, log_path, env=None):
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=None if env is None else {**os.environ, **env})
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


def run_timeout(n, mib, rounds, limit_s=0.0):
    # Generous: 20 ms per MiB moved per worker per round (~50 MB/s), or 4x the link limit of a
    # round on an emulated rack, whichever is longer, plus start-up.
    return 60.0 + rounds * max(n * mib * 2 * 0.02, 4 * limit_s)


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
