#!/usr/bin/python3
"""hook_waits.py: what phub.torch's waiter thread pays per bucket for its waits, one call per
parameter (wait, the reference) against one per bucket (wait_many), measured in the same run.

A client of phubd (--cores 2, loopback, summation) with a bucket of --tensors float32 tensors
of --elements each: every step pushes all of them, then a waiter thread waits for their answers
while this thread either sleeps ("idle": the training thread is in C++, the GIL free) or runs
Python ("busy": any other thread of the process running Python meanwhile).
A wait releases the GIL; taking it back from a thread running Python costs up to the
interpreter's switch interval (5 ms), once per call. Reported: the waiter's time from the
pushes to its last answer, the median over --rounds x --steps, and wait / wait_many.

  bench/torch/hook_waits.py [--tensors 161] [--elements 256] [--rounds 5] [--steps 20]

Writes OUT/hook_waits.tsv and OUT/hook_waits.md (OUT: results/hook_waits). Takes phubd and the
phub package from --build (default build/).
"""
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from benchlib import machine, tables  # noqa: E402
from benchlib.cli import parser  # noqa: E402
from benchlib.log import log  # noqa: E402
from benchlib.procs import kill_children, start, wait_port_file  # noqa: E402


def one_step(client, grads, many, busy):
    """Pushes every tensor (last first, as backward does), waits on a waiter thread; returns
    the waiter's ms from the pushes to its last answer."""
    ids = list(reversed(range(len(grads))))
    for i in ids:
        client.push(i, grads[i])
    done = threading.Event()
    took = []
    start_s = time.perf_counter()

    def waiter():
        if many:
            client.wait_many(ids)
        else:
            for i in ids:
                client.wait(i)
        took.append((time.perf_counter() - start_s) * 1e3)
        done.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    if busy:
        x = 0
        while not done.is_set():  # Python bytecode, holding the GIL between switches
            for k in range(1000):
                x += k
    thread.join()
    return took[0]


def main():
    p = parser(__doc__)
    p.add_argument("--tensors", type=int, default=161, help="parameters in the bucket "
                   "(ResNet-50 has 161)")
    p.add_argument("--elements", type=int, default=256, help="float32 elements of each")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="timed steps per round and case")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=os.path.join(ROOT, "results", "hook_waits"))
    a = p.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import numpy as np
    import phub

    os.makedirs(a.out, exist_ok=True)
    start_load = machine.load_average()
    with tempfile.TemporaryDirectory(prefix="phub-hook-waits-") as d:
        port_file, log_path = os.path.join(d, "port"), os.path.join(d, "phubd.log")
        phubd = os.path.join(a.build, "phub", "server", "phubd")
        proc = start([phubd, "--port", "0", "--port-file", port_file, "--cores", "2"],
                     log_path)
        try:
            port = int(wait_port_file(port_file, proc, "phubd", log_path))
            tensors = [(f"t{i}", a.elements) for i in range(a.tensors)]
            weights = [np.zeros(a.elements, np.float32) for _ in range(a.tensors)]
            grads = [np.ones(a.elements, np.float32) for _ in range(a.tensors)]
            client = phub.connect(tensors, weights, address=f"127.0.0.1:{port}", rank=0,
                                  world_size=1, optimizer={"kind": "average"})
            client.init()
            cases = [(busy, many) for busy in (False, True) for many in (False, True)]
            times = {c: [] for c in cases}
            for _ in range(3):  # warm-up
                for busy, many in cases:
                    one_step(client, grads, many, busy)
            for r in range(a.rounds):  # interleaved: each round times every case
                for busy, many in cases:
                    times[(busy, many)] += [one_step(client, grads, many, busy)
                                            for _ in range(a.steps)]
                log(f"round {r + 1}/{a.rounds}")
            client.close()
        finally:
            kill_children()

    rows, lines = [], []
    for busy in (False, True):
        per = statistics.median(times[(busy, False)])
        many = statistics.median(times[(busy, True)])
        rows.append({"training_thread": "busy" if busy else "idle", "tensors": a.tensors,
                     "elements": a.elements, "wait_ms": per, "wait_many_ms": many,
                     "ratio": per / many})
        lines.append(["runs Python" if busy else "in C++ (GIL free)", str(a.tensors),
                      f"{per:.2f}", f"{many:.2f}", f"**{per / many:.2f}×**"])
    keys = ["training_thread", "tensors", "elements", "wait_ms", "wait_many_ms", "ratio"]
    tables.write_tsv(os.path.join(a.out, "hook_waits.tsv"), rows, keys, tables.short_float)
    md = tables.md_table(["training thread meanwhile", "tensors", "a wait per tensor ms",
                          "wait_many ms", "ratio"], lines, "lrrrr")
    text = tables.write_markdown(os.path.join(a.out, "hook_waits.md"),
                                 md + ["", f"({a.elements} floats each; medians of "
                                       f"{a.rounds} x {a.steps} steps; "
                                       f"{machine.describe(start_load)})"])
    print(text, end="")


if __name__ == "__main__":
    main()
