#!/usr/bin/env python3
"""The emulated rack (deploy/netns/rack.sh) as seen by benchmark drivers. Stdlib only.

rack.sh writes a state file (default /run/phub-rack/topology, or $PHUB_RACK_STATE_DIR/topology)
of key=value lines: topology, workers, rate, rate_bits, hosts, ip.<host>, link_bits.<host>, ...
This module reads it and tells a driver where each host is and how to start a process there:

    import topology as topo
    topo.up("pbox", 4, "1gbit")              # rack.sh up --topology pbox --workers 4 --rate 1gbit
    topo.hosts()                             # ['ps', 'w0', 'w1', 'w2', 'w3']
    topo.ip_of("ps")                         # '10.77.0.100'
    subprocess.Popen(topo.wrap("w0", ["build/.../phub_exchange_worker", ...]))
    topo.ps_limit_s(100 << 20)               # link-bound lower limit of one PS iteration
    topo.ring_limit_s(100 << 20)             # ... of one ring allreduce (N, B from the rack)
    topo.down()

    topo.up("multips", 4, "1gbit", ps_hosts=2)  # ... --topology multips --ps-hosts 2
    topo.ps_hosts()                          # ['ps0', 'ps1'] (pbox/cloud: ['ps'])

Without a rack, `use_loopback(n)` selects the 'loopback' topology: every host is 127.0.0.1,
`wrap` returns argv unchanged and links are unlimited (limits are None).

Limits. For S bytes per worker per iteration, N workers, per-worker link rate B bits/s, the
*_limit_s functions give the time the links alone need (seconds), assuming full-duplex links
(a link carries B in each direction at once), a non-blocking switch, and no other cost. They
are lower bounds for a measured iteration; measured / limit says how close a system gets to
its network. Each function's docstring derives its formula.
"""

import os
import subprocess
import sys

STATE_DIR_ENV = "PHUB_RACK_STATE_DIR"
DEFAULT_STATE_DIR = "/run/phub-rack"
NS_PREFIX = "phub-"
RACK_SH = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "netns",
                 "rack.sh"))

# Launcher control traffic (MPI's PMIx) uses the unshaped management bridge in the root
# namespace; data uses the rack's shaped links (rack.sh).
MGMT_BRIDGE = NS_PREFIX + "mgmt"
DATA_SUBNET = "10.77.0.0/24"

_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}


def parse_rate(rate):
    """'1gbit' / '2.5gbit' / 100e6 -> bits per second (int). tc's SI units, as rack.sh."""
    if isinstance(rate, (int, float)):
        return int(rate)
    r = rate.strip().lower()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if r.endswith(unit):
            return int(round(float(r[: -len(unit)]) * _UNITS[unit]))
    raise ValueError("bad rate %r (examples: 100mbit, 1gbit)" % rate)


def state_file():
    return os.path.join(os.environ.get(STATE_DIR_ENV, DEFAULT_STATE_DIR), "topology")


def is_ps_host(host):
    """'ps' (pbox, cloud) or 'ps0', 'ps1', ... (multips): a host that runs a phubd only."""
    return host == "ps" or (host.startswith("ps") and host[2:].isdigit())


class Topology:
    """One rack: topology name, worker count, hosts, their IPs and link rates."""

    def __init__(self, topology, workers, hosts, ips, link_bits, rate_bits, raw=None):
        self.topology = topology
        self.workers = workers
        self.hosts = list(hosts)
        self.ips = dict(ips)
        self.link_bits = dict(link_bits)
        self.rate_bits = rate_bits
        self.raw = dict(raw or {})

    def ps_hosts(self):
        """The dedicated PS hosts, in order: ['ps'] on pbox and cloud, ['ps0', ..., 'ps{K-1}']
        on multips, [] on colocated (loopback: ['ps'] unless built with ps=False)."""
        return [h for h in self.hosts if is_ps_host(h)]

    def num_ps_hosts(self):
        """K, the number of PS hosts (multips; the others have 0 or 1)."""
        return len(self.ps_hosts())

    @classmethod
    def from_state(cls, path=None):
        path = path or state_file()
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            raise FileNotFoundError(
                "no rack state file %s: run deploy/netns/rack.sh up ... (or use_loopback(n))"
                % path) from None
        kv = {}
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                kv[k.strip()] = v.strip()
        hosts = kv.get("hosts", "").split()
        ips = {h: kv["ip." + h] for h in hosts}
        bits = {h: int(kv["link_bits." + h]) for h in hosts if "link_bits." + h in kv}
        return cls(kv["topology"], int(kv["workers"]), hosts, ips, bits,
                   int(kv["rate_bits"]) if "rate_bits" in kv else None, kv)

    @classmethod
    def loopback(cls, workers, ps=True, rate_bits=None):
        hosts = (["ps"] if ps else []) + ["w%d" % i for i in range(workers)]
        return cls("loopback", workers, hosts, {h: "127.0.0.1" for h in hosts},
                   {h: rate_bits for h in hosts} if rate_bits else {}, rate_bits)

    def check_host(self, host):
        if host not in self.hosts:
            raise KeyError("no host %r in the %s rack (hosts: %s)"
                           % (host, self.topology, " ".join(self.hosts)))

    def ip_of(self, host):
        self.check_host(host)
        return self.ips[host]

    def wrap(self, host, argv):
        self.check_host(host)
        if self.topology == "loopback":
            return list(argv)
        return ["ip", "netns", "exec", NS_PREFIX + host] + list(argv)

    def link_bits_per_s(self, host):
        self.check_host(host)
        return self.link_bits.get(host)

    def ps_nics(self):
        """The PS host's NICs (rack.sh --ps-nics K): their addresses, NIC 0 first ([ip.ps]
        without --ps-nics; [] without a PS host)."""
        if "ps" not in self.hosts:
            return []
        k = int(self.raw.get("ps_nics", "1"))
        return [self.raw.get("ip.ps.nic%d" % i, self.ips["ps"]) for i in range(k)]

    def ps_nic_bits(self):
        """Each PS NIC's link in bits/s (the whole PS link with one NIC)."""
        return int(self.raw.get("nic_bits.ps", self.link_bits.get("ps") or 0)) or None

    def ps_limit_s(self, size_bytes):
        """Link-bound time of one PS iteration on this rack (None on loopback)."""
        if self.rate_bits is None:
            return None
        n, b = self.workers, self.rate_bits
        if self.topology == "pbox":
            return pbox_ps_limit_s(size_bytes, n, b)
        if self.topology == "cloud":
            return cloud_ps_limit_s(size_bytes, n, b)
        if self.topology == "colocated":
            return colocated_ps_limit_s(size_bytes, n, b)
        if self.topology == "multips":
            return multips_ps_limit_s(size_bytes, n, self.num_ps_hosts(), b)
        return None

    def ring_limit_s(self, size_bytes):
        if self.rate_bits is None:
            return None
        if self.topology == "racks":
            return self.racks_limits_s(size_bytes)["ring"]
        return ring_limit_s(size_bytes, self.workers, self.rate_bits)

    # --- racks of racks (rack.sh --topology racks) ---
    def num_racks(self):
        return int(self.raw.get("racks", 1))

    def uplink_bits(self):
        return int(self.raw["uplink_bits"]) if "uplink_bits" in self.raw else None

    def rack_of(self, host):
        self.check_host(host)
        return int(self.raw.get("rack." + host, 0))

    def racks_limits_s(self, size_bytes):
        """racks_limits_s() for this rack's R, n, B, U."""
        r = self.num_racks()
        return racks_limits_s(size_bytes, r, self.workers // r, self.rate_bits,
                              self.uplink_bits(), self.link_bits.get("ps0"))

    def racks_file(self, port):
        """The racks file (proto/topology.proto) for phubd and the workers: rack r's PBox
        ps<r> at its address and `port`, its workers by host name."""
        lines = []
        for r in range(self.num_racks()):
            pbox = "ps%d" % r
            hosts = " ".join('host: "%s"' % h for h in self.hosts
                             if not is_ps_host(h) and self.rack_of(h) == r)
            lines.append('rack { name: "r%d" pbox: "%s:%d" %s }'
                         % (r, self.ip_of(pbox), port, hosts))
        return "\n".join(lines) + "\n"


# --- physical limits --------------------------------------------------------------------------
# n and bits_per_s default to the current rack's worker count and per-worker rate B.

def _nb(n, bits_per_s):
    if n is None or bits_per_s is None:
        t = current()
        n = t.workers if n is None else n
        bits_per_s = t.rate_bits if bits_per_s is None else bits_per_s
        if bits_per_s is None:
            raise ValueError("no link rate: the %s topology has unlimited links" % t.topology)
    return n, bits_per_s


def pbox_ps_limit_s(size_bytes, n=None, bits_per_s=None):
    """PS on a balanced PBox: S / B.

    Every worker pushes its S-byte gradient up its link and pulls S bytes of weights down the
    same link; full duplex, so each worker link needs S/B (in each direction, concurrently).
    The PS link has N·B and carries N·S in each direction: N·S / (N·B) = S/B. The PS link is
    not the bottleneck; the iteration is bounded by one worker link's S/B. (Pipelining by
    chunks lets the pull overlap the push, so the two directions do not add up.)
    """
    n, bits_per_s = _nb(n, bits_per_s)
    return 8.0 * size_bytes / bits_per_s


def cloud_ps_limit_s(size_bytes, n=None, bits_per_s=None):
    """PS on an ordinary host (link B): N·S / B.

    The PS receives N·S bytes of gradients through its single link of B (and sends N·S bytes of
    weights back, concurrently in the other direction): N·S/B. The worker links (S/B each) are
    N times less loaded; the PS link is the bottleneck.
    """
    n, bits_per_s = _nb(n, bits_per_s)
    return 8.0 * n * size_bytes / bits_per_s


def ring_limit_s(size_bytes, n=None, bits_per_s=None):
    """Ring allreduce over N workers with links B: 2(N−1)/N · S / B.

    Reduce-scatter takes N−1 steps, each sending one S/N block to the next worker; allgather
    takes another N−1 steps of S/N. So every worker sends 2(N−1)·S/N bytes out of its link (and
    receives as many, concurrently, from its predecessor): 2(N−1)/N · S/B. All links are equally
    loaded; no switch port carries more than one link's worth.
    """
    n, bits_per_s = _nb(n, bits_per_s)
    if n <= 1:
        return 0.0
    return 8.0 * 2.0 * (n - 1) / n * size_bytes / bits_per_s


def colocated_ps_limit_s(size_bytes, n=None, bits_per_s=None):
    """Colocated PS (every worker host also runs the shard owning S/N): 2(N−1)/N · S / B.

    A host's link carries, outwards: its worker's pushes to the N−1 remote shards, (N−1)·S/N
    bytes (the local shard's S/N never leaves the host), plus its shard's answers (S/N of
    fresh weights) to the N−1 remote workers, (N−1)·S/N bytes: 2(N−1)/N · S in all, and the
    same inwards (remote workers' pushes to this shard plus remote shards' answers to this
    worker). So 2(N−1)/N · S/B, the same as the ring: both move the minimum bytes per link.
    """
    n, bits_per_s = _nb(n, bits_per_s)
    if n <= 1:
        return 0.0
    return 8.0 * 2.0 * (n - 1) / n * size_bytes / bits_per_s


def multips_ps_limit_s(size_bytes, n=None, k=None, bits_per_s=None):
    """PS spread over K dedicated hosts of link B each (BytePS's setup): max(S/B, N·S/(K·B)).

    The model is split into K equal shares, one per PS host (phub/keys/server_placement.h).
    A worker pushes its whole S-byte gradient, S/K to each PS host, and pulls S bytes of
    weights back, S/K from each: its link carries S in each direction, S/B. A PS host owns
    S/K bytes and receives that share's gradient from each of the N workers, N·S/K bytes in,
    and sends the fresh share to each of them, N·S/K bytes out: N·S/(K·B). Full duplex, so in
    and out do not add up on any link, and the slowest link bounds the iteration:
    max(S/B, N·S/(K·B)). With K >= N the workers' links are the bound (S/B, the PBox's limit,
    with K ordinary boxes instead of one N·B box); with K = 1 it is the cloud PS's N·S/B.
    Against the ring's 2(N−1)/N·S/B: the PS moves S instead of 2(N−1)/N·S over a worker's
    link, so with K = N it can be 2(N−1)/N faster (1.5× at N = 4, 1.75× at N = 8), paid for
    with K extra hosts; with K = N/2 its limit is 2·S/B, above the ring's.

    Shares are whole partitions (the workers' --partition-bytes): when K does not divide the
    number of partitions the largest share is ⌈P/K⌉ of P, a little above S/K; the drivers
    choose partitions that divide evenly (bench/exchange/systems.py).
    """
    n, bits_per_s = _nb(n, bits_per_s)
    if k is None:
        k = current().num_ps_hosts()
    if k < 1:
        raise ValueError("multips needs at least one PS host, got K = %r" % k)
    return 8.0 * size_bytes / bits_per_s * max(1.0, float(n) / k)


def racks_limits_s(size_bytes, racks, per_rack, bits_per_s, uplink_bits, pbox_bits=None):
    """Racks of racks: R racks of n workers with links B, each rack's PBox with a link of P
    (default n·B + U: a NIC-worth per worker and one for its uplink; rack.sh --pbox-rate), each
    rack's uplink to the core of U (oversubscription n·B/U). The link-bound time of one
    iteration of each scheme, keyed by name. Full duplex: each direction of a link is counted
    alone; the slowest link bounds the iteration.

    hierarchical  max(S/B, 2(R−1)/R · S/U, (n + 2(R−1)/R) · S/P). A worker's link carries S
                  each way. Its rack's PBox sends the rack's sum of the (R−1)/R of the chunks
                  homed elsewhere up the uplink, and the weights of its own S/R to each of the
                  R−1 other PBoxes: 2(R−1)/R·S out (and as much in), on the uplink and on the
                  PBox's own link beside its rack's n·S. With P = n·B exactly (no room for the
                  core) the PBox link binds at (n + 2(R−1)/R)/n · S/B: 1.25 S/B at n = 4, R = 2.
    flat_ps       max(S/B, R·n·S/P, (R−1)·n·S/U): one PBox serves all R·n workers, and the
                  (R−1)·n remote workers' pushes come in over its rack's uplink, their weights
                  go out over it. At R = 2: n·S/U.
    keys_spread   max(S/B, n·S/P, 2·n·(R−1)/R · S/U): the model spread over the R PBoxes (each
                  owns S/R). A rack's uplink carries out its n workers' pushes to the R−1
                  remote PBoxes, n(R−1)/R·S, and its PBox's weights to the (R−1)·n remote
                  workers, as much again (and the same in). (Counting the pushes alone gives
                  n(R−1)/R·S/U, half of it.)
    ring          2(N−1)/N · S / min(B, U) with N = R·n in rack order: each uplink direction
                  carries one ring flow (the step that leaves the rack), at most min(B, U).
    """
    n, r = per_rack, racks
    if pbox_bits is None:
        pbox_bits = n * bits_per_s + uplink_bits
    bits = 8.0 * size_bytes
    s_b, s_u, s_p = bits / bits_per_s, bits / uplink_bits, bits / pbox_bits
    cross = 2.0 * (r - 1) / r
    big_n = r * n
    return {
        "hierarchical": max(s_b, cross * s_u, (n + cross) * s_p),
        "flat_ps": max(s_b, big_n * s_p, (r - 1) * n * s_u),
        "keys_spread": max(s_b, n * s_p, n * cross * s_u),
        "ring": 2.0 * (big_n - 1) / big_n * bits / min(bits_per_s, uplink_bits),
    }


def limits(size_bytes, n, bits_per_s, k=None):
    """All four limits (seconds) for one S, N, B, keyed by name; with K PS hosts given, also
    the multips PS limit ("ps_multips")."""
    out = {
        "ps_pbox": pbox_ps_limit_s(size_bytes, n, bits_per_s),
        "ps_cloud": cloud_ps_limit_s(size_bytes, n, bits_per_s),
        "ring": ring_limit_s(size_bytes, n, bits_per_s),
        "ps_colocated": colocated_ps_limit_s(size_bytes, n, bits_per_s),
    }
    if k is not None:
        out["ps_multips"] = multips_ps_limit_s(size_bytes, n, k, bits_per_s)
    return out


# --- module-level API on the current rack ------------------------------------------------------

_current = None


def current():
    """The topology in use: the one set by use_loopback(), else the state file (re-read)."""
    if _current is not None:
        return _current
    return Topology.from_state()


def use_loopback(workers, ps=True, rate_bits=None):
    """Select the 'loopback' topology (no rack; every host is 127.0.0.1)."""
    global _current
    _current = Topology.loopback(workers, ps, rate_bits)
    return _current


def use_state():
    """Go back to reading the rack's state file."""
    global _current
    _current = None


def hosts():
    return current().hosts


def ip_of(host):
    return current().ip_of(host)


def wrap(host, argv):
    return current().wrap(host, argv)


def link_bits_per_s(host):
    return current().link_bits_per_s(host)


def ps_hosts():
    return current().ps_hosts()


def ps_limit_s(size_bytes):
    """The current rack's PS limit: pbox, cloud, colocated or multips formula (None on
    loopback)."""
    return current().ps_limit_s(size_bytes)


def ps_nics():
    return current().ps_nics()


def up(topology, n, rate="1gbit", delay=None, qdisc=None, extra=None, ps_hosts=None,
       racks=None, uplink=None):
    """rack.sh up --topology T --workers N --rate R [--ps-hosts K] [--racks R --uplink U]
    [...]; returns the new Topology. ps_hosts: K, multips only (and required there); racks
    and uplink: racks only (and required there)."""
    argv = [RACK_SH, "up", "--topology", topology, "--workers", str(n),
            "--rate", rate if isinstance(rate, str) else "%dbit" % int(rate)]
    if ps_hosts is not None:
        argv += ["--ps-hosts", str(ps_hosts)]
    if racks is not None:
        argv += ["--racks", str(racks), "--uplink", uplink]
    if delay is not None:
        argv += ["--delay", delay]
    if qdisc is not None:
        argv += ["--qdisc", qdisc]
    argv += list(extra or [])
    subprocess.run(argv, check=True)
    use_state()
    return current()


def down():
    """rack.sh down (succeeds when nothing is up)."""
    subprocess.run([RACK_SH, "down"], check=True)


def _self_check():
    mib = 1 << 20
    size, bits = 100 * mib, 10**9
    print("Link-bound time per iteration, S = 100 MiB, B = 1 Gbit/s (seconds):")
    print("%3s  %9s  %9s  %9s  %12s" % ("N", "PS pbox", "PS cloud", "ring", "PS colocated"))
    for n in (2, 4, 8):
        lim = limits(size, n, bits)
        print("%3d  %9.3f  %9.3f  %9.3f  %12.3f"
              % (n, lim["ps_pbox"], lim["ps_cloud"], lim["ring"], lim["ps_colocated"]))
        s_over_b = 8.0 * size / bits
        assert abs(lim["ps_pbox"] - s_over_b) < 1e-9
        assert abs(lim["ps_cloud"] - n * s_over_b) < 1e-9
        assert abs(lim["ring"] - 2.0 * (n - 1) / n * s_over_b) < 1e-9
        assert abs(lim["ps_colocated"] - lim["ring"]) < 1e-9

    assert parse_rate("1gbit") == 10**9 and parse_rate("2.5gbit") == 2500000000
    assert parse_rate("100mbit") == 10**8
    lo = Topology.loopback(2)
    assert lo.hosts == ["ps", "w0", "w1"] and lo.ip_of("w1") == "127.0.0.1"
    assert lo.wrap("w0", ["true"]) == ["true"] and lo.ps_limit_s(size) is None
    rack = Topology("pbox", 2, ["ps", "w0", "w1"],
                    {"ps": "10.77.0.100", "w0": "10.77.0.10", "w1": "10.77.0.11"},
                    {"ps": 2 * bits, "w0": bits, "w1": bits}, bits)
    assert rack.wrap("ps", ["x", "-y"]) == ["ip", "netns", "exec", "phub-ps", "x", "-y"]
    assert rack.link_bits_per_s("ps") == 2 * bits
    assert rack.ps_hosts() == ["ps"] and lo.ps_hosts() == ["ps"]
    assert Topology.loopback(2, ps=False).ps_hosts() == []

    print("\nSeveral PS hosts (multips), K PS hosts of link B each (seconds; PS/ring = the\n"
          "PS's best possible speed-up over the ring):")
    print("%3s %3s  %9s  %9s  %7s" % ("N", "K", "PS", "ring", "ring/PS"))
    for n in (4, 8):
        for k in (1, n // 2, n, 2 * n):
            lim = limits(size, n, bits, k)
            print("%3d %3d  %9.3f  %9.3f  %6.2f×"
                  % (n, k, lim["ps_multips"], lim["ring"], lim["ring"] / lim["ps_multips"]))
            s_over_b = 8.0 * size / bits
            assert abs(lim["ps_multips"] - max(s_over_b, n * s_over_b / k)) < 1e-9
    # K = N: the PBox's S/B; K = 1: the cloud PS's N·S/B; K = N/2: 2·S/B.
    assert abs(multips_ps_limit_s(size, 4, 4, bits) - pbox_ps_limit_s(size, 4, bits)) < 1e-9
    assert abs(multips_ps_limit_s(size, 4, 1, bits) - cloud_ps_limit_s(size, 4, bits)) < 1e-9
    assert abs(multips_ps_limit_s(size, 8, 4, bits) - 2 * 8.0 * size / bits) < 1e-9
    # The bar of issue 19: at K = N = 4 the PS may beat the ring by at most 2(N-1)/N = 1.5x.
    assert abs(ring_limit_s(size, 4, bits) / multips_ps_limit_s(size, 4, 4, bits) - 1.5) < 1e-9
    try:
        multips_ps_limit_s(size, 4, 0, bits)
    except ValueError:
        pass
    else:
        raise AssertionError("K = 0 accepted")
    hosts = ["ps0", "ps1", "w0", "w1", "w2", "w3"]
    mp = Topology("multips", 4, hosts, {h: "10.77.0.%d" % i for i, h in enumerate(hosts)},
                  {h: bits for h in hosts}, bits)
    assert mp.ps_hosts() == ["ps0", "ps1"] and mp.num_ps_hosts() == 2
    assert mp.wrap("ps1", ["x"]) == ["ip", "netns", "exec", "phub-ps1", "x"]
    assert abs(mp.ps_limit_s(size) - 2 * 8.0 * size / bits) < 1e-9
    assert abs(mp.ring_limit_s(size) - ring_limit_s(size, 4, bits)) < 1e-9
    assert not is_ps_host("w0") and not is_ps_host("psx") and is_ps_host("ps12")

    print("\nRacks of racks, R = 2 racks of n = 4, B = 1 Gbit/s (seconds):")
    print("%8s  %12s  %8s  %11s  %6s" % ("U", "hierarchical", "flat PS", "keys spread", "ring"))
    for u in (10**9, 2 * 10**9):
        lim = racks_limits_s(size, 2, 4, bits, u)
        print("%6.0fG  %12.3f  %8.3f  %11.3f  %6.3f" % (u / 1e9, lim["hierarchical"],
              lim["flat_ps"], lim["keys_spread"], lim["ring"]))
    s_b = 8.0 * size / bits
    lim = racks_limits_s(size, 2, 4, bits, bits, 4 * bits)  # a PBox of n·B only
    assert abs(lim["hierarchical"] - 1.25 * s_b) < 1e-9
    lim = racks_limits_s(size, 2, 4, bits, bits)  # 4:1, a PBox of n·B + U
    assert abs(lim["hierarchical"] - s_b) < 1e-9 and abs(lim["flat_ps"] - 4 * s_b) < 1e-9
    assert abs(lim["keys_spread"] - 4 * s_b) < 1e-9 and abs(lim["ring"] - 1.75 * s_b) < 1e-9
    lim = racks_limits_s(size, 3, 2, bits, bits)
    assert abs(lim["hierarchical"] - 4.0 / 3 * s_b) < 1e-9
    assert abs(lim["flat_ps"] - 4 * s_b) < 1e-9  # ·n·S/U

    try:
        t = Topology.from_state()
    except FileNotFoundError:
        print("\nNo rack is up (%s absent)." % state_file())
    else:
        print("\nRack up: %s, %d workers, %d PS host(s), B = %s bit/s"
              % (t.topology, t.workers, t.num_ps_hosts(), t.rate_bits))
        for h in t.hosts:
            print("  %-4s %-12s link %s bit/s" % (h, t.ip_of(h), t.link_bits_per_s(h)))
        lim = t.ps_limit_s(size)
        if lim is not None:
            print("  PS limit at S = 100 MiB: %.3f s; ring: %.3f s" % (lim, t.ring_limit_s(size)))
    print("self-check OK")
    return 0


if __name__ == "__main__":
    sys.exit(_self_check())
