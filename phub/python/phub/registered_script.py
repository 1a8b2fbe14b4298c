"""Runs a training script with "phub" registered as a torch.distributed backend (phub.c10d):
what phub.run starts in each worker, `python -m phub.registered_script SCRIPT ARGS`, for
`python SCRIPT ARGS` (same __main__, sys.argv and sys.path[0])."""
import os
import runpy
import sys

import phub.c10d  # noqa: F401 - registers the backend


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m phub.registered_script SCRIPT [ARGS...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
