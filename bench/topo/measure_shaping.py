#!/usr/bin/env python3
"""Measure what the emulated rack's links deliver to TCP (iperf3), per shaping choice.

For each topology in --topologies, brings the rack up (deploy/netns/rack.sh) with the given
--qdisc/--burst/--queue, then runs with iperf3 (-J, first second omitted):
  1 stream w0->w1      one TCP stream between two worker hosts (target B)
  N streams wi->ps     every worker sends to the PS at once (target: PS link, N*B or B)
  N streams ps->wi     the PS sends to every worker at once (iperf3 -R; same target)
  multips (--ps-hosts K): N streams wi->ps(i mod K) and back, target min(N, K)*B (every PS
  host that gets a stream has one link of B; with N < K each worker's B is the bound)
and prints a markdown table: measured sum (iperf3 goodput), % of target, the same on the wire
(goodput x 1514/1448: a full 1500-byte-MTU segment carries 1448 payload bytes after IP, TCP and
timestamp headers, and the shaper also counts the 14-byte Ethernet header), retransmits,
sender/receiver CPU %.
--tool python measures the same streams without iperf3 (bench/topo/sockblast.py: plain
sockets, goodput only; retransmits and CPU are printed as -); the default is iperf3 where it is
installed, else python.
The rack is taken down at the end (also on failure). Needs root, and iperf3 for --tool iperf3
(apt-get install -y iperf3).

    bench/topo/measure_shaping.py --workers 2 --rate 1gbit --qdisc htb
    bench/topo/measure_shaping.py --workers 4 --qdisc tbf --burst 65536 --topologies pbox
    bench/topo/measure_shaping.py --workers 4 --topologies multips --ps-hosts 2 --tool python
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import topology as topo  # noqa: E402
from benchlib.tables import md_row, md_table  # noqa: E402

BASE_PORT = 5201
SOCKBLAST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sockblast.py")
WIRE_PER_GOODPUT = 1514.0 / 1448.0
HEAD = ["cc", "qdisc", "burst", "topology", "N", "B", "traffic", "target", "measured",
        "% target", "wire %", "retr", "snd CPU %", "rcv CPU %"]


def wait_listening(t, pairs, timeout=10.0):
    """Poll `ss -ltn` in each server's namespace until its iperf3 port listens."""
    deadline = time.time() + timeout
    for i, (_, srv) in enumerate(pairs):
        want = "%s:%d" % (t.ip_of(srv), BASE_PORT + i)
        while want not in subprocess.run(t.wrap(srv, ["ss", "-ltnH"]), capture_output=True,
                                         text=True).stdout:
            if time.time() > deadline:
                raise RuntimeError("iperf3 server %s did not start" % want)
            time.sleep(0.05)


def run_streams(pairs, seconds, reverse=False, cc=None):
    """pairs: [(client_host, server_host)], one iperf3 stream each, all at once.
    Returns (sum bits/s received, retransmits, [sender cpu %], [receiver cpu %])."""
    t = topo.current()
    servers, clients = [], []
    try:
        for i, (_, srv) in enumerate(pairs):
            servers.append(subprocess.Popen(
                t.wrap(srv, ["iperf3", "-s", "-1", "-p", str(BASE_PORT + i),
                             "-B", t.ip_of(srv)]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_listening(t, pairs)
        for i, (cli, srv) in enumerate(pairs):
            argv = ["iperf3", "-J", "-c", t.ip_of(srv), "-p", str(BASE_PORT + i),
                    "-t", str(seconds), "-O", "1"]
            if reverse:
                argv.append("-R")
            if cc:
                argv += ["-C", cc]
            clients.append(subprocess.Popen(t.wrap(cli, argv), stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True))
        total, retr, snd_cpu, rcv_cpu = 0.0, 0, [], []
        for c in clients:
            out, err = c.communicate(timeout=seconds + 30)
            try:
                res = json.loads(out)
            except ValueError:
                raise RuntimeError("iperf3 client printed no JSON (rc %s): %s"
                                   % (c.returncode, (err or out).strip()[-500:])) from None
            if "error" in res:
                raise RuntimeError("iperf3: %s" % res["error"])
            end = res["end"]
            total += end["sum_received"]["bits_per_second"]
            retr += end["sum_sent"].get("retransmits", 0)
            cpu = end.get("cpu_utilization_percent", {})
            # host = the client process; with -R the client is the receiver.
            (rcv_cpu if reverse else snd_cpu).append(cpu.get("host_total", 0.0))
            (snd_cpu if reverse else rcv_cpu).append(cpu.get("remote_total", 0.0))
        return total, retr, snd_cpu, rcv_cpu
    finally:
        for p in clients + servers:
            if p.poll() is None:
                p.kill()
            p.wait()


def run_streams_python(pairs, seconds, reverse=False):
    """The same streams as run_streams with plain sockets (sockblast.py) instead of iperf3:
    the receiver (the server, or with reverse the client) counts the goodput, the first second
    left out. Returns (sum bits/s received, None, [], [])."""
    t = topo.current()
    receivers, senders = [], []
    try:
        for i, (cli, srv) in enumerate(pairs):
            rcv, snd = (cli, srv) if reverse else (srv, cli)
            receivers.append(subprocess.Popen(
                t.wrap(rcv, [sys.executable, SOCKBLAST, "recv", "--bind", t.ip_of(rcv),
                             "--port", str(BASE_PORT + i), "--seconds", str(seconds)]),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            senders.append(subprocess.Popen(
                t.wrap(snd, [sys.executable, SOCKBLAST, "send", "--host", t.ip_of(rcv),
                             "--port", str(BASE_PORT + i), "--seconds", str(seconds + 3)]),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        total = 0.0
        for r in receivers:
            out, err = r.communicate(timeout=seconds + 30)
            try:
                res = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise RuntimeError("sockblast receiver printed no JSON (rc %s): %s"
                                   % (r.returncode, (err or out).strip()[-500:])) from None
            if "error" in res:
                raise RuntimeError("sockblast: %s" % res["error"])
            total += res["bits_per_second"]
        return total, None, [], []
    finally:
        for p in senders + receivers:
            if p.poll() is None:
                p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--qdisc", default="htb", help="htb, tbf, tbf-nogso or none (rack.sh)")
    ap.add_argument("--burst", help="bytes (rack.sh --burst); default rack.sh's")
    ap.add_argument("--queue", help="bytes (rack.sh --queue); default rack.sh's")
    ap.add_argument("--topologies", default="pbox,cloud",
                    help="comma list of pbox, cloud, colocated, multips (default: pbox,cloud)")
    ap.add_argument("--ps-hosts", type=int, default=None,
                    help="multips: K PS hosts (default: --workers)")
    ap.add_argument("--tool", choices=["iperf3", "python"], default=None,
                    help="what moves the bytes (default: iperf3 when installed, else python)")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--cc", help="TCP congestion control of the test sockets (iperf3 -C, "
                    "e.g. cubic; default: the kernel's default)")
    ap.add_argument("--header", action="store_true", help="print the table header")
    a = ap.parse_args()
    if a.tool is None:
        a.tool = "iperf3" if shutil.which("iperf3") else "python"
    if a.tool == "python" and a.cc:
        ap.error("--cc needs --tool iperf3")

    extra = []
    if a.burst:
        extra += ["--burst", a.burst]
    if a.queue:
        extra += ["--queue", a.queue]
    b = topo.parse_rate(a.rate)
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        cc_default = f.read().strip()
    n = a.workers
    if a.header:
        print("\n".join(md_table(HEAD, [])))
    try:
        for tname in a.topologies.split(","):
            k = (a.ps_hosts or n) if tname == "multips" else None
            t = topo.up(tname, n, a.rate, qdisc=a.qdisc, extra=extra, ps_hosts=k)
            cases = []
            if n >= 2:
                cases.append(("1 stream w0->w1", [("w0", "w1")], False, b))
            if tname in ("pbox", "cloud"):
                ps_bits = t.link_bits_per_s("ps")
                workers = ["w%d" % i for i in range(n)]
                cases.append(("%d streams wi->ps" % n, [(w, "ps") for w in workers], False,
                              ps_bits))
                cases.append(("%d streams ps->wi" % n, [(w, "ps") for w in workers], True,
                              ps_bits))
            if tname == "multips":
                # Worker i talks to PS host i mod K: every PS host gets a stream when N >= K.
                ps = t.ps_hosts()
                pairs = [("w%d" % i, ps[i % len(ps)]) for i in range(n)]
                target = sum(min(t.link_bits_per_s(p), sum(
                    t.link_bits_per_s(w) for w, q in pairs if q == p)) for p in ps)
                cases.append(("%d streams wi->ps(i mod %d)" % (n, len(ps)), pairs, False, target))
                cases.append(("%d streams ps(i mod %d)->wi" % (n, len(ps)), pairs, True, target))
            for label, pairs, rev, target in cases:
                if a.tool == "iperf3":
                    got, retr, scpu, rcpu = run_streams(pairs, a.seconds, rev, a.cc)
                else:
                    got, retr, scpu, rcpu = run_streams_python(pairs, a.seconds, rev)
                print(md_row([a.cc or cc_default, a.qdisc, a.burst or "auto", tname, str(n),
                              a.rate, label, "%.2f Gbit/s" % (target / 1e9),
                              "%.3f Gbit/s" % (got / 1e9), "%.1f %%" % (100.0 * got / target),
                              "%.1f %%" % (100.0 * got * WIRE_PER_GOODPUT / target),
                              "-" if retr is None else str(retr),
                              "+".join("%.0f" % c for c in scpu) or "-",
                              "+".join("%.0f" % c for c in rcpu) or "-"]), flush=True)
    finally:
        topo.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
