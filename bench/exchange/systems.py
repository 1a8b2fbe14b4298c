"""The systems the `exchange` driver compares, and how each is started on a network.

Every system moves one S-byte float32 tensor per iteration among N workers and writes, per
worker, the same TSV (iter, t0_ns, t1_ns, seconds, then a checksum): one timing rule for all
(barrier-aligned start, per-iteration max over workers, median over iterations, warm-up
excluded, result checked). Hosts are named as on the emulated rack: "ps" (the dedicated PS
box) and "w0".."w{N-1}" (worker hosts); a Net says which address a host has and how to run a
command on it (on loopback: 127.0.0.1 and as is).

  raw-tcp            phub_tcp_blaster: the PS's exact bytes over the same streams, no work
                     (the reference: what TCP itself achieves here)
  ps                 phubd on host ps + N phub_exchange_worker
  ps-fifo            the same with priority scheduling off (--send-window-bytes 0)
  ps-bf16            the same with gradients and weights in bf16 (--wire bf16)
  ps-io4             the same with each worker's connections on 4 threads (--io-threads 4;
                     not in the default set)
  ps-shm             the same with phubd's data plane in shared memory (--transport shm;
                     loopback only: every worker on phubd's host)
  ring-bf16          our ring with its pieces in bf16 (--wire bf16; sums stay float32)
  ring-shm           our ring with its links in shared memory (--transport shm; loopback only)
  ps-colocated       one phubd on every worker host (the model spread over all of them)
  ps-multi           one phubd on each of the K PS hosts ps0..ps{K-1} (multips: BytePS's
                     k CPU boxes), the model spread over them as ps-colocated spreads it
                     (on racks of racks: the keys spread over the racks' PBoxes)
  ps-racks           racks of racks (rack.sh --topology racks): a phubd on each rack's PBox
                     with the racks file (--topology), each worker at its rack's; a PBox sums
                     its rack and the chunks' homes reduce across racks (hierarchical)
  (ps on racks of racks runs phubd on rack 0's PBox only: the flat PS on one PBox)
  ring               our ring allreduce (phub_ring_worker)
  gloo-ring-chunked  Gloo's AllreduceRingChunked (phub_gloo_worker)
  gloo-allreduce     gloo::allreduce (phub_gloo_worker)
  mpi, mpi-ring      Open MPI's MPI_Allreduce, its own algorithm choice and the ring forced
                     (phub_mpi_worker under mpirun; on a rack each rank runs on its host via
                     `ip netns exec`, MPI's data on the rack's links, its launcher's control
                     traffic on the rack's unshaped management network)
"""

import glob
import os
import re

from benchlib import BenchError
from benchlib.outdir import fresh_dir
from benchlib.procs import kill_children, start, wait_all, wait_port_file
from timing import per_iteration, run_timeout

# Open MPI over TCP only (no shared memory, no UCX), ranks not bound to cores (nor are the other
# systems' processes); --allow-run-as-root is a no-op when not root.
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
# 4 = ring in Open MPI 4.1's coll_tuned_allreduce_algorithm
# (`ompi_info --param coll tuned --level 9`); without these MPI picks by size.
MPI_RING = ["--mca", "coll_tuned_use_dynamic_rules", "1",
            "--mca", "coll_tuned_allreduce_algorithm", "4"]


class System:
    def __init__(self, key, binary, kind, needs_ps_host=False, extra=(), allreduce=False,
                 worker_extra=(), phubd_extra=()):
        self.key = key                  # name in tables, files and --systems
        self.binary = binary            # target in bench/exchange (phubd is found separately)
        self.kind = kind                # how its processes start: see run()
        self.needs_ps_host = needs_ps_host
        self.extra = list(extra)        # more arguments (mpirun's for kind "mpirun")
        self.allreduce = allreduce      # ends with the mean (N + 1) / 2 on every rank
        self.worker_extra = list(worker_extra)  # kind "ps": the workers' alone (--wire)
        self.phubd_extra = list(phubd_extra)    # kinds "ps*": phubd's alone (--nics)


SYSTEMS = [
    System("raw-tcp", "phub_tcp_blaster", "blaster", needs_ps_host=True),
    System("ps", "phub_exchange_worker", "ps", needs_ps_host=True),
    # Priority scheduling off on phubd and the workers: what its window costs or saves.
    System("ps-fifo", "phub_exchange_worker", "ps", needs_ps_host=True,
           extra=["--send-window-bytes", "0"]),
    # The compact wire: gradients and weights in bf16 (the workers choose; phubd follows).
    System("ps-bf16", "phub_exchange_worker", "ps", needs_ps_host=True,
           worker_extra=["--wire", "bf16", "--wire-weights", "wire"]),
    # The workers' connections to phubd's cores on 4 threads each (--io-threads): a fat worker's
    # I/O spread over cores (not in the default set: on a 2-core box it cannot gain).
    System("ps-io4", "phub_exchange_worker", "ps", needs_ps_host=True,
           worker_extra=["--io-threads", "4"]),
    # phubd's data plane in shared memory (--transport shm; the workers follow it): every
    # worker on phubd's host, so on loopback only.
    System("ps-shm", "phub_exchange_worker", "ps", needs_ps_host=True,
           phubd_extra=["--transport", "shm"]),
    System("ps-colocated", "phub_exchange_worker", "ps-colocated"),
    # K dedicated PS hosts (rack topology multips), the workers spreading the keys over them.
    System("ps-multi", "phub_exchange_worker", "ps-multi", needs_ps_host=True),
    # Racks of racks: a phubd per rack, each rack summed on its PBox, reduced across the racks.
    System("ps-racks", "phub_exchange_worker", "ps-racks", needs_ps_host=True),
    System("ring", "phub_ring_worker", "ranks", allreduce=True),
    # The ring with the PS's compact wire: pieces in bf16, sums in float32 (the honest
    # comparison for ps-bf16).
    System("ring-bf16", "phub_ring_worker", "ranks", extra=["--wire", "bf16"], allreduce=True),
    # The ring's links in shared memory (every rank on one host: loopback only).
    System("ring-shm", "phub_ring_worker", "ranks", extra=["--transport", "shm"], allreduce=True),
    System("gloo-ring-chunked", "phub_gloo_worker", "ranks", extra=["--algo", "ring-chunked"],
           allreduce=True),
    System("gloo-allreduce", "phub_gloo_worker", "ranks", extra=["--algo", "allreduce"],
           allreduce=True),
    System("mpi", "phub_mpi_worker", "mpirun", allreduce=True),
    System("mpi-ring", "phub_mpi_worker", "mpirun", extra=MPI_RING, allreduce=True),
]
BY_KEY = {s.key: s for s in SYSTEMS}
RINGS = [s.key for s in SYSTEMS if s.allreduce]
# Shared memory reaches only processes on one host: never on an emulated rack (namespaces).
ONE_HOST_ONLY = {"ps-shm", "ring-shm"}
NETWORK_RINGS = [k for k in RINGS if k not in ONE_HOST_ONLY]
# What the fp32 PS over TCP is compared with ("best allreduce"): over the network too (ring-shm
# is ps-shm's match); a compact ring only with the compact PS.
FP32_RINGS = [k for k in NETWORK_RINGS if "--wire" not in BY_KEY[k].extra]


# Colocated incast: the N shards answer one worker at the same moment (and N workers push to
# one shard), so N TCP windows pour into one switch port. With autotuned windows they overflow
# the port buffer (rack.sh: 512 KiB) and fast-retransmit rounds cost 250-450 ms per iteration at
# N = 8 (measured: 292 ms at S = 4 MiB; 8 MiB port buffers gave 102 ms). Capping each
# connection's buffers bounds what N senders can have in flight: 64 KiB measured 90 ms (4 MiB)
# and 1723 vs 1888 ms (100 MiB); 256 KiB did not help. Racks only (no ports on loopback);
# docs/operations.md tells users the same.
COLOCATED_SOCKET_BUFFER_BYTES = 64 * 1024

# ps-racks: every rack's phubd listens on this control port (each on its PBox's address), as
# the racks file names them.
RACKS_PORT = 7070


class Settings:
    """What every run shares: binaries, iterations, phubd's knobs."""

    def __init__(self, bins, iters, warmup, cores, lr, chunk_bytes=None, tcp_nagle=False,
                 socket_buffer_bytes=0):
        self.bins = bins
        self.iters = iters
        self.warmup = warmup
        self.cores = cores
        self.lr = lr
        self.chunk_bytes = chunk_bytes
        self.tcp_nagle = tcp_nagle
        self.socket_buffer_bytes = socket_buffer_bytes
        # phubd's cores pinned to their physical cores (the default placement) instead of
        # --no-pin: for measurements of where the kernel handles each core's packets.
        self.pin = False

    def tcp_flags(self, colocated=False):
        """phubd's and the worker's TCP flags; colocated runs cap the socket buffers unless
        --socket-buffer-bytes was given (COLOCATED_SOCKET_BUFFER_BYTES says why)."""
        buf = self.socket_buffer_bytes or (COLOCATED_SOCKET_BUFFER_BYTES if colocated else 0)
        return ["--socket-buffer-bytes", str(buf)] + (["--tcp-nagle"] if self.tcp_nagle else [])


def colocated_partition_bytes(n, mib):
    """The split of the tensor over N servers: phubd's default 1 MiB chunk, smaller when S/N is
    less, so every server owns a share (4 KiB-aligned)."""
    share = int(mib * (1 << 20)) // n
    return max(4096, min(1 << 20, share // 4096 * 4096))


def even_partition_bytes(k, mib, largest=1 << 20):
    """The split of the tensor over K servers with every server owning the same bytes where
    possible: the largest multiple of 4 KiB, at most `largest` and at least a quarter of it,
    that cuts the tensor into a multiple of K whole partitions (S = 100 MiB, K = 8: 800 KiB, 16
    each; the 1 MiB default would give 13 and 12, a largest share 4 % above S/K). Where none
    exists, as colocated_partition_bytes. The multips limit assumes equal shares
    (bench/topo/topology.py)."""
    total = int(mib * (1 << 20)) // 4 * 4  # the worker rounds S down to whole floats
    cap = max(1, largest // 4096)
    if total % 4096 == 0 and (total // 4096) % k == 0:
        pages = total // 4096 // k  # 4 KiB pages per server
        for chunk in range(min(cap, pages), max(1, cap // 4) - 1, -1):
            if pages % chunk == 0:
                return chunk * 4096
    return colocated_partition_bytes(k, mib)


def multips_partition_bytes(n, k, mib):
    """ps-multi's partitions: even over the K PS hosts, and at most 1 MiB / N. A PS host of link
    B cannot send a partition's weights before all N copies of it are in, and after the last
    one comes in it still owes N copies of it: the pipeline fills and drains in about
    2·N·P/B. A PBox (link N·B) pays 2·P/B for the same; P = 1 MiB / N gives the PS hosts the
    same, 17 ms at B = 1 Gbit/s instead of 67 ms with 1 MiB at N = 4 (8 % of S/B at 100 MiB)."""
    return even_partition_bytes(k, mib, largest=max(64 << 10, (1 << 20) // n))


def run(system, net, settings, n, mib, run_dir, limit_s=0.0, chunk_bytes=None):
    """One run of `system` with N workers and S = mib MiB on `net`. Returns (per-iteration
    times in s, checksum). Raises BenchError on any failure or inconsistent result."""
    fresh_dir(run_dir)
    s = settings
    common = ["--mib", f"{mib:g}", "--iters", str(s.iters), "--warmup", str(s.warmup)]
    timeout = run_timeout(n, mib, s.iters + s.warmup, limit_s)
    workers = [f"w{r}" for r in range(n)]
    procs, outs = [], []

    def launch(name, host, argv, log_name, env=None):
        log_path = os.path.join(run_dir, log_name)
        proc = start(net.wrap(host, argv), log_path, env)
        procs.append((name, proc, log_path))
        return proc, log_path

    # Only racks have switch ports to overflow; on loopback the cap would just slow TCP.
    # multips has the same incast (N workers push into one PS host's port, K PS hosts answer
    # one worker at once), so it gets the same cap.
    colocated = system.kind in ("ps-colocated", "ps-multi") and net.name != "loopback"

    def phubd(host, cores, tag, port=0, extra=()):
        port_file = os.path.join(run_dir, f"{tag}.port")
        # Racks of racks: each phubd serves two jobs (its rack's, and its chunks' homes), so
        # it runs until killed, not waited for.
        one_job = [] if extra else ["--one-job"]
        argv = [s.bins["phubd"], "--port", str(port), "--port-file", port_file, "--listen",
                net.ip(host), "--max-world-size", str(n), "--cores", str(cores)]
        argv += net.phubd_access()
        argv += [] if s.pin else ["--no-pin"]
        # Pinned runs log at debug: each data connection's "handled on CPU" line.
        argv += ["--log-level", "debug" if s.pin else "info", "--optimizer", "sgd", "--lr",
                 str(s.lr)] + one_job
        if chunk_bytes or s.chunk_bytes:
            argv += ["--chunk-bytes", str(chunk_bytes or s.chunk_bytes)]
        log_path = os.path.join(run_dir, f"{tag}.log")
        proc = start(net.wrap(host, argv + s.tcp_flags(colocated) + system.extra
                              + system.phubd_extra + list(extra)),
                     log_path)
        if not extra:
            procs.append((tag, proc, log_path))
        return f"{net.ip(host)}:{wait_port_file(port_file, proc, tag, log_path)}"

    try:
        if system.kind == "blaster":
            port_file = os.path.join(run_dir, "ports")
            flags = ["--world", str(n), "--socket-buffer-bytes", str(s.socket_buffer_bytes)] + common
            proc, log_path = launch("tcp_blaster server", "ps",
                                    [s.bins[system.binary], "--serve", "--listen", net.ip("ps"),
                                     "--cores", str(s.cores), "--port-file", port_file] + flags,
                                    "server.log")
            ports = wait_port_file(port_file, proc, "tcp_blaster server", log_path)
            for r, host in enumerate(workers):
                outs.append(os.path.join(run_dir, f"client{r}.tsv"))
                launch(f"tcp_blaster client {r}", host,
                       [s.bins[system.binary], "--connect", "--host", net.ip("ps"), "--ports",
                        ports, "--rank", str(r), "--out", outs[-1]] + flags, f"client{r}.log")
        elif system.kind == "ps-racks":
            racks_file = os.path.join(run_dir, "racks.txtpb")
            with open(racks_file, "w") as f:
                f.write(net.racks_file(RACKS_PORT))
            for r, host in enumerate(net.ps_hosts()):
                phubd(host, s.cores, f"phubd-{host}", RACKS_PORT,
                      ["--topology", racks_file, "--rack", f"r{r}"])
            for r, host in enumerate(workers):
                outs.append(os.path.join(run_dir, f"worker{r}.tsv"))
                launch(f"{system.key} worker {r}", host,
                       [s.bins[system.binary], "--topology", racks_file, "--hostname", host,
                        "--lr", str(s.lr), "--out", outs[-1]]
                       + common + s.tcp_flags(colocated) + system.extra + system.worker_extra,
                       f"worker{r}.log")
        elif system.kind in ("ps", "ps-colocated", "ps-multi"):
            if system.kind == "ps":
                # The one PS host: "ps" (pbox, cloud), rack 0's PBox on racks of racks.
                servers = [phubd(net.ps_hosts()[0], s.cores, "phubd")]
                placement = []
            elif system.kind == "ps-multi":
                # Dedicated boxes: --cores as the single PS host's; the keys spread evenly.
                hosts = net.ps_hosts()
                if not hosts:
                    raise BenchError(f"{system.key}: the {net.name} network has no PS hosts")
                servers = [phubd(host, s.cores, f"phubd-{host}") for host in hosts]
                placement = ["--partition-bytes",
                             str(multips_partition_bytes(n, len(hosts), mib))]
            else:
                # One core each: N daemons and N workers already share this machine's CPUs.
                servers = [phubd(host, 1, f"phubd-{host}") for host in workers]
                placement = ["--partition-bytes", str(colocated_partition_bytes(n, mib))]
            for r, host in enumerate(workers):
                outs.append(os.path.join(run_dir, f"worker{r}.tsv"))
                launch(f"{system.key} worker {r}", host,
                       [s.bins[system.binary], "--servers", ",".join(servers), "--rank", str(r),
                        "--world", str(n), "--lr", str(s.lr), "--out", outs[-1]]
                       + placement + common + s.tcp_flags(colocated) + system.extra
                       + system.worker_extra,
                       f"worker{r}.log")
        elif system.kind == "ranks":
            rendezvous = os.path.join(run_dir, "rendezvous")
            os.makedirs(rendezvous)
            for r, host in enumerate(workers):
                outs.append(os.path.join(run_dir, f"rank{r}.tsv"))
                launch(f"{system.key} rank {r}", host,
                       [s.bins[system.binary], "--rank", str(r), "--world", str(n),
                        "--rendezvous", rendezvous, "--host", net.ip(host)]
                       + system.extra + common + ["--out", outs[-1]], f"rank{r}.log")
        elif system.kind == "mpirun":
            prefix = os.path.join(run_dir, "rank")
            outs = [f"{prefix}{r}.tsv" for r in range(n)]
            mpirun, env, rank_prefix = net.mpi_launch(run_dir)
            log_path = os.path.join(run_dir, "mpirun.log")
            procs.append((f"{system.key} mpirun",
                          start(MPIRUN + mpirun + system.extra + ["-np", str(n)] + rank_prefix
                                + [s.bins[system.binary]] + common + ["--out", prefix],
                                log_path, env), log_path))
        else:
            raise BenchError(f"unknown system kind {system.kind}")
        wait_all(procs, timeout)
    finally:
        kill_children()
    times, checksums = per_iteration(outs)
    if system.kind != "blaster" and (None in checksums or len(set(checksums)) != 1):
        raise BenchError(f"{system.key}: the workers' results differ (N={n}, S={mib:g} MiB): "
                         f"checksums {checksums}; files in {run_dir}")
    return times, checksums[0]


CPU_LINE = re.compile(r"cores' CPU ([0-9.]+) s \(([0-9.]+) ns per byte in\)")


def phubd_cpu(run_dir):
    """(CPU seconds, bytes in) summed over the phubd logs of a finished run, from each job's
    end line (phub/server/job/job.cc); None when no phubd ran or none logged it."""
    cpu = nbytes = 0.0
    found = False
    for path in glob.glob(os.path.join(run_dir, "phubd*.log")):
        with open(path, errors="replace") as f:
            for m in CPU_LINE.finditer(f.read()):
                seconds, ns_per_byte = float(m.group(1)), float(m.group(2))
                if ns_per_byte > 0:
                    cpu += seconds
                    nbytes += seconds * 1e9 / ns_per_byte
                    found = True
    return (cpu, nbytes) if found else None
