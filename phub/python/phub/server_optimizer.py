"""phub.torch's ServerOptimizer: PHub's design behind a torch optimizer, phubd's fused optimizer
steps the weights and step() installs them (docs/torch.md). Imported through phub.torch:

    optimizer = phub.torch.ServerOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1))
"""
from typing import Optional

import torch
from torch.nn.parallel import DistributedDataParallel

from phub.device_streams import staged_of
from phub.elastic import ElasticBatches, elastic_size
from phub.ddp_hook import PhubState, allreduce_hook
from phub.weights_in_forward import WeightsInForward


def optimizer_spec(optimizer: torch.optim.Optimizer) -> dict:
    """phubd's spec of a torch optimizer it can run: SGD (plain, momentum, Nesterov) and Adam,
    with L2 weight decay, one set of hyper-parameters for every parameter. Anything else is
    refused with what to change, never approximated."""
    groups = optimizer.param_groups
    keys = ("lr", "momentum", "dampening", "nesterov", "weight_decay", "betas", "eps",
            "amsgrad", "maximize")
    first = {k: groups[0].get(k) for k in keys}
    for g in groups[1:]:
        if {k: g.get(k) for k in keys} != first:
            raise ValueError("the optimizer's parameter groups have different hyper-parameters:"
                             " phubd runs one optimizer per job; use one group")
    if first["maximize"]:
        raise ValueError("maximize=True is not supported by phubd's optimizers")
    if type(optimizer) is torch.optim.SGD:
        if first["dampening"]:
            raise ValueError(f"SGD dampening={first['dampening']}: phubd's momentum has none")
        momentum = first["momentum"] or 0.0
        kind = "sgd" if momentum == 0 else ("nesterov" if first["nesterov"] else "momentum")
        return {"kind": kind, "lr": first["lr"], "momentum": momentum,
                "weight_decay": first["weight_decay"]}
    if type(optimizer) is torch.optim.Adam:
        if first["amsgrad"]:
            raise ValueError("Adam amsgrad=True is not supported by phubd's Adam")
        b1, b2 = first["betas"]
        return {"kind": "adam", "lr": first["lr"], "beta1": b1, "beta2": b2,
                "eps": first["eps"], "weight_decay": first["weight_decay"]}
    raise ValueError(f"{type(optimizer).__name__} is not one of phubd's optimizers: use "
                     "torch.optim.SGD (plain, momentum, nesterov) or torch.optim.Adam, or the "
                     "summation mode (phub.torch.connect + allreduce_hook) with any optimizer")


def check_server_steps(module: torch.nn.Module, optimizer: torch.optim.Optimizer, spec: dict,
                       find_unused_parameters: bool = False):
    """Refuses what phubd would do differently from `optimizer` on `module`: phubd steps every
    parameter DDP reduces (every trainable one), every iteration, gradient or not."""
    trainable = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    stepped = {id(p) for g in optimizer.param_groups for p in g["params"]}
    missing = [n for n, p in trainable if id(p) not in stepped]
    if missing:
        raise ValueError(
            f"the optimizer steps {len(trainable) - len(missing)} of the model's "
            f"{len(trainable)} trainable parameters (not {', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}): phubd steps every parameter DDP reduces; "
            "give the optimizer all of model.parameters(), or set requires_grad=False on the "
            "others before wrapping the model in DistributedDataParallel")
    if stepped - {id(p) for _, p in trainable}:
        raise ValueError("the optimizer holds parameters that are not the model's trainable "
                         "ones: phubd steps only what DDP reduces; build the optimizer over "
                         "model.parameters()")
    moves_without_gradient = spec["kind"] != "sgd" or spec.get("weight_decay")
    if find_unused_parameters and moves_without_gradient:
        raise ValueError(
            f"find_unused_parameters=True with {spec['kind']}"
            f"{' and weight_decay' if spec.get('weight_decay') else ''}: a parameter without a "
            "gradient in a step would still be moved by phubd (momentum, Adam's moments, weight "
            "decay), which torch leaves untouched; use plain SGD without weight decay, or the "
            "summation mode (phub.torch.connect + allreduce_hook) with this optimizer")


def refuse_overlap(model: DistributedDataParallel, kwargs: dict):
    """What overlap_forward=True cannot serve yet, refused with what to do instead."""
    if elastic_size(kwargs.get("min_workers"), kwargs.get("max_workers")) is not None:
        raise ValueError("overlap_forward=True in an elastic job: not yet (a joiner's weights "
                         "are installed whole); leave overlap_forward off there")
    cpu = all(p.device.type == "cpu" for p in model.module.parameters())
    staged = cpu and staged_of(kwargs.get("staged"), cuda=False)  # copies the gradients first
    if cpu and not staged and getattr(model, "gradient_as_bucket_view", False):
        raise ValueError("overlap_forward=True with gradient_as_bucket_view=True on CPU: "
                         "phubd's transport sends the gradients straight from DDP's buckets "
                         "while the script's zero_grad() would already clear them; leave "
                         "gradient_as_bucket_view off, or overlap_forward")


class ServerOptimizer(torch.optim.Optimizer):
    """PHub's design: phubd's fused optimizer steps the weights; step() installs them.

    Wraps the torch optimizer the script already builds and registers the hook on `model` (a
    DistributedDataParallel). It is an Optimizer over the same parameter groups (the very
    dicts), so torch.optim.lr_scheduler's schedulers work on it (or on the wrapped one) as they
    are: at each iteration's first bucket, param_groups[0]'s lr, momentum, weight_decay, betas
    and eps go to phubd, which steps that iteration with them (docs/torch.md "Schedules"). The
    optimizer's kind is the job's: a change of kind (SGD's momentum from 0 up) is refused. Call
    step() after every backward. The parameters' .grad hold the worker's own gradient (phubd
    applied the mean). phubd holds the optimizer's state (momentum, Adam's moments);
    state_dict() fetches it in torch's layout and load_state_dict() restores it there.

    Elastic (min_workers=, max_workers= or PHUB_MIN_WORKERS, PHUB_MAX_WORKERS; docs/torch.md
    "Elastic jobs and torchrun --nnodes=MIN:MAX"): the job outlives its workers. A worker that
    connects while it runs — every worker torchrun's agent restarts — joins it: its parameters
    become the job's current weights and `iteration` the job's next one. The script then
    fast-forwards its schedule (`for _ in range(optimizer.iteration - 1): scheduler.step()`:
    every member must give phubd the same values for an iteration) and takes its data from
    ElasticBatches (optimizer.batches(...)), never from a sampler of its own rank and world.
    DDP must then run over a group of its own (local_process_group()), not torchrun's world.

    overlap_forward=True (weights_in_forward.py; docs/torch.md "Weights in the next forward"):
    step() returns at once and each module's weights are installed as its next forward starts,
    so the exchange overlaps the next forward; parameters read outside a forward need
    wait_for_weights() first."""

    def __init__(self, model: DistributedDataParallel, optimizer: torch.optim.Optimizer,
                 address: Optional[str] = None, overlap_forward: bool = False, **kwargs):
        if not isinstance(model, DistributedDataParallel):
            raise TypeError("ServerOptimizer wraps a DistributedDataParallel model")
        if overlap_forward:
            refuse_overlap(model, kwargs)
        self.optimizer = optimizer
        self.spec = optimizer_spec(optimizer)
        self._find_unused = getattr(model, "find_unused_parameters", False)
        check_server_steps(model.module, optimizer, self.spec, self._find_unused)
        # The wrapped optimizer's group dicts themselves: a value set on either is set on both.
        super().__init__(optimizer.param_groups, optimizer.defaults)
        if elastic_size(kwargs.get("min_workers"), kwargs.get("max_workers")) is not None:
            group = getattr(model, "process_group", None)
            if group is not None and group.size() > 1:
                raise ValueError(
                    f"an elastic job with DDP over a process group of {group.size()}: workers "
                    "join phubd's job at different iterations, and DDP's collectives after "
                    "construction (its bucket rebuild at each process's second iteration) would "
                    "deadlock against phubd; give DDP a group of its own: DistributedDataParallel("
                    "model, process_group=phub.torch.local_process_group())")
        self.phub = PhubState(model, "optimizer", self.spec, address, values_of=self._values_now,
                              **kwargs)
        # Rank 0's initial weights, through phubd; a joiner's: the job's, of resume_iteration.
        self.phub.install_weights()
        self._steps = 0
        if overlap_forward:
            self.phub.deferred = WeightsInForward(self.phub, model.module,
                                                  check_use=not self._find_unused)
        model.register_comm_hook(self.phub, allreduce_hook)

    @property
    def iteration(self) -> int:
        """The job iteration the next step() completes (1 in a fresh job): phubd's resume point
        for a worker that joined a running job, + 1, + the steps since. A schedule stepped once
        per iteration is right for it after iteration - 1 scheduler.step()s."""
        return self.phub.resume_iteration + 1 + self._steps

    def batches(self, num_samples: int, batch_size: int, seed: int = 0,
                epochs: int = 1) -> ElasticBatches:
        """This worker's batches of sample indices (ElasticBatches): one per step(), following
        phubd's members of each iteration. In a fixed job too (its members: every rank)."""
        def finished():
            self.phub.finished = True

        self.phub.finished = False  # a new pass: its exit before the end is a stop again
        return ElasticBatches(self.phub.client, lambda: self.iteration, num_samples, batch_size,
                              seed=seed, epochs=epochs, on_done=finished)

    def _values_now(self) -> dict:
        """The hyper-parameters the iteration starting now steps with (the hook's thread, at
        the iteration's first bucket: after the script's scheduler.step())."""
        spec = optimizer_spec(self.optimizer)  # the groups still agree; nothing unsupported
        kind = spec.pop("kind")
        # Momentum (or Nesterov) at 0 is plain SGD, in torch and in phubd alike.
        if kind != self.spec["kind"] and not (kind == "sgd" and self.spec["kind"] in
                                              ("momentum", "nesterov")):
            raise ValueError(f"the optimizer became {kind} (its hyper-parameters changed kind); "
                             f"phubd runs {self.spec['kind']} for the whole job: change values, "
                             "not the kind")
        if self._find_unused and spec.get("weight_decay"):
            raise ValueError("weight_decay set with find_unused_parameters=True: a parameter "
                             "without a gradient would still decay on phubd; keep it 0")
        return spec

    def zero_grad(self, set_to_none: bool = False):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("ServerOptimizer.step takes no closure: phubd steps once per "
                             "backward")
        if self.phub.deferred is None:
            self.phub.install_weights()
        else:  # the weights come in as the next forward reaches each module
            if self.phub.error is not None:
                raise self.phub.error
            self.phub.next_iteration()
        self._steps += 1

    def wait_for_weights(self):
        """With overlap_forward, makes every parameter hold the last step()'s weights now (to
        read them outside a forward: an EMA, logging); without it they always do."""
        if self.phub.deferred is not None:
            self.phub.deferred.install_all()

    def add_param_group(self, param_group):
        if getattr(self, "phub", None) is None:  # Optimizer.__init__ adds the wrapped groups
            return super().add_param_group(param_group)
        raise ValueError("ServerOptimizer cannot take a parameter group after the job started: "
                         "phubd's tensor table is fixed; build the optimizer over every "
                         "parameter first")

    def _param_order(self):
        """(torch's index, PHub's tensor, parameter) in param_groups order: the indices torch's
        state_dict() gives parameters, and PHub's tensors of them."""
        order, index = [], 0
        for group in self.param_groups:
            for p in group["params"]:
                order.append((index, self.phub._index[p.data_ptr()], p))
                index += 1
        return order

    def state_dict(self):
        """torch's layout, with the state phubd holds (fetched now): SGD's momentum_buffer,
        Adam's step, exp_avg and exp_avg_sq, so the same torch optimizer could load it too; and
        "phub_steps", the optimizer's steps. Call between step() and the next backward. The
        tensors are on the parameters' device (a GPU model's on its GPU), as torch keeps them."""
        self.wait_for_weights()
        self.phub.synchronize()
        steps, arrays = self.phub.client.fetch_optimizer_state()
        kind = self.spec["kind"]
        state = {}
        for index, tensor, p in self._param_order():
            def shaped(a):  # on the parameter's device, as torch's own optimizer keeps it
                return torch.from_numpy(arrays[a][tensor]).view_as(p).to(p.device, copy=True)
            if kind == "adam":
                state[index] = {"step": torch.tensor(float(steps)), "exp_avg": shaped(0),
                                "exp_avg_sq": shaped(1)}
            elif kind in ("momentum", "nesterov"):
                state[index] = {"momentum_buffer": shaped(0)}
            else:
                state[index] = {"momentum_buffer": None}
        groups, index = [], 0
        for group in self.param_groups:
            saved = {k: v for k, v in group.items() if k != "params"}
            saved["params"] = list(range(index, index + len(group["params"])))
            index += len(group["params"])
            groups.append(saved)
        return {"state": state, "param_groups": groups, "phub_steps": steps}

    def load_state_dict(self, state_dict):
        """Starts phubd's optimizer from `state_dict` (this class's, or the same torch
        optimizer's): every rank, after construction and before the first backward. The
        param_groups' values are taken too, as torch does. Then the job steps as if the saved
        steps came before: a job restarted from torch.save()/torch.load() of the model and this
        continues bitwise."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups) or any(
                len(s["params"]) != len(g["params"]) for s, g in zip(saved_groups,
                                                                      self.param_groups)):
            raise ValueError("the state_dict's parameter groups do not match the optimizer's: "
                             "load it into the optimizer of the same model")
        kind = self.spec["kind"]
        names = {"adam": ["exp_avg", "exp_avg_sq"], "momentum": ["momentum_buffer"],
                 "nesterov": ["momentum_buffer"]}.get(kind, [])
        saved_state = state_dict["state"]
        order = self._param_order()
        arrays = [[None] * len(self.phub.params) for _ in names]
        steps = set()
        for index, tensor, p in order:
            entry = saved_state.get(index, {})
            for a, name in enumerate(names):
                value = entry.get(name)
                if value is None:  # torch's state before any step: zero
                    value = torch.zeros_like(p)
                if value.shape != p.shape:
                    raise ValueError(f"state {name} of parameter {index} is {tuple(value.shape)}; "
                                     f"the parameter is {tuple(p.shape)}")
                arrays[a][tensor] = value.detach().to(torch.float32).cpu().reshape(-1).numpy()
            if kind == "adam":
                steps.add(int(entry["step"]) if "step" in entry else 0)
        if kind == "adam":
            if len(steps) != 1:
                raise ValueError(f"Adam's parameters were stepped {sorted(steps)} times: phubd "
                                 "steps every parameter together")
            count = steps.pop()
        else:
            count = int(state_dict.get("phub_steps", 0))
        self.phub.client.restore_optimizer_state(count, arrays if self.phub.rank == 0 else [])
        for group, saved in zip(self.param_groups, saved_groups):
            for key, value in saved.items():
                if key != "params":
                    group[key] = value

    def close(self):
        """Leaves phubd's job (a Goodbye), the last step()'s weights installed. Idempotent."""
        self.phub.close()

    def abandon(self):
        """Closes without leaving phubd's job, as a killed worker: an elastic job holds for
        restarted workers (Python's shutdown does this by itself while the worker's
        batches() have not run out). Idempotent."""
        self.phub.abandon()
