"""Child processes of a benchmark: daemons, workers, launchers.

Every child starts in a session of its own and is remembered, so kill_children() can end it and
everything it started (mpirun's ranks, a worker's helpers) on every way out of a driver: a
finished run, a failed one, Ctrl-C. Waits have deadlines and a failure names the process and
shows the end of its log. Not thread-safe: one driver thread starts and kills its children.
"""

import os
import signal
import subprocess
import time

from benchlib import BenchError

_children = []  # every Popen started and not yet killed, so they can all be killed on the way out


def start(argv, log_path, env=None):
    """Starts argv with stdout and stderr to log_path, stdin closed, in a new session; env adds
    to (does not replace) this process's environment. Does not wait."""
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=None if env is None else {**os.environ, **env})
    _children.append(proc)
    return proc


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
    """Ends every child start() began and all they started; returns when they are reaped (or
    after a few seconds' grace). Harmless when none is left."""
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


def tail(path, lines=15):
    """The last lines of a log, for an error message."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return "(no log)"


def wait_port_file(path, proc, name, log_path, timeout=20.0):
    """The text a server writes to its --port-file once it listens. Raises BenchError if `proc`
    exits first or nothing is written within `timeout` seconds."""
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
    """procs: [(name, Popen, log_path)]. Returns when all exited 0; raises BenchError on the
    first failure or when `timeout` seconds pass. Kills nothing: the caller's kill_children()
    does."""
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


def run_checked(cmd, env=None, timeout=3600):
    """Runs cmd to its end and returns its stdout; raises BenchError with its output if it
    exits non-zero (subprocess.TimeoutExpired after `timeout` seconds). For short tools whose
    output is the result, not for daemons (start() is)."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} failed (exit {p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout
