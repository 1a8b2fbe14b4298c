"""Progress on stderr. Results go to files and stdout; stderr is for the person watching a run
that can take an hour, so every line says when it was written and long loops say how far they
are and when they should end."""

import datetime
import sys
import time


def log(msg):
    """One line on stderr, flushed at once (a driver's children write to the same terminal)."""
    print(f"[{datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


class Progress:
    """Counts the runs of a grid and estimates the time left from the mean time per run so far.
    str(progress) is "DONE/TOTAL, ETA M.M min". `total` may be lowered while running (a run
    that turns out to be skipped)."""

    def __init__(self, total):
        self.total = total
        self.done = 0
        self._started = time.monotonic()

    def step(self):
        """One more run done."""
        self.done += 1

    def __str__(self):
        left = 0.0
        if self.done:
            left = (time.monotonic() - self._started) / self.done * (self.total - self.done)
        return f"{self.done}/{self.total}, ETA {left / 60:.1f} min"
