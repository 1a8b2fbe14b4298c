"""Command lines of the drivers: the usage is the driver's own docstring (one text for the
file's reader and for --help), and list flags take commas."""

import argparse


def parser(doc, epilog=True):
    """An ArgumentParser whose description is the docstring's first paragraph and, with
    epilog, whose epilog is the rest, line breaks kept."""
    if not epilog:
        return argparse.ArgumentParser(description=doc.split("\n\n")[0])
    return argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog=doc.split("\n\n", 1)[1])


def parse_list(text, kind):
    """'a,b,,c' -> [kind('a'), kind('b'), kind('c')] (empty items dropped)."""
    return [kind(x) for x in text.split(",") if x.strip()]
