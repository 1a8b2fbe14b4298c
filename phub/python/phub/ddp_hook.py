"""phub.torch's DDP side, PhubState and the comm hook (imported through phub.torch, whose
docstring shows the two ways to use them; docs/torch.md).

How it works. The PS job has one tensor per trainable parameter, in model.parameters() order:
parameters are stable, DDP's buckets are not (DDP rebuilds them after the first iteration, in
the order backward produced the gradients). The hook reads which parameters a bucket holds,
pushes each one's slice of the bucket (zero-copy on CPU: phubd's transport sends straight from
the bucket's memory) and returns a future; a waiter thread completes it once every slice's
answer has landed. Answers land in one flat buffer laid out in reverse parameter order, so a
bucket's averaged gradient is a view of that buffer (no copy) whenever its parameters are
consecutive there, and one torch.cat otherwise (phub/bucket_layout.py: DDP's rebuilt order is
the gradients' readiness, which inside a layer need not be the reverse).

CUDA tensors go through the staging pipeline phub-worker uses (phub.DeviceClient, in C++; CPU
tensors too with staged=True or PHUB_STAGED=1, through its host engine: device_streams.py): the
hook copies each gradient into a fixed device buffer on the current stream and pushes it with
that stream; the pipeline copies it to pinned memory on its own stream once the stream reaches
it, pushes it the moment the copy is done, and copies the answer back to a fixed device buffer
as it lands. The waiter thread's only device work is to make its stream wait for those copies
before completing the bucket's future (created for the device, so DDP's stream waits for it in
turn). No Python thread copies through the host or waits for the device.

Errors (phubd gone or silent, a peer dead and not rejoining, a refused job) complete the
bucket's future with a phub.PhubError, which DDP raises from backward(), within phubd's
liveness and rejoin deadlines; never a hang. Every later hook call fails with the same error.
"""
import atexit
import os
import queue
import threading
import warnings
from typing import Callable, Optional

import torch
from torch.nn.parallel import DistributedDataParallel

import phub
from phub.bucket_layout import consecutive_span, reverse_offsets
from phub.device_streams import DeviceStreams, staged_of
from phub.elastic import ElasticBatches, elastic_size

__all__ = ["PhubState", "connect", "allreduce_hook"]

_STOP = object()


class _Job:
    """One bucket between the hook and its future: completed once (PhubState._finish)."""

    __slots__ = ("ids", "future", "buffer", "finished")

    def __init__(self, ids, future, buffer):
        self.ids = ids
        self.future = future
        self.buffer = buffer
        self.finished = False


def _module_of(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


class PhubState:
    """One DDP model's job on phubd: the comm hook's `state`.

    mode "average": phubd returns the mean gradient (summation mode) and the local optimizer
    steps. mode "optimizer": phubd steps with `optimizer` (a spec dict, see optimizer_spec) and
    returns weights, which ServerOptimizer.step() installs.

    min_workers / max_workers (or PHUB_MIN_WORKERS / PHUB_MAX_WORKERS): an elastic job of that
    many workers (docs/torch.md "Elastic jobs and torchrun --nnodes=MIN:MAX"), optimizer mode
    only. Its size is max_workers, never WORLD_SIZE; a worker connecting to a running
    job of its name joins it, and its parameters become the job's current weights. lr_scaling
    (or PHUB_LR_SCALING): "linear" or "sqrt" makes phubd scale each iteration's lr by its member
    count over min_workers (the lr given is the rate at min_workers members); default "none".

    staged (or PHUB_STAGED=1): CPU tensors through the staged client, as a GPU rank's go, so a
    CPU rank cuts long tensors into the same segments (a job mixing CPU and GPU ranks). GPU
    models are always staged.
    """

    def __init__(self, model: torch.nn.Module, mode: str = "average",
                 optimizer: Optional[dict] = None, address: Optional[str] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 token: Optional[str] = None, connect_timeout_ms: int = 30000,
                 rdma_device: str = "", job: Optional[str] = None,
                 values_of: Optional[Callable[[], dict]] = None,
                 min_workers: Optional[int] = None, max_workers: Optional[int] = None,
                 lr_scaling: Optional[str] = None, staged: Optional[bool] = None):
        if mode not in ("average", "optimizer"):
            raise ValueError(f"mode {mode!r}: use 'average' or 'optimizer'")
        elastic = elastic_size(min_workers, max_workers)
        if lr_scaling is None:
            lr_scaling = os.environ.get("PHUB_LR_SCALING", "").strip() or "none"
        if lr_scaling != "none" and elastic is None:
            raise ValueError(f"lr_scaling={lr_scaling!r} scales the lr with an elastic job's "
                             "member count: give min_workers/max_workers, or leave it 'none'")
        if elastic is not None and mode == "average":
            raise ValueError(
                "an elastic job (min_workers/max_workers, PHUB_MIN_WORKERS/PHUB_MAX_WORKERS) "
                "in summation mode (phub.torch.connect + allreduce_hook): a worker that joins "
                "would need the current weights, and in summation mode they exist only on the "
                "workers (phubd holds sums, not weights); use phub.torch.ServerOptimizer, whose "
                "weights and optimizer state phubd holds, or unset the elastic size")
        if mode == "optimizer" and optimizer is None:
            raise ValueError("mode 'optimizer' needs the optimizer's spec (optimizer_spec())")
        self.mode = mode
        # A schedule (optimizer mode): values_of() gives the hyper-parameters of the iteration
        # whose first bucket comes next; they go to phubd before that bucket's pushes.
        self._values_of = values_of
        self._values_due = values_of is not None
        named = [(n, p) for n, p in _module_of(model).named_parameters()
                 if p.requires_grad and p.numel() > 0]
        if not named:
            raise ValueError("the model has no trainable parameters: nothing to exchange")
        for name, p in named:
            if p.dtype != torch.float32:
                raise TypeError(f"parameter {name} is {p.dtype}: PHub moves float32; train in "
                                "float32 (autocast keeps float32 parameters)")
        devices = {p.device for _, p in named}
        if len(devices) != 1:
            raise ValueError(f"the parameters are on {sorted(map(str, devices))}: PHub's hook "
                             "serves a model on one device (one DDP process per GPU)")
        self.device = devices.pop()
        self.cuda = self.device.type == "cuda"
        self.staged = staged_of(staged, self.cuda)
        self.streams = DeviceStreams(self.device)
        # An elastic job's Hello: world size = its maximum, started by `min` workers; rank
        # (RANK) only asks for a slot (a joiner gets the lowest free one if it is taken).
        self.elastic = elastic
        if elastic is not None:
            world_size = elastic[1]
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self._index = {p.data_ptr(): i for i, p in enumerate(self.params)}
        sizes = [p.numel() for p in self.params]

        # Answers land here, reverse parameter order (bucket_layout.py).
        total = sum(sizes)
        self._offset = reverse_offsets(sizes)
        self._sizes = sizes
        if self.staged:
            # Fixed device buffers for the pipeline: gradients staged from, answers landing in.
            self.received = torch.zeros(total, dtype=torch.float32, device=self.device)
            self._sent = torch.zeros(total, dtype=torch.float32, device=self.device)
            self._sent_views = [self._sent[o:o + n] for o, n in zip(self._offset, sizes)]
        else:
            self.received = torch.zeros(total, dtype=torch.float32)
        self.received_views = [self.received[o:o + n] for o, n in zip(self._offset, sizes)]
        if self.mode == "optimizer":  # rank 0's parameters are everyone's initial weights
            with torch.no_grad():
                for p, v in zip(self.params, self.received_views):
                    v.copy_(p.detach().reshape(-1))

        spec = optimizer if mode == "optimizer" else {"kind": "average"}
        tensors = [(n, s) for n, s in zip(self.names, sizes)]
        common = dict(address=address, rank=rank, world_size=world_size, token=token,
                      optimizer=spec, connect_timeout_ms=connect_timeout_ms,
                      rdma_device=rdma_device, job=job, per_iteration_values=values_of is not None,
                      min_workers=elastic[0] if elastic else 0,
                      start_workers=elastic[0] if elastic else 0, lr_scaling=lr_scaling)
        # A joiner sends nothing at init: its buffers receive the job's weights of
        # resume_iteration.
        if self.staged:
            self.client = phub.connect_device(
                tensors, [v.data_ptr() for v in self._sent_views],
                [v.data_ptr() for v in self.received_views], self.streams.index, **common)
            self.client.init(self.streams.current())
        else:
            self.client = phub.connect(tensors, [v.numpy() for v in self.received_views],
                                       **common)
            self.client.init()
        self.rank = self.client.rank
        # The job iteration whose weights the buffers hold now (0 in a fresh job).
        self.resume_iteration = self.client.resume_iteration
        self.error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)
        self._waits: "queue.Queue" = queue.Queue()
        self._threads = [threading.Thread(target=self._wait_loop, name="phub-wait", daemon=True)]
        for t in self._threads:
            t.start()
        self._closed = False
        # ServerOptimizer(overlap_forward=True): weights installed in the next forward.
        self.deferred = None  # a WeightsInForward
        # An elastic job's data ran out for this worker (ElasticBatches stopped): its exit is
        # the end of its part, not a stop (_at_exit).
        self.finished = False
        atexit.register(self._at_exit)

    # ---- the hook's side (DDP's autograd thread) ----
    def submit(self, bucket) -> "torch.futures.Future[torch.Tensor]":
        future = self.streams.future()
        if self.error is not None:
            future.set_exception(self.error)
            return future
        try:
            ids = [self._index[p.data_ptr()] for p in bucket.parameters()]
        except KeyError:
            future.set_exception(phub.PhubError(
                "a DDP bucket holds a parameter PHub does not know: create the PhubState from "
                "the model DDP wraps, after moving it to its device, and do not replace "
                "parameters afterwards"))
            return future
        job = _Job(ids, future, bucket.buffer())
        with self._lock:
            self._in_flight += 1
        grads = bucket.gradients()
        try:
            if self.deferred is not None:
                self.deferred.before_push(ids)
            if self._values_due:  # the iteration's first bucket: its values go first
                self._values_due = False
                self.client.step_with(self._values_of())
            if self.staged:
                for i, g in zip(ids, grads):
                    self._sent_views[i].copy_(g.detach().reshape(-1))
                self.client.push_many(ids, self.streams.current())  # the GIL released once
            else:
                for i, g in zip(ids, grads):
                    self.client.push(i, g.detach().reshape(-1).numpy())
        except BaseException as e:  # noqa: B902 - every failure must reach the future
            self._fail(e)
            self._finish(job, None, e)
            return future
        if self.deferred is not None:  # the answers are waited for in the next forward
            self.deferred.pushed(ids)
            self._finish(job, job.buffer, None)
            return future
        self._waits.put(job)
        return future

    # ---- threads ----
    def _wait_loop(self):
        while True:
            job = self._waits.get()
            if job is _STOP:
                return
            ids, buffer = job.ids, job.buffer
            try:
                if self.error is not None:
                    raise self.error
                if self.staged:  # blocks on the network; then this stream waits on the device
                    self.client.wait_many(ids, self.streams.waiter())
                    with self.streams.on_waiter():
                        result = buffer if self.mode == "optimizer" else self._averaged(ids, buffer)
                        self._finish(job, result, None)  # the event: on the waiter's stream
                    continue
                self.client.wait_many(ids)
                result = buffer if self.mode == "optimizer" else self._averaged(ids, buffer)
            except BaseException as e:  # noqa: B902
                self._fail(e)
                self._finish(job, None, e)  # a no-op if the job already finished
                continue
            self._finish(job, result, None)

    def _averaged(self, ids, buffer):
        span = consecutive_span(self._offset, self._sizes, ids)
        if span is not None:
            return self.received[span]
        return torch.cat([self.received_views[i] for i in ids])  # on a GPU: on self._stream

    def _fail(self, error: BaseException):
        if self.error is None:
            self.error = error

    def _finish(self, job, result, error):
        """Completes the job's future and counts it done, once: a second call (an error raised
        after the first, e.g. while leaving the CUDA stream's context) does nothing, so the
        future is never set twice and the count never drops below the buckets in flight."""
        with self._lock:
            if job.finished:
                return
            job.finished = True
        try:
            if error is not None:
                job.future.set_exception(error)
            else:
                try:
                    job.future.set_result(result)
                except BaseException as e:  # noqa: B902 - the future must still complete
                    self._fail(e)
                    job.future.set_exception(e)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._idle.notify_all()

    # ---- the user's side ----
    def synchronize(self, timeout: Optional[float] = None):
        """Blocks until every bucket submitted so far has completed; raises the first error."""
        with self._lock:
            if not self._idle.wait_for(lambda: self._in_flight == 0, timeout):
                raise phub.PhubError(f"{self._in_flight} buckets still in flight after "
                                     f"{timeout} s")
        if self.error is not None:
            raise self.error

    def install_weights(self):
        """Optimizer mode: the weights phubd sent become the parameters; the next bucket is
        the next iteration's first."""
        self.synchronize()
        self.next_iteration()
        self.streams.join_waiter()  # the answers' copies were made on the waiter's stream
        with torch.no_grad():
            for p, v in zip(self.params, self.received_views):
                p.copy_(v.view_as(p))

    def next_iteration(self):
        """The next bucket is the next iteration's first (its values go to phubd first)."""
        self._values_due = self._values_of is not None

    def close(self):
        """Leaves the job cleanly (phubd ends it once every worker has). Idempotent."""
        self._close(goodbye=True)

    def abandon(self):
        """Closes without leaving the job: phubd takes this worker as lost, as a killed one, so
        an elastic job holds for restarted workers rather than ending. Idempotent."""
        self._close(goodbye=False)

    def _at_exit(self):
        # Python's shutdown without close(): in an elastic job a worker whose data has not run
        # out is being stopped (sys.exit in a SIGTERM handler at a torchrun restart, an
        # exception), not done, and must not say Goodbye: when every worker of a restart says
        # it, the job ends and the restarted workers start a new one from their initial weights.
        self._close(goodbye=self._done_or_fixed("Python's shutdown"))

    def _done_or_fixed(self, what: str) -> bool:
        """Whether closing now says Goodbye: yes in a fixed job or once the worker's batches
        ran out; else the worker is stopped, not done, and abandons (a warning says so)."""
        if self.elastic is None or self.finished:
            return True
        if not getattr(self, "_closed", True):
            warnings.warn(
                f"{what} before this worker's batches() ran out and without close(): phubd takes "
                "it as lost and holds the elastic job for workers that join (as at a torchrun "
                "restart); if none come within phubd's --rejoin-timeout-ms the job stalls and a "
                "new job under its name is refused for --stalled-name-memory-ms. Call "
                "optimizer.close() when training ends", RuntimeWarning, stacklevel=3)
        return False

    def _close(self, goodbye: bool):
        if getattr(self, "_closed", True):
            return
        if goodbye and self.deferred is not None and self.error is None:
            try:  # the last step's weights: in the model, and off the wire before the BYEs
                self.deferred.install_all()
            except BaseException:  # noqa: B902 - recorded; the close goes on
                pass
        self._closed = True
        atexit.unregister(self._at_exit)
        # The client first: a waiter blocked in client.wait() (phubd or a peer silent) returns
        # with an error at once, rather than close() waiting out the network's deadlines for
        # the join. Buckets still queued then complete with that error.
        try:
            if goodbye:
                self.client.close()
            else:
                self.client.abandon()
        finally:
            self._waits.put(_STOP)
            for t in self._threads:
                t.join()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        # Leaving the block by an exception (SystemExit from a SIGTERM handler included) is a
        # stop, not the end, as at Python's shutdown.
        self._close(goodbye=exc_type is None or self._done_or_fixed("an exception"))


def connect(model: torch.nn.Module, address: Optional[str] = None, **kwargs) -> PhubState:
    """The state for allreduce_hook: joins phubd's job in summation mode (the mean gradient
    comes back). Blocks until every rank has joined. kwargs: rank, world_size, token,
    connect_timeout_ms, rdma_device, job (torchrun's RANK/WORLD_SIZE and PHUB_ADDRESS by default).
    Not elastic (min_workers/max_workers are refused): use ServerOptimizer for that."""
    return PhubState(model, "average", None, address, **kwargs)


def allreduce_hook(state: PhubState, bucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's gradients through phubd (register_comm_hook)."""
    # Through then(): a future failed with set_exception() holds the exception as its value,
    # which DDP's C++ side reads as "Unable to cast <it> to Tensor"; a callback that raises
    # fails the future it returns with the exception's own message, which DDP raises as is.
    return state.submit(bucket).then(lambda done: done.value())

