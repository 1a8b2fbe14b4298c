"""Result files: TSV for machines (plot_table.py, spreadsheets) and Markdown tables for people
(docs/benchmarks.md quotes them as written). One layout for every driver, so the docs' tables
look alike and one reader (plots.plot_tsv) handles every TSV."""


def short_float(value):
    """A TSV cell with 6 significant digits for floats (timings are not more precise than
    that) and str() for everything else."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def write_tsv(path, rows, keys, cell=str):
    """Writes the header `keys` and one line per row (a dict), tab-separated; a key a row
    lacks is an empty cell, the others are cell(value)."""
    with open(path, "w") as f:
        f.write("\t".join(keys) + "\n")
        for row in rows:
            f.write("\t".join(cell(row[k]) if k in row else "" for k in keys) + "\n")


def fmt(value, spec, missing="-", suffix=""):
    """A table cell: format(value, spec) + suffix, or `missing` where there is no value (None
    or ""), e.g. fmt(0.5, ".2f", suffix="×") is "0.50×", fmt(None, ".2f") is "-"."""
    return missing if value is None or value == "" else format(value, spec) + suffix


def md_row(cells):
    """One Markdown table line: | a | b |."""
    return "| " + " | ".join(cells) + " |"


def md_table(head, rows, align=None):
    """The lines of a Markdown table: the header, its separator and a line per row of cells.
    align: one letter per column, "l" (---) or "r" (---:); all "l" when omitted."""
    align = align or "l" * len(head)
    if len(align) != len(head):
        raise ValueError(f"md_table: {len(head)} columns but align {align!r}")
    sep = "|" + "".join("---:|" if a == "r" else "---|" for a in align)
    return [md_row(head), sep] + [md_row(r) for r in rows]


def write_markdown(path, lines):
    """Writes the lines, each ended by a newline, and returns the text written."""
    text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    return text
