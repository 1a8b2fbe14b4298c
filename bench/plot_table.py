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

Needs only python3 and matplotlib (Agg backend: no display needed).
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)


def parse_match(text, flag):
    """'COL=VAL' or 'COL!=VAL' -> (col, val, negate)."""
    if "!=" in text:
        col, val = text.split("!=", 1)
        return col, val, True
    if "=" in text:
        col, val = text.split("=", 1)
        return col, val, False
    sys.exit(f"plot_table: {flag} '{text}' must look like COL=VAL or COL!=VAL")


def matches(row, cond):
    col, val, negate = cond
    return (row[col] == val) != negate


def as_number(text):
    try:
        return float(text)
    except ValueError:
        return None


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

    with open(args.tsv, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows:
        sys.exit(f"plot_table: {args.tsv} has no data rows")
    columns = rows[0].keys()
    group_cols = args.group.split(",") if args.group else []
    needed = [args.x, args.y] + group_cols
    needed += [args.ref_label] if args.ref_label else []
    refs = [parse_match(r, "--ref") for r in args.ref]
    wheres = [parse_match(w, "--where") for w in args.where]
    needed += [c[0] for c in refs + wheres]
    missing = [c for c in needed if c not in columns]
    if missing:
        sys.exit(f"plot_table: no column(s) {missing} in {args.tsv}; it has {list(columns)}")

    ref_rows = [r for r in rows if any(matches(r, c) for c in refs)]
    data = [r for r in rows if r not in ref_rows and all(matches(r, c) for c in wheres)]
    if not data:
        sys.exit("plot_table: no rows left to plot after --ref/--where")
    for r in data + ref_rows:
        if as_number(r[args.y]) is None:
            sys.exit(f"plot_table: y column '{args.y}' has non-numeric value '{r[args.y]}'")

    def group_of(r):
        return " ".join(r[c] for c in group_cols) if group_cols else args.y

    groups = []
    for r in data:
        g = group_of(r)
        if g not in groups:
            groups.append(g)
    xs = []
    for r in data:
        if r[args.x] not in xs:
            xs.append(r[args.x])
    numeric_x = all(as_number(x) is not None for x in xs)
    if numeric_x:
        xs.sort(key=as_number)

    fig, ax = plt.subplots(figsize=(max(7.0, 1.2 * len(xs) * max(1, len(groups)) / 2), 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if args.kind == "bar":
        width = 0.8 / len(groups)
        for gi, g in enumerate(groups):
            pos, vals = [], []
            for xi, x in enumerate(xs):
                hits = [r for r in data
                        if r[args.x] == x and group_of(r) == g]
                if hits:
                    pos.append(xi - 0.4 + width * (gi + 0.5))
                    vals.append(as_number(hits[0][args.y]))
            bars = ax.bar(pos, vals, width * 0.95, label=g, color=colors[gi % len(colors)])
            if args.annotate:
                ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
        ax.set_xticks(range(len(xs)), xs)
    else:
        for gi, g in enumerate(groups):
            pts = [(r[args.x], as_number(r[args.y])) for r in data
                   if group_of(r) == g]
            if numeric_x:
                pts.sort(key=lambda t: as_number(t[0]))
                px = [as_number(x) for x, _ in pts]
            else:
                px = [xs.index(x) for x, _ in pts]
            ax.plot(px, [y for _, y in pts], marker="o", label=g, color=colors[gi % len(colors)])
        if not numeric_x:
            ax.set_xticks(range(len(xs)), xs)
        if args.logx:
            ax.set_xscale("log", base=2)

    ref_styles = ["--", ":", "-."]
    for ri, r in enumerate(ref_rows):
        y = as_number(r[args.y])
        name = r[args.ref_label] if args.ref_label else next(
            c[1] for c in refs if matches(r, c))
        ax.axhline(y, color="black", linestyle=ref_styles[ri % len(ref_styles)], linewidth=1.2,
                   label=f"{name} ({y:.1f})")

    ax.set_xlabel(args.xlabel or args.x)
    ax.set_ylabel(args.ylabel or args.y)
    if args.title:
        ax.set_title(args.title)
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylim(bottom=0)
    # Outside the axes, so it never hides a bar or a line.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
