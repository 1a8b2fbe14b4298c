"""Output folders. A driver writes its tables to OUT and each run's logs, port files and
timings to OUT/raw/, which starts empty: files of an earlier run would be read as this run's (a
stale port file points at a dead server; --from-raw would mix old timings in)."""

import os
import shutil


def fresh_dir(path):
    """Makes `path` an empty folder (removing what was there), its parents as needed."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def with_raw(out):
    """Creates OUT (keeping what is in it) and an empty OUT/raw; returns OUT/raw."""
    os.makedirs(out, exist_ok=True)
    raw = os.path.join(out, "raw")
    fresh_dir(raw)
    return raw
