"""How jobs that ran at the same time on one phubd shared it: each job's rate over the window in
which all of them ran, Jain's fairness index, shares against weights. Stdlib only.

A job's iterations are spans (start, end) in seconds on one clock (CLOCK_MONOTONIC of the
machine: every worker writes its t0/t1 from it). The window is [latest first start, earliest
last end]: every job runs throughout it. A job's rate is the iterations it completed in the
window, an iteration that straddles an edge counted by the fraction of it inside, over the
window's length: jobs that end at different times (a job of twice the weight finishes first)
are compared only while they competed.
"""


def window(jobs):
    """jobs: {name: [(start, end), ...]} -> (lo, hi), the span every job covers; None if the
    jobs never ran all at once."""
    lo = max(spans[0][0] for spans in jobs.values())
    hi = min(spans[-1][1] for spans in jobs.values())
    return (lo, hi) if hi > lo else None


def rate_in(spans, lo, hi):
    """Iterations per second of one job within [lo, hi], partial iterations pro rata."""
    done = 0.0
    for start, end in spans:
        inside = min(end, hi) - max(start, lo)
        if inside > 0 and end > start:
            done += inside / (end - start)
    return done / (hi - lo)


def rates(jobs):
    """{name: iterations/s within the common window}; raises ValueError without one."""
    w = window(jobs)
    if w is None:
        raise ValueError("the jobs did not run at the same time: no common window")
    return {name: rate_in(spans, *w) for name, spans in jobs.items()}


def jain(values):
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when all equal, 1/n when one has all."""
    values = list(values)
    square_sum = sum(x * x for x in values)
    return sum(values) ** 2 / (len(values) * square_sum) if square_sum > 0 else 0.0


def normalized(throughputs, weights):
    """Each job's throughput over its weight: what Jain's index is taken of when weights
    differ (equal weights: the throughputs themselves, scaled)."""
    return {name: throughputs[name] / weights[name] for name in throughputs}
