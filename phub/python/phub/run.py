"""python3 -m phub.run ARGS: torchrun (torch.distributed.run) ARGS, on Debian 12 too.

Debian 12's python3-torch 1.13 under Python 3.11 dies inside torch.distributed.elastic before
any worker starts ("'NoneType' object has no attribute 'get'" in api.py's to_map): its
Std.from_str finds a value by iterating the IntFlag Std, and Python 3.11 iterates only the
single-bit members, so "0" (the --redirects/--tee default) and "3" are never found. This mends
that one lookup where it is broken, and only there, then runs torchrun unchanged:

    /usr/bin/python3 -m phub.run --nproc_per_node 4 examples/torch_ddp_phub.py --backend phub

It also makes "phub" a torch.distributed backend in every worker (phub.c10d): a script that
calls init_process_group("phub") runs unchanged. The training script then runs as
`python -m phub.registered_script SCRIPT ARGS` (the same __main__, sys.argv and sys.path[0] as
`python SCRIPT ARGS`); with torchrun's -m or --no_python the command is left as given.
"""
import re


def _mend_std_lookup():
    try:
        from torch.distributed.elastic.multiprocessing import api
    except ImportError:
        return
    if api.Std.from_str("0") is not None:
        return  # a torch or Python without the bug

    def from_str(cls, vm):
        if re.match(api._VALUE_REGEX, vm):
            return cls(int(vm))
        if re.match(api._MAPPING_REGEX, vm):
            return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
        raise ValueError(f"{vm} does not match {api._VALUE_REGEX} or {api._MAPPING_REGEX}")

    api.Std.from_str = classmethod(from_str)


def main():
    _mend_std_lookup()
    from torch.distributed import run as torchrun
    args = torchrun.parse_args(None)
    if not args.module and not args.no_python:
        args.training_script_args = [args.training_script] + list(args.training_script_args)
        args.training_script = "phub.registered_script"
        args.module = True
    from torch.distributed.elastic.multiprocessing.errors import record
    record(torchrun.run)(args)


if __name__ == "__main__":
    main()
