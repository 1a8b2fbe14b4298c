"""ServerOptimizer(overlap_forward=True): phubd's fresh weights installed module by module in the
next forward, not all of them in step() (PHub's design; phub-worker does the same in C++).

Without it, step() waits for every tensor's weights before it returns, so the last buckets'
round trip through phubd is exposed after every backward. With it, step() returns at once, and a
forward pre-hook on each module waits for that module's own parameters (and only those) and
copies them in: the exchange's tail overlaps the next forward's first layers, and the script's
own work between step() and the next forward (data loading, a scheduler) overlaps all of it.

The contract it needs (docs/torch.md "Weights in the next forward"): a parameter is used by the
forward of the module that holds it, or after that forward ran. One whose module's forward did
not run (F.linear(x, self.head.weight) without calling self.head) still held the previous step's
weights when it was used: the forward's end finds it not installed and raises, naming it. With
find_unused_parameters=True such a parameter may simply be unused, so it is installed there
instead (one that was used then fails autograd's in-place check in backward). Parameters read
outside a forward (an EMA copy, logging) must be installed first: optimizer.wait_for_weights().
module.state_dict() installs them itself.
"""
import threading
from typing import Iterable, List

import torch

import phub


class WeightsInForward:
    """The deferred weights of one PhubState (optimizer mode) and the hooks that install them."""

    def __init__(self, state, module: torch.nn.Module, check_use: bool):
        self._state = state
        self._check_use = check_use
        self._lock = threading.Lock()
        self._pending = set()  # pushed; their weights not yet in the parameters
        self._handles = []
        for sub in module.modules():
            ids = [state._index[p.data_ptr()] for p in sub.parameters(recurse=False)
                   if p.data_ptr() in state._index]
            if ids:
                self._handles.append(sub.register_forward_pre_hook(self._before(ids)))
        # The forward's end: what its modules did not take (a module that did not run).
        self._handles.append(module.register_forward_hook(lambda *_: self._after_forward()))
        # model.state_dict() shares the parameters' storage: installed in place, it holds the
        # fresh weights. (A private hook in torch 1.13 and 2.x alike.)
        self._handles.append(module._register_state_dict_hook(lambda *_: self.install_all()))

    def _before(self, ids: List[int]):
        def hook(_module, _inputs):
            self._install(ids)
        return hook

    def _after_forward(self):
        with self._lock:
            missed = sorted(self._pending)
        if missed and self._check_use:
            self._refuse(missed, "did not run in this forward")
        self._install(missed)  # find_unused_parameters: maybe unused

    def _refuse(self, ids, what: str):
        names = ", ".join(self._state.names[i] for i in ids[:3])
        error = phub.PhubError(
            f"the module of parameter {names}{', ...' if len(ids) > 3 else ''} {what}, so "
            "with ServerOptimizer(overlap_forward=True) the parameter still held the previous "
            "step's weights (each module's come in as its forward starts): it was used that "
            "way (call the module rather than reading its parameter) or not at all (DDP then "
            "needs find_unused_parameters=True); or construct ServerOptimizer without "
            "overlap_forward (docs/torch.md)")
        self._state._fail(error)
        raise error

    # ---- the hook's side (DDP's autograd thread) ----
    def before_push(self, ids: Iterable[int]):
        """Called before a bucket's pushes: PsClient refuses to push a tensor whose answer was
        not waited for, and a forward that did not pass through the model (a submodule called
        by hand) may have left some."""
        with self._lock:
            stale = [i for i in ids if i in self._pending]
        if stale:
            self._install(stale)
            if self._check_use:
                self._refuse(stale, "was not called through the model this step")

    def pushed(self, ids: Iterable[int]):
        with self._lock:
            self._pending.update(ids)

    # ---- the user's side ----
    def install_all(self):
        """Every parameter pushed so far holds phubd's weights when this returns."""
        self._install(None)

    def _install(self, ids):
        if not self._pending:  # every module's call but the first of each step's
            return
        with self._lock:
            due = sorted(self._pending) if ids is None else [i for i in ids if i in self._pending]
        if not due:
            return
        state = self._state
        if state.error is not None:
            raise state.error
        try:
            if state.staged:  # the host waits for the network; the current stream for the copy
                state.client.wait_many(due, state.streams.current())
            else:
                state.client.wait_many(due)
        except BaseException as e:  # noqa: B902 - every later call fails the same way
            state._fail(e)
            raise
        with torch.no_grad():
            for i in due:
                state.params[i].copy_(state.received_views[i].view_as(state.params[i]))
        with self._lock:
            self._pending.difference_update(due)

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles.clear()
