"""Where a worker finds its rank, its world and phubd: torchrun's environment, or arguments.

torchrun (and torch.distributed.launch, Slurm's srun through a wrapper) exports RANK, WORLD_SIZE
and LOCAL_RANK. phubd's address comes from an argument or PHUB_ADDRESS (HOST:PORT), its job
token from PHUB_TOKEN or the file named by PHUB_TOKEN_FILE (phubd's --token-file, or the file
the operator issued for the job under phubd's --job-tokens), the job's name from PHUB_JOB, else
torchrun's run id (TORCHELASTIC_RUN_ID, unless "none"), else Slurm's SLURM_JOB_ID, else "" (the
job phubd calls "default"). An argument given explicitly always wins over the environment.
"""
import os
from dataclasses import dataclass
from typing import Optional

DEFAULT_PORT = 7070


@dataclass(frozen=True)
class Launch:
    host: str
    port: int
    rank: int
    world_size: int
    local_rank: int
    token: str
    job: str = ""


def _env_int(name: str, value: Optional[int]) -> int:
    if value is not None:
        return int(value)
    text = os.environ.get(name)
    if text is None:
        raise ValueError(
            f"{name} is not set: launch with torchrun (which sets RANK, WORLD_SIZE and "
            f"LOCAL_RANK), or pass {name.lower()}= explicitly")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def parse_address(address: str) -> tuple:
    """'HOST:PORT', 'HOST' (port 7070) or '[v6]:PORT' -> (host, port)."""
    address = address.strip()
    if not address:
        raise ValueError("phubd's address is empty: give HOST:PORT")
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif address.count(":") == 1:
        host, port = address.split(":")
    else:
        host, port = address, ""
    if not port:
        return host, DEFAULT_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"phubd's address {address!r}: port {port!r} is not 1..65535")
    return host, int(port)


def resolve(address: Optional[str] = None, rank: Optional[int] = None,
            world_size: Optional[int] = None, token: Optional[str] = None,
            job: Optional[str] = None) -> Launch:
    """Fills what was not given from the environment (see the module's doc)."""
    if address is None:
        address = os.environ.get("PHUB_ADDRESS")
        if address is None:
            raise ValueError("phubd's address is not given: pass address='HOST:PORT' or set "
                             "PHUB_ADDRESS=HOST:PORT")
    host, port = parse_address(address)
    rank = _env_int("RANK", rank)
    world_size = _env_int("WORLD_SIZE", world_size)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} of world size {world_size}: need 0 <= rank < world size")
    if token is None:
        token = os.environ.get("PHUB_TOKEN")
    if token is None and os.environ.get("PHUB_TOKEN_FILE"):
        # phubd's own reader (phub/common/token_file.h), so the file means the same token here.
        from phub._phub import read_token_file
        token = read_token_file(os.environ["PHUB_TOKEN_FILE"])
    if job is None:
        job = default_job_name()
    return Launch(host, port, rank, world_size, local_rank, token or "", job)


def default_job_name() -> str:
    """The job's name as the launcher knows it (see the module's doc); "" if none does."""
    for name in ("PHUB_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        value = os.environ.get(name, "")
        if value and value != "none":  # torchrun's run id when --rdzv-id was not given
            return value
    return ""
