"""Elastic jobs from Python (docs/torch.md "Elastic jobs and torchrun --nnodes=MIN:MAX").

An elastic job has min..max workers; workers join it running and leave it, and phubd keeps the
weights and the optimizer's state throughout (docs/design.md "Elastic jobs"). Two things here,
neither needing torch:

- elastic_size(): the job's (min, max), from arguments or PHUB_MIN_WORKERS / PHUB_MAX_WORKERS.
  Never from WORLD_SIZE: torchrun's agent restarts every worker with a new WORLD_SIZE at each
  change, and a job's size must be the same in every Hello it ever gets.
- ElasticBatches: this worker's batches of sample indices, following the job's members
  iteration by iteration (the rule of worker/data/elastic_batches.h).
"""
import os
from typing import Callable, Iterator, List, Optional, Tuple

import numpy as np

__all__ = ["elastic_size", "ElasticBatches", "local_process_group"]


def _env_count(name: str) -> Optional[int]:
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(f"{name}={text!r}: give a count of workers (an integer >= 1)")
    return int(text)


def elastic_size(min_workers: Optional[int] = None,
                 max_workers: Optional[int] = None) -> Optional[Tuple[int, int]]:
    """(min, max) of an elastic job, or None for a fixed one (neither given nor in the
    environment). An argument wins over PHUB_MIN_WORKERS / PHUB_MAX_WORKERS; min defaults to 1
    when only the maximum is given; the maximum is required."""
    lo = min_workers if min_workers is not None else _env_count("PHUB_MIN_WORKERS")
    hi = max_workers if max_workers is not None else _env_count("PHUB_MAX_WORKERS")
    if lo is None and hi is None:
        return None
    if hi is None:
        raise ValueError(
            f"an elastic job of at least {lo} workers needs its maximum: pass max_workers= or set "
            "PHUB_MAX_WORKERS (for torchrun --nnodes=MIN:MAX --nproc_per_node=P: MAX x P); it "
            "cannot come from WORLD_SIZE, which torchrun changes at every restart")
    lo = 1 if lo is None else lo
    if not 1 <= lo <= hi:
        raise ValueError(f"elastic job of {lo} to {hi} workers: need 1 <= min_workers <= "
                         "max_workers")
    return lo, hi


class ElasticBatches:
    """This worker's mini-batches of an elastic job, as lists of sample indices.

    The job's batches are numbered over the whole job, not per worker (the rule of
    worker/data/elastic_batches.h): epoch e is a permutation of range(num_samples) drawn from
    (seed, e) and cut into P = num_samples // batch_size batches, global batches e*P ..
    (e+1)*P - 1 (the last num_samples % batch_size samples of an epoch are not used). In
    iteration t the members take global batches before(t) .. before(t) + world(t) - 1, one each
    by their place among t's members (members_of(t): member_iterations_before, index, world). So
    whoever joins or leaves, no batch is taken twice and none is skipped, but a lost member's:
    phubd completes the iteration it was in, and at times the next, without it. The job stops at
    the first iteration t with before(t) >= epochs x P, the same one on every member: the last
    iteration's batches may come from epoch `epochs`. The iteration also stops when phubd says
    this worker is no longer a member (it asked to leave). The permutation is numpy's
    (default_rng([seed, e])), not phub-worker's mt19937, so a Python job and a phub-worker job
    do not see the same order.

    `client`: anything with members_of(t) (a phub.PsClient); `iteration`: a callable giving
    the job iteration the next batch is for (ServerOptimizer's `iteration`: phubd's resume
    point + 1 + the steps since). next() asks members_of(iteration()) — which blocks until the
    weights of iteration - 1 have landed — and refuses to be asked twice for one iteration: it
    must not read ahead. So use it one batch per step(), on the training thread:

        for indices in batches:                              # a list of sample indices
            x, y = collate([dataset[i] for i in indices])
            ...; loss.backward(); optimizer.step()

    or as a DataLoader's batch_sampler with num_workers=0 (the default), which asks the sampler
    for the next batch only when the loop asks for it:

        loader = DataLoader(dataset, batch_sampler=batches)  # num_workers=0

    A DataLoader with num_workers > 0 prefetches 2 x num_workers batches from its sampler as
    its iterator starts — iterations whose members phubd has not decided yet — and is refused
    (the second next() for one iteration raises). Every member must call step() after every
    batch it is given, and stop when this iterator stops.

    `batches_taken` lists the global batch numbers this worker was given, in order.
    """

    def __init__(self, client, iteration: Callable[[], int], num_samples: int,
                 batch_size: int, seed: int = 0, epochs: int = 1,
                 on_done: Optional[Callable[[], None]] = None):
        if batch_size < 1 or num_samples < batch_size:
            raise ValueError(f"ElasticBatches: batch {batch_size} of a dataset of {num_samples} "
                             "samples: give a batch of 1 up to the dataset's size")
        if epochs < 1:
            raise ValueError(f"ElasticBatches: epochs={epochs}: give 1 or more")
        self.client = client
        self._iteration = iteration
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.seed = seed
        self.epochs = epochs
        self.batches_per_epoch = num_samples // batch_size
        self.total_batches = epochs * self.batches_per_epoch
        self.batches_taken: List[int] = []
        self.last_members: Optional[dict] = None
        self._asked: Optional[int] = None  # the iteration the last batch was for
        self._done = False
        self._on_done = on_done  # called once, when the batches stop
        self._epoch = -1
        self._order: Optional[np.ndarray] = None

    def order_of_epoch(self, epoch: int) -> np.ndarray:
        """Epoch `epoch`'s permutation of the sample indices (the same on every worker)."""
        if epoch != self._epoch:
            self._order = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
            self._epoch = epoch
        return self._order

    def batch(self, global_batch: int) -> List[int]:
        """The sample indices of global batch `global_batch`."""
        epoch, step = divmod(global_batch, self.batches_per_epoch)
        order = self.order_of_epoch(epoch)
        return order[step * self.batch_size:(step + 1) * self.batch_size].tolist()

    def __iter__(self) -> Iterator[List[int]]:
        return self

    def __next__(self) -> List[int]:
        if self._done:
            raise StopIteration
        t = int(self._iteration())
        if t == self._asked:
            raise RuntimeError(
                f"ElasticBatches asked twice for iteration {t}: it must not read ahead (a "
                "DataLoader with num_workers > 0 prefetches, iterations whose members phubd has "
                "not decided yet); use num_workers=0 and call optimizer.step() after every batch")
        members = self.client.members_of(t)
        self.last_members = members
        before = int(members["member_iterations_before"])
        if not members["member"] or before >= self.total_batches:
            self._done = True
            if self._on_done is not None:
                self._on_done()
            raise StopIteration
        self._asked = t
        global_batch = before + int(members["index"])
        self.batches_taken.append(global_batch)
        return self.batch(global_batch)


_LOCAL_GROUP = None


def local_process_group():
    """A process group of this process alone (gloo, size 1), for DDP in an elastic job:
    DistributedDataParallel(model, process_group=phub.torch.local_process_group()). Needs no
    init_process_group. An elastic job's workers must not share a DDP group: phubd admits
    joiners at iteration boundaries of its own choosing, so workers of one torchrun group may
    start at different iterations, and DDP's collectives after construction (its bucket rebuild
    at each process's second iteration, buffer broadcasts) would wait for a peer that waits on
    phubd for them. With ServerOptimizer DDP needs no peer: phubd holds the weights."""
    global _LOCAL_GROUP
    if _LOCAL_GROUP is None:
        import torch.distributed as dist
        _LOCAL_GROUP = dist.ProcessGroupGloo(dist.HashStore(), 0, 1)
    return _LOCAL_GROUP
