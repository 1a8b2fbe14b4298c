#!/usr/bin/env python3
"""Does TCP itself notice a peer that is stopped (SIGSTOP) or hung? Why phubd uses heartbeats.

A loopback TCP connection to a child process, SO_KEEPALIVE (idle 1 s, interval 1 s, 3 probes)
and TCP_USER_TIMEOUT 3000 ms on our side; the child is SIGSTOPped, and we watch for an error
for --watch seconds, twice: with our side idle (a worker waiting for weights, phubd waiting
for a push) and with our side sending (phubd sending weights). docs/design.md "Recovery" quotes
the result: the stopped process's kernel still answers keepalive probes, so an idle connection
never fails; only data in flight to it makes TCP_USER_TIMEOUT fire. Heartbeats on the control
connection catch both.
"""
import argparse
import os
import select
import signal
import socket
import time


def watch(sending: bool, seconds: float) -> str:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    pid = os.fork()
    if pid == 0:
        socket.create_connection(srv.getsockname())
        time.sleep(3600)
        os._exit(0)
    conn, _ = srv.accept()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 3000)
    conn.setblocking(False)
    os.kill(pid, signal.SIGSTOP)
    start, outcome = time.time(), None
    try:
        while outcome is None and time.time() - start < seconds:
            if sending:
                try:
                    conn.send(b"x" * 65536)
                except BlockingIOError:
                    pass
            if select.select([conn], [], [], 0.2)[0] and conn.recv(1) == b"":
                outcome = "EOF"
    except OSError as e:
        outcome = e.strerror
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    elapsed = time.time() - start
    return f"error after {elapsed:.1f} s: {outcome}" if outcome else f"no error in {seconds:.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watch", type=float, default=15.0, help="seconds to wait per case")
    args = parser.parse_args()
    print(f"kernel {os.uname().release}; keepalive idle 1 s, interval 1 s, 3 probes; "
          "TCP_USER_TIMEOUT 3000 ms; the peer SIGSTOPped")
    print("| our side | what TCP reports |\n|---|---|")
    for sending in (False, True):
        print(f"| {'sending' if sending else 'idle'} | {watch(sending, args.watch)} |")


if __name__ == "__main__":
    main()
