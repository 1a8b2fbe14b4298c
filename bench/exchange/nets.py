"""Where the `exchange` driver's processes run: loopback (every host is 127.0.0.1) or an
emulated rack (deploy/netns/rack.sh; addresses, command wrapping and physical limits from
bench/topo/topology.py). A Net answers: a host's address, how to run a command on a host, the
physical limit of one iteration of a system, and how to start MPI ranks on the hosts."""

import os
import re
import shutil

try:
    import topology  # bench/topo, on sys.path (run_exchange.py puts it there)
except ImportError:  # only the racks need it
    topology = None

HERE = os.path.dirname(os.path.abspath(__file__))


def rack_problem(otherwise="--topologies loopback"):
    """Why racks cannot be built here, or None. `otherwise`: the caller's way to do without
    one, named in the advice (None: the caller falls back by itself)."""
    if os.geteuid() != 0:
        return ("emulated racks need root (ip netns, tc): run with sudo"
                + (f", or {otherwise}" if otherwise else ""))
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "`ip` and `tc` are missing: apt-get install iproute2"
    return None


class LoopbackNet:
    name = "loopback"

    def __init__(self, n):
        self.n = n

    def describe(self):
        return "every host is 127.0.0.1; no link limit (raw TCP is the reference)"

    def ip(self, host):
        return "127.0.0.1"

    def ps_hosts(self):
        return ["ps"]

    def wrap(self, host, argv):
        return list(argv)

    def phubd_access(self):
        """phubd's flags for who may join: on loopback its protected default serves the workers."""
        return []

    def limit_s(self, system, n, size_bytes):
        return None

    def mpi_launch(self, run_dir):
        # (mpirun arguments, environment, command before each rank's binary)
        return ["--mca", "btl_tcp_if_include", "lo"], None, []

    def close(self):
        pass


class RackNet:
    """A rack built by rack.sh for one (topology, N) (multips: (topology, N, K)); close()
    tears it down."""

    def __init__(self, name, n, rate, ps_hosts=None, racks=None, uplink=None, pbox_rate=None,
                 extra=None):
        if topology is None:
            raise RuntimeError("bench/topo/topology.py is missing")
        self.name = name
        self.n = n
        self.rate = rate
        self.k = ps_hosts
        self.topo = topology.up(name, n, rate, ps_hosts=ps_hosts, racks=racks, uplink=uplink,
                                extra=(["--pbox-rate", pbox_rate] if pbox_rate else [])
                                + list(extra or []))

    def describe(self):
        links = ", ".join(f"{h} {self.topo.link_bits_per_s(h) / 1e9:g} Gbit/s"
                          for h in self.topo.hosts)
        return f"rack.sh {self.name}: {links}"

    def ip(self, host):
        return self.topo.ip_of(host)

    def ps_hosts(self):
        """The dedicated PS hosts: ["ps"] (pbox, cloud), ["ps0", ...] (multips), none
        (colocated)."""
        return self.topo.ps_hosts()

    def wrap(self, host, argv):
        return self.topo.wrap(host, argv)

    def phubd_access(self):
        """The workers reach phubd from other namespaces, so not over loopback: without a token
        phubd would refuse them (its protected mode). The rack's namespaces and veths exist only
        for this run and reach nothing else, so the run lets them in without one."""
        return ["--allow-remote-without-token"]

    def limit_s(self, system, n, size_bytes):
        if self.name == "racks":
            return racks_limit_s(self.topo, system, size_bytes)
        return limit_s(self.name, system, n, size_bytes, self.rate, self.k)

    def racks_file(self, port):
        """Racks of racks: the racks file naming every rack's PBox at `port` (ps-racks)."""
        return self.topo.racks_file(port)

    def mpi_launch(self, run_dir):
        # Each rank enters its host's namespace (rank r on host w<r>); MPI's data goes over the
        # rack's shaped links. mpirun's PMIx server stays in this (the root) namespace, where
        # the ranks cannot reach its 127.0.0.1: it listens on the rack's unshaped management
        # bridge instead, which every host also has a leg on (rack.sh).
        wrapper = os.path.join(run_dir, "in_host.sh")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec ip netns exec "phub-w${OMPI_COMM_WORLD_RANK}" "$@"\n')
        os.chmod(wrapper, 0o755)
        mgmt = topology.MGMT_BRIDGE
        args = ["--mca", "btl_tcp_if_include", topology.DATA_SUBNET,
                "--mca", "oob_tcp_if_include", mgmt]
        env = {"PMIX_MCA_ptl_tcp_if_include": mgmt, "PMIX_MCA_ptl_tcp_remote_connections": "1"}
        return args, env, [wrapper]

    def close(self):
        topology.down()


def limit_s(topo, system, n, size_bytes, rate, k=None):
    """The physical limit (s) of one iteration of `system` on rack `topo` with links `rate`
    (multips: with K = k PS hosts); None on loopback."""
    if topo == "loopback" or topology is None:
        return None
    b = topology.parse_rate(rate)
    if system == "ps-multi":
        return topology.multips_ps_limit_s(size_bytes, n, k, b)
    if system == "ps-bf16":  # half the bytes each way
        return {"pbox": topology.pbox_ps_limit_s,
                "cloud": topology.cloud_ps_limit_s}[topo](size_bytes / 2, n, b)
    if system in ("ps", "ps-fifo", "raw-tcp"):  # raw-tcp moves the PS's bytes between the same hosts
        return {"pbox": topology.pbox_ps_limit_s,
                "cloud": topology.cloud_ps_limit_s}[topo](size_bytes, n, b)
    if system == "ps-colocated":
        return topology.colocated_ps_limit_s(size_bytes, n, b)
    if system == "ring-bf16":  # half the bytes in every step
        return topology.ring_limit_s(size_bytes / 2, n, b)
    return topology.ring_limit_s(size_bytes, n, b)


# Racks of racks: which of topology.racks_limits_s' schemes a system runs.
RACKS_SCHEME = {"ps-racks": "hierarchical", "ps": "flat_ps", "ps-multi": "keys_spread"}


def racks_limit_s(topo, system, size_bytes):
    """The limit of `system` on a racks-of-racks rack (every allreduce: the ring's)."""
    return topo.racks_limits_s(size_bytes)[RACKS_SCHEME.get(system, "ring")]


def make(name, n, rate, ps_hosts=None):
    """The network of one (topology, N); ps_hosts: K, for multips only."""
    return LoopbackNet(n) if name == "loopback" else RackNet(name, n, rate, ps_hosts)


def cleanup():
    """Leaves no rack behind (after an error or Ctrl-C); harmless when there is none."""
    if topology is not None and rack_problem() is None and racks_up():
        topology.down()


def racks_up():
    """The phub-* network namespaces there are now, sorted: a rack is up (maybe another
    program's) when this is not empty."""
    try:
        return sorted(ns for ns in os.listdir("/run/netns") if ns.startswith("phub-"))
    except OSError:
        return []


# ---- multips: how many PS hosts ----------------------------------------------------------

def parse_ps_hosts(text):
    """--ps-hosts 'n/2,n,3' -> [(2, None), (1, None), (None, 3)]: K as a share of N
    ('n', 'n/D': (D, None)) or a number ((None, K))."""
    specs = []
    for item in text.split(","):
        item = item.strip().lower().replace(" ", "")
        if not item:
            continue
        m = re.fullmatch(r"n(?:/(\d+))?|(\d+)", item)
        if not m or (m.group(1) is not None and int(m.group(1)) < 1) or \
                (m.group(2) is not None and int(m.group(2)) < 1):
            raise ValueError(f"--ps-hosts: '{item}' is not n, n/D or a number >= 1")
        specs.append((int(m.group(1) or 1), None) if m.group(2) is None
                     else (None, int(m.group(2))))
    if not specs:
        raise ValueError("--ps-hosts: empty")
    return specs


def ps_hosts_for(specs, n):
    """The K values of parse_ps_hosts' specs at N workers, sorted, each once. Raises
    ValueError where n/D is not whole."""
    ks = set()
    for divisor, k in specs:
        if k is None:
            if n % divisor:
                raise ValueError(f"--ps-hosts n/{divisor}: N = {n} is not a multiple of {divisor}")
            k = n // divisor
        ks.add(k)
    return sorted(ks)


def k_label(k, n):
    """K relative to N, for tables and plots: 'N', 'N/2', or the number."""
    if k == n:
        return "N"
    if k and n % k == 0:
        return f"N/{n // k}"
    return str(k)
