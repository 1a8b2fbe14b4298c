"""benchlib: what every benchmark driver under bench/ shares, so that each driver holds only
what its benchmark measures.

  log       progress lines on stderr, with the time and an ETA
  procs     child processes: started in their own sessions, all killed on every way out,
            waited for with a deadline
  tables    TSV files and Markdown tables in the one layout the docs quote
  plots     matplotlib without a display, and the grouped line/bar plot of a TSV
            (bench/plot_table.py is its command line)
  machine   the machine a result was measured on, for the header beside the numbers
  cli       argparse from a driver's docstring, comma lists
  outdir    the output folder and its raw/ folder of per-run files

A driver puts bench/ on sys.path and imports from here:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from benchlib import log, tables

Stdlib only, except plots (matplotlib, imported on first use).
"""


class BenchError(Exception):
    """A benchmark process failed, timed out, or produced a wrong result: the driver reports
    it and exits 1 (an expected failure, unlike a bug in the driver)."""
