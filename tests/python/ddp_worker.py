#!/usr/bin/python3
"""One rank of a DDP job for tests/python/test_torch_ddp.py, launched as torchrun would: RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT (gloo, which DDP itself needs) and PHUB_ADDRESS
in the environment. Runs one scenario and torch.save()s what the test compares to OUT_DIR/rank<RANK>.pt.

  ddp_worker.py SCENARIO OUT_DIR       (writes OUT_DIR/rank<RANK>.pt)
  PHUB_TEST_DEVICE=cuda: the models on GPU 0 (the hook's and ServerOptimizer's CUDA path)
  grads        per-iteration averaged gradients: DDP's own gloo allreduce vs the phub hook,
               and the parameters each bucket held (DDP rebuilds its buckets after iteration 0)
  train        K steps of momentum SGD: DDP + gloo vs DDP + phub hook, final parameters
  server-KIND  K steps: DDP + gloo + the local torch optimizer KIND (sgd, momentum, nesterov,
               adam) vs phub.torch.ServerOptimizer wrapping the same optimizer
  scheduled-KIND  60 steps of torch's schedulers (warm-up + cosine, or step decay) and a weight
               decay switched off halfway: local optimizer vs ServerOptimizer, the scheduler on it
  state-KIND   ServerOptimizer.state_dict() after 3 of 6 steps vs the local optimizer's; a new
               job loaded from it runs steps 3..5 and must end bitwise where the first did
  overlap-KIND ServerOptimizer(overlap_forward=True) beside the same without it (two jobs): the
               parameters after each step() (unchanged: deferred), each forward's loss,
               model.state_dict() after step 2, the final parameters
  overlap-misuse  a parameter used without its module's forward: the forward must raise
  c10d         plain DDP with init_process_group("phub") vs DDP over a gloo group
  kind-changed SGD's momentum set from 0 to 0.9 mid-job: the next backward must raise
  connect-only joins the job in summation mode and leaves; saves the error if refused
  dead-phubd   trains until the test kills phubd; saves the error and how long it took
  dead-peer    rank 1 dies at step 3; the others save their error and how long it took
"""
import copy
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import phub
import phub.c10d  # noqa: F401 - registers the "phub" backend
import phub.torch

STEPS = 5
# PHUB_TEST_DEVICE=cuda (run_gpu.sh pytests): the models on GPU 0, every rank sharing it, so the
# hook and ServerOptimizer run phub.torch's CUDA path; results come back to the CPU.
DEVICE = torch.device("cuda:0" if os.environ.get("PHUB_TEST_DEVICE") == "cuda" else "cpu")


def make_model():
    torch.manual_seed(1234)  # the same model on every rank
    return nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 26 * 26, 64),
                         nn.ReLU(), nn.Linear(64, 10)).to(DEVICE)


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)  # different data on every rank
    x, y = torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g)
    return x.to(DEVICE), y.to(DEVICE)


def wrap(model):
    # Small buckets: several per iteration, and a rebuild after the first.
    return DDP(model, bucket_cap_mb=0.25)


def loss_of(model, rank, step):
    x, y = batch(rank, step)
    return nn.functional.cross_entropy(model(x), y)


def make_optimizer(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, weight_decay=1e-3)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)
    if kind == "nesterov":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True)
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-3, weight_decay=1e-3)
    raise ValueError(kind)


def train_steps(model, opt, rank, steps):
    """Steps `steps` (a range) of the rank's batches: zero_grad, backward, step."""
    for step in steps:
        opt.zero_grad()
        loss_of(model, rank, step).backward()
        opt.step()


def params_of(model):
    return [p.detach().cpu().clone() for p in model.parameters()]


def scenario_grads(rank):
    reference, ours = wrap(make_model()), wrap(make_model())
    state = phub.torch.connect(ours)
    seen = []

    def recording_hook(s, bucket):
        seen.append([s.names[s._index[p.data_ptr()]] for p in bucket.parameters()])
        return phub.torch.allreduce_hook(s, bucket)

    ours.register_comm_hook(state, recording_hook)
    out = {"gloo": [], "phub": [], "buckets": []}
    for step in range(3):
        seen.clear()
        for model, key in ((reference, "gloo"), (ours, "phub")):
            model.zero_grad()
            loss_of(model, rank, step).backward()
            out[key].append([p.grad.detach().cpu().clone() for p in model.parameters()])
        out["buckets"].append(list(seen))
    state.close()
    return out


def scenario_train(rank):
    reference, ours = wrap(make_model()), wrap(make_model())
    state = phub.torch.connect(ours)
    ours.register_comm_hook(state, phub.torch.allreduce_hook)
    for model in (reference, ours):
        train_steps(model, make_optimizer("momentum", model.parameters()), rank, range(STEPS))
    state.close()
    return {"gloo": params_of(reference), "phub": params_of(ours)}


def scenario_server(rank, kind):
    reference, ours = wrap(make_model()), wrap(make_model())
    local = make_optimizer(kind, reference.parameters())
    server = phub.torch.ServerOptimizer(ours, make_optimizer(kind, ours.parameters()))
    for model, opt in ((reference, local), (ours, server)):
        train_steps(model, opt, rank, range(STEPS))
    server.close()
    return {"local": params_of(reference), "server": params_of(ours)}


SCHEDULED_STEPS = 60


def schedule_for(kind, opt):
    """torch's own schedulers on `opt`: a warm-up then a cosine decay (SGD kinds), or step
    decay (Adam), and the weight decay switched off by hand at step 30."""
    if kind == "adam":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    warm_up = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=5)
    decay = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=SCHEDULED_STEPS - 5)
    return torch.optim.lr_scheduler.SequentialLR(opt, [warm_up, decay], milestones=[5])


def scenario_scheduled(rank, kind):
    reference, ours = wrap(make_model()), wrap(make_model())
    local = make_optimizer(kind, reference.parameters())
    server = phub.torch.ServerOptimizer(ours, make_optimizer(kind, ours.parameters()))
    lrs = {}
    # The scheduler is built on the ServerOptimizer itself: torch takes it for an Optimizer.
    for name, model, opt in (("local", reference, local), ("server", ours, server)):
        scheduler = schedule_for(kind, opt)
        lrs[name] = []
        for step in range(SCHEDULED_STEPS):
            if step == 30:
                for group in opt.param_groups:
                    group["weight_decay"] = 0.0
            lrs[name].append(opt.param_groups[0]["lr"])
            opt.zero_grad()
            loss_of(model, rank, step).backward()
            opt.step()
            scheduler.step()
    server.close()
    return {"local": params_of(reference), "server": params_of(ours), "lrs": lrs}


def scenario_state(rank, kind):
    """ServerOptimizer's state_dict after 3 of 6 steps (checked against the local torch
    optimizer's, and loadable into it), then a new job of a new model loaded from the saved
    model and optimizer runs steps 3..5: its parameters end bitwise where the first job did."""
    reference = wrap(make_model())
    local = make_optimizer(kind, reference.parameters())
    train_steps(reference, local, rank, range(3))

    first = wrap(make_model())
    server = phub.torch.ServerOptimizer(first, make_optimizer(kind, first.parameters()),
                                        job="first")
    for step in range(6):
        if step == 3:
            saved_model = copy.deepcopy(first.module.state_dict())
            saved_optimizer = copy.deepcopy(server.state_dict())
        server.zero_grad()
        loss_of(first, rank, step).backward()
        server.step()
    server.close()
    # The same torch optimizer takes ServerOptimizer's state_dict as its own.
    plain = make_optimizer(kind, make_model().parameters())
    plain.load_state_dict(saved_optimizer)

    again_model = make_model()
    again_model.load_state_dict(saved_model)
    again = wrap(again_model)
    restarted = phub.torch.ServerOptimizer(again, make_optimizer(kind, again.parameters()),
                                           job="again")
    restarted.load_state_dict(saved_optimizer)
    train_steps(again, restarted, rank, range(3, 6))
    restarted.close()
    local_state = local.state_dict()["state"]
    return {"first": params_of(first), "again": params_of(again),
            "server_state": saved_optimizer["state"], "local_state": local_state,
            "steps": saved_optimizer["phub_steps"]}


def scenario_overlap(rank, kind):
    """The same training through a ServerOptimizer that installs each step's weights at once
    and one that installs them module by module in the next forward: every forward must see
    the same weights (bitwise: phubd sums the two ranks' copies alike in both jobs)."""
    plain, lazy = wrap(make_model()), wrap(make_model())
    sync = phub.torch.ServerOptimizer(plain, make_optimizer(kind, plain.parameters()),
                                      job="plain")
    overlap = phub.torch.ServerOptimizer(lazy, make_optimizer(kind, lazy.parameters()),
                                         job="lazy", overlap_forward=True)
    out = {"losses": {"plain": [], "lazy": []}, "unchanged_after_step": []}
    for step in range(STEPS):
        for name, model, opt in (("plain", plain, sync), ("lazy", lazy, overlap)):
            opt.zero_grad()
            loss = loss_of(model, rank, step)
            out["losses"][name].append(loss.item())
            loss.backward()
            before = params_of(model)
            opt.step()
        out["unchanged_after_step"].append(
            all(torch.equal(a, b) for a, b in zip(before, params_of(lazy))))
        if step == 2:  # model.state_dict() installs what is pending
            out["state_dict"] = [v.cpu().clone() for v in lazy.module.state_dict().values()]
            out["state_dict_plain"] = [v.cpu().clone() for v in plain.module.state_dict().values()]
    sync.close()
    overlap.close()  # installs the last step's weights
    out.update({"plain": params_of(plain), "lazy": params_of(lazy)})
    return out


class HeadByHand(nn.Module):
    """Uses self.head's parameters without calling self.head: overlap_forward's contract broken."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1234)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 32), nn.ReLU())
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return nn.functional.linear(self.body(x), self.head.weight, self.head.bias)


def scenario_overlap_misuse(rank):
    model = wrap(HeadByHand().to(DEVICE))
    server = phub.torch.ServerOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.05),
                                        overlap_forward=True)
    return steps_until_an_error(model, server, rank)


def steps_until_an_error(model, server, rank, before_step=lambda step: None):
    """Up to 3 steps; the first error's text and step, or {"error": None}."""
    for step in range(3):
        before_step(step)
        server.zero_grad()
        try:
            loss_of(model, rank, step).backward()
            server.step()
        except (RuntimeError, ValueError) as e:
            return {"error": str(e), "step": step}
    return {"error": None}


def scenario_c10d(rank):
    """Plain DDP over the default group, the "phub" backend, against DDP over a gloo group: the
    same momentum training; and a collective the backend does not do."""
    gloo = dist.new_group(backend="gloo")
    reference = DDP(make_model(), bucket_cap_mb=0.25, process_group=gloo)
    ours = DDP(make_model(), bucket_cap_mb=0.25)  # no hook, no other line
    for model in (reference, ours):
        train_steps(model, make_optimizer("momentum", model.parameters()), rank, range(STEPS))
    group = dist.distributed_c10d._get_default_group()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)  # a plain all_reduce goes through phubd as well
    refused = ""
    try:
        dist.reduce_scatter(torch.zeros(2), [torch.zeros(2), torch.zeros(2)])
    except RuntimeError as e:
        refused = str(e)
    return {"gloo": params_of(reference), "phub": params_of(ours), "pieces": group.pieces,
            "client": type(group._client).__name__,
            "backend": dist.get_backend(), "total": float(total), "refused": refused}


def scenario_kind_changed(rank):
    model = wrap(make_model())
    server = phub.torch.ServerOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.05))

    def raise_momentum(step):
        if step == 1:
            server.param_groups[0]["momentum"] = 0.9

    return steps_until_an_error(model, server, rank, raise_momentum)


def scenario_connect_only(rank):
    """Joins the job in summation mode and leaves: the error, if the job refuses this rank."""
    model = wrap(make_model())
    try:
        state = phub.torch.connect(model)
    except Exception as e:  # noqa: B902 - the error is what the test checks
        return {"error": f"{type(e).__name__}: {e}"}
    state.close()
    return {"error": None}


def scenario_failure(rank, out_path, what):
    model = wrap(make_model())
    state = phub.torch.connect(model)
    model.register_comm_hook(state, phub.torch.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ready = out_path + ".ready"
    started = None
    try:
        for step in range(100000):
            if step == 3:
                if what == "dead-peer" and rank == 1:
                    os._exit(3)  # no Goodbye: a crash
                open(ready, "w").close()  # the test may kill phubd now
                started = time.monotonic()
            opt.zero_grad()
            loss_of(model, rank, step).backward()
            opt.step()
            time.sleep(0.05)
        return {"error": None}
    except Exception as e:  # noqa: B902 - the error is what the test checks
        return {"error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - started,
                "type": type(e).__name__}


def main():
    scenario = sys.argv[1]
    rank = int(os.environ["RANK"])
    out_path = os.path.join(sys.argv[2], f"rank{rank}.pt")
    torch.set_num_threads(1)
    if DEVICE.type == "cuda":  # bitwise comparisons of two models need repeatable kernels
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    dist.init_process_group("phub" if scenario == "c10d" else "gloo")
    if scenario == "grads":
        out = scenario_grads(rank)
    elif scenario == "train":
        out = scenario_train(rank)
    elif scenario.startswith("scheduled-"):
        out = scenario_scheduled(rank, scenario[len("scheduled-"):])
    elif scenario == "c10d":
        out = scenario_c10d(rank)
    elif scenario.startswith("state-"):
        out = scenario_state(rank, scenario[len("state-"):])
    elif scenario == "kind-changed":
        out = scenario_kind_changed(rank)
        torch.save(out, out_path)
        os._exit(0)  # the job stalled: no orderly teardown
    elif scenario == "connect-only":
        out = scenario_connect_only(rank)
        torch.save(out, out_path)
        os._exit(0)  # a refused rank's peers: no orderly teardown
    elif scenario == "overlap-misuse":
        out = scenario_overlap_misuse(rank)
        torch.save(out, out_path)
        os._exit(0)  # the job failed: no orderly teardown
    elif scenario.startswith("overlap-"):
        out = scenario_overlap(rank, scenario[len("overlap-"):])
    elif scenario.startswith("server-"):
        out = scenario_server(rank, scenario[len("server-"):])
    elif scenario in ("dead-phubd", "dead-peer"):
        out = scenario_failure(rank, out_path, scenario)
        torch.save(out, out_path)
        os._exit(0)  # the process group's peers may be gone: no orderly teardown
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    torch.save(out, out_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
