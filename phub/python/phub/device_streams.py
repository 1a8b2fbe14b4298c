"""What phub.torch's staged path (phub.DeviceClient) needs of the device its tensors are on: the
streams it hands the client, the future a bucket completes, and joining the waiter's stream.

On a GPU these are CUDA streams. On the CPU (a model in host memory with staged=True or
PHUB_STAGED=1: the same pipeline through the host engine) there are none: the handles are 0,
the calling thread is the stream, and there is nothing to join. Keeping the difference here lets
the hook, the server optimizer and the forward's installs run one code path on both, so CI runs
the GPU path's Python without a GPU.
"""
import contextlib
import os
from typing import Optional

import torch

__all__ = ["DeviceStreams", "staged_of"]


def staged_of(given: Optional[bool], cuda: bool) -> bool:
    """Whether a model's tensors go through the staged client: always on a GPU; on the CPU as
    given, else PHUB_STAGED ("1"/"0"), else not (the CPU client sends from DDP's buckets with no
    copy; the staged one copies each gradient into its own buffer first)."""
    if cuda:
        if given is False:
            raise ValueError("staged=False on a GPU model: CUDA tensors always go through the "
                             "staged client (phub.DeviceClient); leave staged unset")
        return True
    if given is not None:
        return bool(given)
    text = os.environ.get("PHUB_STAGED", "").strip()
    if text not in ("", "0", "1"):
        raise ValueError(f"PHUB_STAGED={text!r}: use 1 (CPU tensors through the staged client, "
                         "as a GPU rank's) or 0")
    return text == "1"


class DeviceStreams:
    """The device side of a staged PhubState: `device` is where its tensors are."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        # DeviceClient's device: the GPU's index, or -1 for host memory (the host engine).
        self.index = device.index if self.cuda else -1
        # The waiter thread's stream: the answers' copies are waited for on it.
        self._waiter = torch.cuda.Stream(device=device) if self.cuda else None

    def current(self) -> int:
        """The calling thread's stream, as the client takes it."""
        return torch.cuda.current_stream(self.device).cuda_stream if self.cuda else 0

    def waiter(self) -> int:
        return self._waiter.cuda_stream if self.cuda else 0

    def on_waiter(self):
        """Work in this block is enqueued behind the waiter's stream (a bucket's torch.cat,
        its future's completion event)."""
        return torch.cuda.stream(self._waiter) if self.cuda else contextlib.nullcontext()

    def future(self) -> torch.futures.Future:
        """A bucket's future: on a GPU it records where the waiter's stream is when completed,
        and DDP's stream waits for that."""
        return torch.futures.Future(devices=[self.device]) if self.cuda else torch.futures.Future()

    def join_waiter(self):
        """The current stream waits for what the waiter's stream enqueued (the answers)."""
        if self.cuda:
            torch.cuda.current_stream(self.device).wait_stream(self._waiter)
