"""PHub as a torch.distributed backend: init_process_group("phub") (docs/torch.md "A c10d
backend").

    import phub.c10d                              # registers "phub" (phub.run does it for you)
    torch.distributed.init_process_group("phub")  # PHUB_ADDRESS, RANK, WORLD_SIZE as for gloo
    model = DistributedDataParallel(model)        # unchanged: its gradients go through phubd

Plain DDP, no hook: DDP's allreduce of each gradient bucket goes to phubd in summation mode,
which sums it over the ranks. Everything else DDP needs at start (the broadcast of rank 0's
parameters, an allgather of their shapes, barriers), and every allreduce that is not of float32
tensors with SUM or AVG on the group's device (a loss's MAX, an int counter), runs over a gloo
group on the same store: the calls are few and small. The group's device is the first such
allreduce's: CPU, or a GPU, whose tensors go through the staged client (phub.DeviceClient: the
slots are device memory, copied to pinned memory and back on the client's streams; CPU tensors
too with PHUB_STAGED=1, as phub.torch's hook). Collectives DDP does not use (reduce, scatter,
gather, reduce_scatter, alltoall, send, recv) raise, naming the collective and the fix.

How a bucket goes through phubd. A PS job's tensors are fixed when it forms, DDP's buckets are
not (it rebuilds them after the first iteration). So the job is a ring of `slots` tensors of
`slot_floats` floats each (PHUB_C10D_SLOTS, default 128; PHUB_C10D_SLOT_BYTES, default 256 KiB),
formed at the first such allreduce, which every rank makes at once. Each allreduce cuts its
tensors into pieces of at most a slot and hands them to the next slots in turn (every rank calls
allreduce with the same sizes in the same order, so every rank puts the same piece in the same
slot); a piece is copied into its slot's send buffer and pushed at once; a waiter thread waits
for each slot's sum, copies it back into the tensor and completes the allreduce's future. A slot
is used again only once its last sum is back (so at most slots × slot_bytes are in flight; an
allreduce past that waits for the oldest: pieces go to the waiter as they are pushed, so even an
allreduce larger than the ring goes through). phubd's summation mode returns the mean of the
ranks' copies; SUM multiplies it by the world size.

Errors (phubd gone or silent, a rank dead) fail the allreduce's future with a phub.PhubError,
which DDP raises from backward(), within phubd's liveness and rejoin deadlines: never a hang.
"""
import os
import queue
import threading
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

import phub
from phub.device_streams import DeviceStreams, staged_of

__all__ = ["ProcessGroupPhub", "register"]

_STOP = object()
DEFAULT_SLOTS = 128
DEFAULT_SLOT_BYTES = 256 << 10


def _env_int(name, default, low, high):
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: not an integer; give {low} to {high}") from None
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is out of range: give {low} to {high}")
    return value


class _Call:
    """One allreduce through phubd: its future completes after its last piece, or fails once."""

    __slots__ = ("tensors", "summed", "future", "done")

    def __init__(self, tensors, summed, future):
        self.tensors = tensors
        self.summed = summed
        self.future = future
        self.done = False

    def finish(self):
        if not self.done:
            self.done = True
            self.future.set_result(self.tensors)

    def fail(self, error):
        if not self.done:
            self.done = True
            self.future.set_exception(error)


class ProcessGroupPhub(dist.ProcessGroup):
    """The "phub" backend's process group (see the module's docstring)."""

    def __init__(self, store, rank: int, world_size: int, timeout: timedelta):
        super().__init__(rank, world_size)
        wire = phub.wire_of(None, None)["wire"]
        if wire != "fp32":
            raise ValueError(
                f"PHUB_WIRE={wire}: the phub backend carries float32 only (its slots carry a "
                "different piece of a different tensor every call, and a compact wire's error "
                "feedback would add one piece's rounding to another's); unset PHUB_WIRE, or use "
                "phub.torch's comm hook or ServerOptimizer, which take it (docs/torch.md)")
        # DDP's set-up collectives and what phubd does not carry.
        self._gloo = dist.ProcessGroupGloo(store, rank, world_size, timeout)
        self._rank = rank
        self._world = world_size
        self._slots = _env_int("PHUB_C10D_SLOTS", DEFAULT_SLOTS, 1, 4096)
        self._slot_floats = _env_int("PHUB_C10D_SLOT_BYTES", DEFAULT_SLOT_BYTES, 4,
                                     1 << 30) // 4
        self._client = None
        self._device = None  # the first allreduce through phubd decides
        self._lock = threading.Condition()
        self._busy = [False] * self._slots  # a slot whose sum is not back yet
        self._used = [False] * self._slots  # a slot pushed before (staged: see allreduce)
        self._next = 0
        self._error = None
        self._waits = queue.Queue()
        self._waiter = None
        self.pieces = 0  # pieces that went through phubd (for tests and logs)

    # ---- what goes through phubd ----
    def _connect(self, device):
        self._device = device
        self._streams = DeviceStreams(device)
        self._staged = staged_of(None, device.type == "cuda")
        tensors = [(f"slot{i}", self._slot_floats) for i in range(self._slots)]
        common = dict(rank=self._rank, world_size=self._world, optimizer={"kind": "average"},
                      wire="fp32")
        if self._staged:  # the slots in the device's memory, as the hook's buffers
            f = self._slot_floats
            sent = torch.zeros(self._slots * f, dtype=torch.float32, device=device)
            summed = torch.zeros(self._slots * f, dtype=torch.float32, device=device)
            self._sent = [sent[i * f:(i + 1) * f] for i in range(self._slots)]
            self._summed = [summed[i * f:(i + 1) * f] for i in range(self._slots)]
            self._client = phub.connect_device(
                tensors, [v.data_ptr() for v in self._sent],
                [v.data_ptr() for v in self._summed], self._streams.index, **common)
            self._client.init(self._streams.current())
        else:
            self._sent = [np.zeros(self._slot_floats, np.float32) for _ in range(self._slots)]
            self._summed = [np.zeros(self._slot_floats, np.float32) for _ in range(self._slots)]
            self._client = phub.connect(tensors, self._summed, **common)
            self._client.init()
        self._waiter = threading.Thread(target=self._wait_loop, name="phub-c10d-wait",
                                        daemon=True)
        self._waiter.start()

    def _through_phubd(self, tensors, opts):
        if not tensors:
            return False
        device = self._device or tensors[0].device
        return (opts.reduceOp in (dist.ReduceOp.SUM, dist.ReduceOp.AVG) and
                all(t.dtype == torch.float32 and t.device == device and t.is_contiguous()
                    for t in tensors))

    def allreduce(self, tensors, opts=None):
        if opts is None:
            opts = c10d.AllreduceOptions()
        if not self._through_phubd(tensors, opts):
            return self._gloo.allreduce(tensors, opts)
        if self._client is None and self._error is None:
            try:
                self._connect(tensors[0].device)
            except BaseException as e:  # noqa: B902 - this call and every later one fail
                self._fail(e)
        future = self._streams.future() if self._client else torch.futures.Future()
        call = _Call(tensors, opts.reduceOp == dist.ReduceOp.SUM, future)
        try:
            if self._error is not None:
                raise self._error
            pieces = [(tensor.view(-1), at) for tensor in tensors
                      for at in range(0, tensor.numel(), self._slot_floats)]
            if not pieces:
                future.set_result(tensors)
            for k, (flat, at) in enumerate(pieces):
                n = min(self._slot_floats, flat.numel() - at)
                slot = self._take_slot()
                if self._staged:
                    if self._used[slot]:
                        # The slot's last sum was copied out on the waiter's stream: this
                        # stream joins it before the push, which starts behind this stream's
                        # work, so the next sum cannot land before that copy has read it.
                        self._streams.join_waiter()
                    self._used[slot] = True
                    self._sent[slot][:n].copy_(flat[at:at + n])
                    self._client.push(slot, self._streams.current())
                else:
                    self._sent[slot][:n] = flat[at:at + n].numpy()
                    self._client.push(slot, self._sent[slot])
                # Each piece to the waiter at once: an allreduce larger than the ring takes
                # back its own first slots as the waiter frees them.
                self._waits.put((call, slot, flat, at, n, k + 1 == len(pieces)))
        except BaseException as e:  # noqa: B902 - every failure reaches the future
            self._fail(e)
            call.fail(e)
        return c10d._create_work_from_future(future)

    def _take_slot(self):
        with self._lock:
            slot = self._next
            self._lock.wait_for(lambda: not self._busy[slot] or self._error is not None)
            if self._error is not None:
                raise self._error
            self._busy[slot] = True
            self._next = (slot + 1) % self._slots
            return slot

    def _wait_loop(self):
        while True:
            piece = self._waits.get()
            if piece is _STOP:
                return
            call, slot, flat, at, n, last = piece
            try:
                if self._error is not None:
                    raise self._error
                if self._staged:  # blocks on the network; then the waiter's stream on the copy
                    self._client.wait(slot, self._streams.waiter())
                    values = self._summed[slot][:n]
                else:
                    self._client.wait(slot)
                    values = torch.from_numpy(self._summed[slot][:n])
                with self._streams.on_waiter():  # a GPU's copy and the future's event there
                    flat[at:at + n].copy_(values * self._world if call.summed else values)
                    with self._lock:
                        self._busy[slot] = False
                        self.pieces += 1
                        self._lock.notify_all()
                    if last:
                        call.finish()
            except BaseException as e:  # noqa: B902
                self._fail(e)
                call.fail(e)

    def _fail(self, error):
        with self._lock:
            if self._error is None:
                self._error = error
            self._lock.notify_all()

    # ---- DDP's set-up, over gloo ----
    def broadcast(self, tensors, opts=None):
        return self._gloo.broadcast(tensors, opts if opts is not None else c10d.BroadcastOptions())

    def allgather(self, output_tensors, input_tensors, opts=None):
        return self._gloo.allgather(output_tensors, input_tensors,
                                    opts if opts is not None else c10d.AllgatherOptions())

    def barrier(self, opts=None):
        return self._gloo.barrier(opts if opts is not None else c10d.BarrierOptions())

    # ---- the rest: refused by name ----
    def _refuse(self, what):
        raise RuntimeError(f"the phub backend does not do {what}: it carries DDP's allreduce "
                           "through phubd; run it over another group "
                           "(dist.new_group(backend='gloo'))")

    def reduce(self, *args, **kwargs):
        self._refuse("reduce")

    def scatter(self, *args, **kwargs):
        self._refuse("scatter")

    def gather(self, *args, **kwargs):
        self._refuse("gather")

    def reduce_scatter(self, *args, **kwargs):
        self._refuse("reduce_scatter")

    def alltoall(self, *args, **kwargs):
        self._refuse("alltoall")

    def alltoall_base(self, *args, **kwargs):
        self._refuse("alltoall")

    def send(self, *args, **kwargs):
        self._refuse("send")

    def recv(self, *args, **kwargs):
        self._refuse("recv")

    def getBackendName(self):
        return "phub"

    def close(self):
        """Leaves phubd's job cleanly (destroy_process_group does not call it: atexit does)."""
        if self._waiter is not None:
            self._waits.put(_STOP)
            self._waiter.join()
            self._waiter = None
        if self._client is not None:
            self._client.close()
            self._client = None


def _create(store, rank, world_size, timeout):
    group = ProcessGroupPhub(store, rank, world_size, timeout)
    import atexit
    atexit.register(group.close)
    return group


def register():
    """Makes "phub" a torch.distributed backend (idempotent)."""
    if not hasattr(dist.Backend, "PHUB"):
        dist.Backend.register_backend("phub", _create)


register()
