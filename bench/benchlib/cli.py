"""Command lines of the drivers: the usage is the driver's own docstring (one text for the
file's reader and for --help), and list flags take commas."""

import argparse
import os


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


def add_rack_run_flags(p, root, out_name, device_help):
    """The flags every distributed-training driver takes (bench/train/run_distributed.py,
    bench/torch/run_torch.py): the racks, the steps of each run, the device, the build and the
    output folder results/<out_name>."""
    p.add_argument("--n", default="2,4")
    p.add_argument("--rate", default="1gbit", help="link rate of the racks")
    p.add_argument("--ps-cores", type=int, default=2, help="phubd --cores on the PS host")
    p.add_argument("--iters", type=int, default=6, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=int, default=900, help="seconds per run")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help=device_help)
    p.add_argument("--build", default=os.path.join(root, "build"))
    p.add_argument("--out", default=os.path.join(root, "results", out_name))
