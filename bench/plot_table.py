#!/usr/bin/python3
"""Draws a grouped line or bar plot from a TSV file written by one of the benches.

Usage:
  /usr/bin/python3 bench/plot_table.py TSV --x COL --y COL [--group COL] --out PNG
      [--title T] [--logx] [--kind line|bar] [--where COL=VAL|COL!=VAL ...]
      [--ref COL=VAL ...] [--ref-label COL] [--xlabel L] [--ylabel L] [--annotate]

  TSV        tab-separated, first line holds the column names.
  --x/--y    columns for the x axis and the (numeric) y axis.
  --group    one line (or one bar colour) per distinct value of this column (or of several:
             COL1,COL2 groups by both, labelled "v1 v2"); order of first appearance. Without it
             every row is one series.
  --kind     'line' (default; numeric x sorted, --logx for a log2-spaced x axis) or 'bar'
             (grouped bars, one slot per distinct x value).
  --where    keep only rows matching (repeatable; all must hold). Applied after --ref.
  --ref      rows matching COL=VAL are not plotted as data but as dashed horizontal reference
             lines at their y value (e.g. the memcpy bandwidth), labelled with the value of
             --ref-label (default: VAL) and y. Repeatable.
  --annotate write each bar's value above it (bar plots).

Example (bench/aggregation/README.md):
  /usr/bin/python3 bench/plot_table.py results/aggregation/aggregation.tsv \
      --x inputs --y gb_per_s --group series --kind bar \
      --ref kernel=memcpy --ref kernel=sum_into --ref-label label \
      --xlabel "inputs N" --ylabel "GB/s" --annotate \
      --title "Fused aggregation + optimizer" --out results/aggregation/aggregation.png

Needs only python3 and matplotlib (Agg backend: no display needed). The plot itself is
benchlib/plots.py's plot_tsv(), which the drivers call directly.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib.plots import PlotError, plot_tsv  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("tsv")
    p.add_argument("--x", required=True)
    p.add_argument("--y", required=True)
    p.add_argument("--group")
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="")
    p.add_argument("--logx", action="store_true")
    p.add_argument("--kind", choices=["line", "bar"], default="line")
    p.add_argument("--where", action="append", default=[])
    p.add_argument("--ref", action="append", default=[])
    p.add_argument("--ref-label")
    p.add_argument("--xlabel")
    p.add_argument("--ylabel")
    p.add_argument("--annotate", action="store_true")
    args = p.parse_args()
    try:
        plot_tsv(**vars(args))
    except (PlotError, RuntimeError) as e:
        sys.exit(f"plot_table: {e}")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
