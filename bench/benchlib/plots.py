"""PNG plots of results, without a display (matplotlib's Agg backend).

import_pyplot() finds matplotlib even from a pyenv or venv python that does not see Debian's
python3-matplotlib, and a box without it still gets its tables (no plot, one line on stderr).
plot_tsv() draws the grouped line or bar plot of any driver's TSV; bench/plot_table.py is its
command line and documents the options.
"""

import csv
import sys

from benchlib.log import log

DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"


class PlotError(Exception):
    """The TSV or the options cannot make a plot (no rows, no such column, ...)."""


def import_pyplot():
    """matplotlib.pyplot on the Agg backend, or None (logged) where matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        # A pyenv/venv python may not see Debian's python3-matplotlib: try its path once.
        if DEBIAN_DIST_PACKAGES not in sys.path:
            sys.path.append(DEBIAN_DIST_PACKAGES)
        try:
            import matplotlib
        except ImportError:
            log("matplotlib not found (apt-get install python3-matplotlib): no PNG plots")
            return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(plt, fig, path, dpi):
    """Lays out, writes and closes the figure (a driver draws many in one process)."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


# ---- the plot of a TSV --------------------------------------------------------------------

def parse_match(text, flag):
    """'COL=VAL' or 'COL!=VAL' -> (col, val, negate)."""
    if "!=" in text:
        col, val = text.split("!=", 1)
        return col, val, True
    if "=" in text:
        col, val = text.split("=", 1)
        return col, val, False
    raise PlotError(f"{flag} '{text}' must look like COL=VAL or COL!=VAL")


def matches(row, cond):
    col, val, negate = cond
    return (row[col] == val) != negate


def as_number(text):
    try:
        return float(text)
    except ValueError:
        return None


def plot_tsv(tsv, x, y, out, group=None, title="", logx=False, kind="line", where=(), ref=(),
             ref_label=None, xlabel=None, ylabel=None, annotate=False):
    """Draws column y against column x of `tsv` into the PNG `out`; the arguments are
    plot_table.py's flags (its docstring says what each does). Raises PlotError on bad input,
    RuntimeError where matplotlib is missing."""
    with open(tsv, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows:
        raise PlotError(f"{tsv} has no data rows")
    columns = rows[0].keys()
    group_cols = group.split(",") if group else []
    needed = [x, y] + group_cols
    needed += [ref_label] if ref_label else []
    refs = [parse_match(r, "--ref") for r in ref]
    wheres = [parse_match(w, "--where") for w in where]
    needed += [c[0] for c in refs + wheres]
    missing = [c for c in needed if c not in columns]
    if missing:
        raise PlotError(f"no column(s) {missing} in {tsv}; it has {list(columns)}")

    ref_rows = [r for r in rows if any(matches(r, c) for c in refs)]
    data = [r for r in rows if r not in ref_rows and all(matches(r, c) for c in wheres)]
    if not data:
        raise PlotError("no rows left to plot after --ref/--where")
    for r in data + ref_rows:
        if as_number(r[y]) is None:
            raise PlotError(f"y column '{y}' has non-numeric value '{r[y]}'")
    plt = import_pyplot()
    if plt is None:
        raise RuntimeError("matplotlib not found")

    def group_of(r):
        return " ".join(r[c] for c in group_cols) if group_cols else y

    groups = []
    for r in data:
        g = group_of(r)
        if g not in groups:
            groups.append(g)
    xs = []
    for r in data:
        if r[x] not in xs:
            xs.append(r[x])
    numeric_x = all(as_number(v) is not None for v in xs)
    if numeric_x:
        xs.sort(key=as_number)

    fig, ax = plt.subplots(figsize=(max(7.0, 1.2 * len(xs) * max(1, len(groups)) / 2), 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if kind == "bar":
        width = 0.8 / len(groups)
        for gi, g in enumerate(groups):
            pos, vals = [], []
            for xi, xv in enumerate(xs):
                hits = [r for r in data if r[x] == xv and group_of(r) == g]
                if hits:
                    pos.append(xi - 0.4 + width * (gi + 0.5))
                    vals.append(as_number(hits[0][y]))
            bars = ax.bar(pos, vals, width * 0.95, label=g, color=colors[gi % len(colors)])
            if annotate:
                ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
        ax.set_xticks(range(len(xs)), xs)
    else:
        for gi, g in enumerate(groups):
            pts = [(r[x], as_number(r[y])) for r in data if group_of(r) == g]
            if numeric_x:
                pts.sort(key=lambda t: as_number(t[0]))
                px = [as_number(xv) for xv, _ in pts]
            else:
                px = [xs.index(xv) for xv, _ in pts]
            ax.plot(px, [yv for _, yv in pts], marker="o", label=g, color=colors[gi % len(colors)])
        if not numeric_x:
            ax.set_xticks(range(len(xs)), xs)
        if logx:
            ax.set_xscale("log", base=2)

    ref_styles = ["--", ":", "-."]
    for ri, r in enumerate(ref_rows):
        yv = as_number(r[y])
        name = r[ref_label] if ref_label else next(c[1] for c in refs if matches(r, c))
        ax.axhline(yv, color="black", linestyle=ref_styles[ri % len(ref_styles)], linewidth=1.2,
                   label=f"{name} ({yv:.1f})")

    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    if title:
        ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylim(bottom=0)
    # Outside the axes, so it never hides a bar or a line.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    save(plt, fig, out, dpi=120)


def plot_tsv_or_log(tsv, out, **options):
    """plot_tsv() for a driver whose tables matter more than its plot: a failure is logged
    and the run goes on. Returns whether `out` was written."""
    try:
        plot_tsv(tsv, out=out, **options)
    except (PlotError, RuntimeError, OSError, ValueError) as e:
        log(f"no plot {out}: {e}")
        return False
    log(f"wrote {out}")
    return True
