#!/usr/bin/env python3
"""sockblast.py: one bulk TCP stream with plain sockets, for checking a rack's shaping where
iperf3 is not installed (bench/topo/measure_shaping.py --tool python). Stdlib only.

    sockblast.py recv --bind IP --port P --seconds T [--omit 1]   # prints one JSON line
    sockblast.py send --host IP --port P --seconds T2             # T2 >= omit + T (+ slack)

`recv` listens on IP:P, accepts one connection and counts the bytes that arrive in the window
[first byte + omit, first byte + omit + T] (like iperf3 -O: the first second, TCP's slow start,
is left out), then prints {"bytes": ..., "seconds": ..., "bits_per_second": ...} and closes.
`send` connects (retrying for 10 s while the listener starts) and writes 1 MiB buffers until
T2 seconds have passed or the receiver closes. Goodput only: no retransmit or CPU counts.
"""

import argparse
import json
import socket
import sys
import time

BUF = 1 << 20


def recv(a):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((a.bind, a.port))
    srv.listen(1)
    srv.settimeout(30)
    conn, _ = srv.accept()
    conn.settimeout(30)
    buf = bytearray(BUF)
    first = None
    counted = 0
    start = end = None
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        now = time.monotonic()
        if first is None:
            first = now
            start, end = first + a.omit, first + a.omit + a.seconds
        if now >= end:
            break
        if now >= start:
            counted += n
    conn.close()
    srv.close()
    if first is None or time.monotonic() < end:
        print(json.dumps({"error": "the sender stopped before the window ended"}))
        return 1
    print(json.dumps({"bytes": counted, "seconds": a.seconds,
                      "bits_per_second": 8.0 * counted / a.seconds}))
    return 0


def send(a):
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((a.host, a.port), timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    conn.settimeout(30)
    data = b"\0" * BUF
    stop = time.monotonic() + a.seconds
    try:
        while time.monotonic() < stop:
            conn.sendall(data)
    except OSError:  # the receiver closed after its window: done
        pass
    conn.close()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--omit", type=float, default=1.0)
    s = sub.add_parser("send")
    s.add_argument("--host", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--seconds", type=float, required=True)
    a = ap.parse_args()
    return recv(a) if a.mode == "recv" else send(a)


if __name__ == "__main__":
    sys.exit(main())
