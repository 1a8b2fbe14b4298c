"""PHub for Python: PsClient, a worker's connection to phubd (docs/torch.md).

    import phub
    client = phub.connect(tensors=[("w", 1000)], weights=[numpy.zeros(1000, numpy.float32)],
                          address="127.0.0.1:7070", rank=0, world_size=2)
    client.init()
    client.push(0, grads); client.wait(0)    # weights[0] now holds phubd's answer
    client.close()

phub.torch holds the PyTorch DDP communication hook and the server-side optimizer.
From the build tree: PYTHONPATH=build/python (docs/torch.md); installed: cmake --install build.
"""
import os
from typing import Optional, Sequence

from phub._phub import DeviceClient, PhubError, PsClient, set_up_logging
from phub.launch import Launch, parse_address, resolve

__all__ = ["PhubError", "PsClient", "DeviceClient", "connect", "connect_device", "resolve",
           "parse_address", "Launch"]


def connect(tensors: Sequence, weights: Sequence, address: Optional[str] = None,
            rank: Optional[int] = None, world_size: Optional[int] = None,
            token: Optional[str] = None, optimizer: Optional[dict] = None,
            connect_timeout_ms: int = 30000, rdma_device: str = "",
            job: Optional[str] = None, per_iteration_values: bool = False,
            min_workers: int = 0, start_workers: int = 0,
            lr_scaling: str = "none", io_threads: Optional[int] = None,
            wire: Optional[str] = None, wire_weights: Optional[bool] = None) -> PsClient:
    """Joins phubd's job as `rank` of `world_size` (from torchrun's environment when not given;
    phubd's address from PHUB_ADDRESS). Blocks until every worker has joined, at most
    connect_timeout_ms for phubd to answer, then phubd's own --form-timeout-ms.

    tensors: [(name, elements)], identical on every rank. weights: one float32 buffer per
    tensor, where phubd's answers land. optimizer: None (phubd's --optimizer flags) or
    {"kind": "sgd"|"momentum"|"nesterov"|"adam"|"average", "lr": ..., ...}. job: the job's
    name on a shared phubd (default: PHUB_JOB, torchrun's run id, SLURM_JOB_ID, else "").
    per_iteration_values: the hyper-parameters may change every iteration (a schedule): call
    client.step_with({"lr": ...}) before each iteration's first push; needs optimizer.
    min_workers > 0: an elastic job (docs/operations.md "Elastic jobs") of min_workers to
    world_size workers that ranks 0..start_workers-1 start; a later connect joins it running,
    and client.members_of(t) says each iteration's members and this rank's place among them.
    lr_scaling ("linear", "sqrt"; elastic jobs): the optimizer's lr (or step_with's) is the rate
    at start_workers members, and phubd scales it with each iteration's member count.
    io_threads: threads serving the connections to phubd's cores on TCP (default
    PHUB_IO_THREADS, else 1): a worker moving ~100 MB a step on loopback or a fast NIC needs
    several (docs/torch.md).
    wire: how the gradients travel: "fp32", or "bf16"/"fp16" for half the bytes, rounded with
    error feedback (default PHUB_WIRE, else fp32; the same on every rank: phubd refuses a mix).
    wire_weights: with a compact wire, the weights come back in it too, as rounded changes of
    the weights every rank holds (default PHUB_WIRE_WEIGHTS "wire" or "fp32", else True).
    """
    launch = resolve(address, rank, world_size, token, job)
    set_up_logging(os.environ.get("PHUB_LOG_LEVEL", "warn"), f"phub rank {launch.rank}")
    return PsClient(launch.host, launch.port, launch.rank, launch.world_size,
                    [(str(n), int(e)) for n, e in tensors], list(weights), token=launch.token,
                    optimizer=optimizer, connect_timeout_ms=connect_timeout_ms,
                    rdma_device=rdma_device, job=launch.job,
                    per_iteration_values=per_iteration_values, min_workers=min_workers,
                    start_workers=start_workers, lr_scaling=lr_scaling,
                    io_threads=io_threads_of(io_threads), **wire_of(wire, wire_weights))


def connect_device(tensors: Sequence, grads: Sequence[int], weights: Sequence[int], device: int,
                   address: Optional[str] = None, rank: Optional[int] = None,
                   world_size: Optional[int] = None, token: Optional[str] = None,
                   optimizer: Optional[dict] = None, connect_timeout_ms: int = 30000,
                   rdma_device: str = "", job: Optional[str] = None,
                   per_iteration_values: bool = False,
                   io_threads: Optional[int] = None, wire: Optional[str] = None,
                   wire_weights: Optional[bool] = None,
                   segment_bytes: Optional[int] = None, min_workers: int = 0,
                   start_workers: int = 0, lr_scaling: str = "none") -> DeviceClient:
    """connect() for tensors in GPU `device`'s memory: grads and weights are device pointers
    (tensor.data_ptr()) the caller keeps alive; the client stages them through pinned memory on
    its own CUDA streams (phub/exchange/staged_exchange.h). PhubError in a build without CUDA
    or on a machine without a GPU. device -1: the pointers are host memory (CPU tensors), the
    streams 0, and the same pipeline runs through the host engine. io_threads, wire,
    wire_weights: as connect's (a compact wire's conversions run on the CPU, on the staged
    copies). segment_bytes (else PHUB_SEGMENT_BYTES,
    else 4 MiB; 0: none): a longer tensor is copied, pushed and landed in segments of it, so
    its push starts before all of it is on the host (every worker of a job must use the same).
    min_workers, start_workers, lr_scaling: an elastic job, as connect's."""
    launch = resolve(address, rank, world_size, token, job)
    set_up_logging(os.environ.get("PHUB_LOG_LEVEL", "warn"), f"phub rank {launch.rank}")
    return DeviceClient(launch.host, launch.port, launch.rank, launch.world_size,
                        [(str(n), int(e)) for n, e in tensors], [int(g) for g in grads],
                        [int(w) for w in weights], int(device), token=launch.token,
                        optimizer=optimizer, connect_timeout_ms=connect_timeout_ms,
                        rdma_device=rdma_device, job=launch.job,
                        per_iteration_values=per_iteration_values,
                        io_threads=io_threads_of(io_threads), **wire_of(wire, wire_weights),
                        **segment_bytes_of(segment_bytes), min_workers=min_workers,
                        start_workers=start_workers, lr_scaling=lr_scaling)


def segment_bytes_of(given: Optional[int]) -> dict:
    """segment_bytes as given, else PHUB_SEGMENT_BYTES, else the client's default (none
    given to it)."""
    if given is None:
        text = os.environ.get("PHUB_SEGMENT_BYTES", "").strip()
        if not text:
            return {}
        try:
            given = int(text)
        except ValueError:
            raise ValueError(f"PHUB_SEGMENT_BYTES={text!r}: give a whole number of bytes, a "
                             "multiple of 4 (0: whole tensors)") from None
    if given < 0:
        raise ValueError(f"segment_bytes {given}: give 0 (whole tensors) or more")
    return {"segment_bytes": int(given)}


def wire_of(wire: Optional[str], wire_weights: Optional[bool]) -> dict:
    """wire and wire_weights as given, else PHUB_WIRE and PHUB_WIRE_WEIGHTS, else fp32 and
    True (the C++ side checks the format's name)."""
    if wire is None:
        wire = os.environ.get("PHUB_WIRE", "").strip() or "fp32"
    if wire_weights is None:
        text = os.environ.get("PHUB_WIRE_WEIGHTS", "").strip() or "wire"
        if text not in ("wire", "fp32"):
            raise ValueError(f"PHUB_WIRE_WEIGHTS={text!r}: give wire (the weights come back "
                             "in the compact wire too) or fp32")
        wire_weights = text == "wire"
    return {"wire": str(wire), "wire_weights": bool(wire_weights)}


def io_threads_of(given: Optional[int]) -> int:
    """io_threads as given, else PHUB_IO_THREADS, else 1."""
    if given is not None:
        return int(given)
    text = os.environ.get("PHUB_IO_THREADS", "").strip()
    try:
        return int(text) if text else 1
    except ValueError:
        raise ValueError(f"PHUB_IO_THREADS={text!r}: give a whole number of threads, "
                         "at least 1") from None
