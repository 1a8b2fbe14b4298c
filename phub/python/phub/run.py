"""python3 -m phub.run ARGS: torchrun (torch.distributed.run) ARGS, on Debian 12 too.

Debian 12's python3-torch 1.13 under Python 3.11 dies inside torch.distributed.elastic before
any worker starts ("'NoneType' object has no attribute 'get'" in api.py's to_map): its
Std.from_str finds a value by iterating the IntFlag Std, and Python 3.11 iterates only the
single-bit members, so "0" (the --redirects/--tee default) and "3" are never found. This mends
that one lookup where it is broken, and only there, then runs torchrun unchanged:

    /usr/bin/python3 -m phub.run --nproc_per_node 4 examples/torch_ddp_phub.py --backend phub
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
    from torch.distributed.run import main as torchrun
    torchrun()


if __name__ == "__main__":
    main()
