"""The `exchange` benchmark's timing rule: read the per-iteration TSVs every worker writes
(iter, t0_ns, t1_ns, seconds, then a checksum) and reduce them to per-iteration times (max over
workers of t1 - t0), and how long a run may take. Processes are benchlib.procs'."""

from benchlib import BenchError


def run_timeout(n, mib, rounds, limit_s=0.0):
    """Seconds a run of N workers moving S = mib MiB for `rounds` iterations may take."""
    # Generous: 20 ms per MiB moved per worker per round (~50 MB/s), or 4x the link limit of a
    # round on an emulated rack, whichever is longer, plus start-up.
    return 60.0 + rounds * max(n * mib * 2 * 0.02, 4 * limit_s)


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
