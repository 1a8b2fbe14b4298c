#!/usr/bin/python3
"""A torchvision model trained on Fashion-MNIST with PyTorch DDP, its gradients exchanged through
phubd or through DDP's own backends: what a PyTorch user changes to use PHub (docs/torch.md).

  phubd --max-world-size 2 &                           # any --optimizer: the job asks its own
  PHUB_ADDRESS=127.0.0.1:7070 torchrun --nproc_per_node 2 examples/torch_ddp_phub.py \\
      --backend phub --model resnet18 --epochs 1

Backends: phub (DDP hook, phubd averages, the local optimizer steps), phub-optimizer (phubd's
fused optimizer steps, workers install the weights it returns), phub-optimizer-overlap (the
same, each module's weights installed as the next forward reaches it: overlap_forward=True),
phub-c10d (plain DDP over
init_process_group("phub"): phub.c10d, no hook; phubd sums, the local optimizer steps), gloo
(DDP's CPU allreduce), gloo-fp16 (the same with DDP's fp16_compress_hook: half the bytes, the
peer of PHUB_WIRE=fp16 for the phub backends),
nccl (DDP's GPU allreduce; needs one GPU per rank). Every rank prints nothing but rank 0 prints
time per mini-batch (median of the timed steps), images/s and, with Fashion-MNIST, the test
accuracy per epoch; --results FILE writes them as JSON (bench/torch reads it), with every step's
loss (rank 0's and the mean over ranks) and learning rate.

A schedule: --lr-schedule cosine --warmup-iters W (torch's LinearLR from 0.01 x lr over W steps,
then CosineAnnealingLR to 0 over the rest of the run, stepped every iteration, on
ServerOptimizer as on torch's optimizers); --seed S gives every backend the same initial weights
and data order (bench/torch/run_recipe.py compares them step by step).

Without torchrun: RANK, WORLD_SIZE (and MASTER_ADDR/MASTER_PORT for DDP's own process group)
in the environment, or --rank/--world-size and --master.
"""
import argparse
import gzip
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))
# phub: installed, or PYTHONPATH=build/python, or else this checkout's build tree.
sys.path.append(os.path.join(HERE, "..", "build", "python"))
import phub.c10d  # noqa: E402,F401 - the "phub" backend, for --backend phub-c10d
import phub.torch  # noqa: E402

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


def read_idx(path):
    """An IDX file (gzip'd): uint8 array of its dimensions; checked, never trusted."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    if len(data) != 4 + 4 * dims + int(np.prod(shape)):
        raise ValueError(f"{path}: {len(data)} bytes, its header says {shape}")
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist(data_dir, split, size):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.2860) / 0.3530  # Fashion-MNIST's mean and standard deviation
    if size != 28:
        x = nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x, torch.from_numpy(labels.astype(np.int64))


def make_model(name):
    """A torchvision model for 1-channel images and 10 classes. alexnet (61 M parameters, most in
    its classifier: the communication-heavy one) wants 64x64 inputs; the ResNets take 28x28."""
    if name == "alexnet":
        model = torchvision.models.alexnet(num_classes=10)
        model.features[0] = nn.Conv2d(1, 64, kernel_size=11, stride=4, padding=2)
        return model, 64
    if name in ("resnet18", "resnet50"):
        model = getattr(torchvision.models, name)(num_classes=10)
        model.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()  # 28x28 inputs: keep the resolution for the later stages
        return model, 28
    raise SystemExit(f"--model {name}: use alexnet, resnet18 or resnet50")


def make_optimizer(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=5e-4)
    return torch.optim.Adam(params, lr=lr)


def make_schedule(a, optimizer, total):
    """--lr-schedule cosine: warm-up (LinearLR from 0.01 x lr over --warmup-iters), then
    CosineAnnealingLR to 0 over the rest of the run's `total` steps; on ServerOptimizer as on
    torch's own optimizers (phubd then steps each iteration with its lr). None: constant."""
    if a.lr_schedule == "constant":
        return None
    sched = torch.optim.lr_scheduler
    decay = sched.CosineAnnealingLR(optimizer, T_max=max(1, total - a.warmup_iters))
    if a.warmup_iters <= 0:
        return decay
    warm = sched.LinearLR(optimizer, start_factor=0.01, total_iters=a.warmup_iters)
    return sched.SequentialLR(optimizer, [warm, decay], milestones=[a.warmup_iters])


def evaluate(model, x, y, device, batch=500):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out = model(x[i:i + batch].to(device))
            correct += (out.argmax(1).cpu() == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(x)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="phub", choices=["phub", "phub-optimizer", "phub-optimizer-overlap", "phub-c10d", "gloo",
                            "gloo-fp16", "nccl"])
    p.add_argument("--model", default="resnet18", choices=["alexnet", "resnet18", "resnet50"])
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--data", default="fashion-mnist", choices=["fashion-mnist", "synthetic"])
    p.add_argument("--data-dir", default=FASHION_MNIST)
    p.add_argument("--iters", type=int, default=0,
                   help="stop after this many steps (0: whole epochs); synthetic data needs it")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the timing")
    p.add_argument("--phub", default=None, help="phubd's HOST:PORT (default: $PHUB_ADDRESS)")
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--world-size", type=int, default=None)
    p.add_argument("--master", default=None, help="HOST:PORT of DDP's own rendezvous "
                   "(default: $MASTER_ADDR:$MASTER_PORT)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's choice)")
    p.add_argument("--bucket-cap-mb", type=float, default=25,
                   help="DDP's bucket_cap_mb (25, DDP's default): smaller buckets reach the hook, "
                        "and phubd, sooner in backward")
    p.add_argument("--results", default=None, help="write rank 0's figures here (JSON)")
    p.add_argument("--seed", type=int, default=0,
                   help="the model's initial weights and the data's order (the same for every "
                   "backend)")
    p.add_argument("--train-size", type=int, default=0,
                   help="train on the first N images only (0: all); --test-size likewise")
    p.add_argument("--test-size", type=int, default=0)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine"],
                   help="cosine: torch's CosineAnnealingLR over the run, after --warmup-iters "
                   "of LinearLR from 0.01 x lr, stepped every iteration")
    p.add_argument("--warmup-iters", type=int, default=0)
    a = p.parse_args()
    if a.data == "synthetic" and a.iters <= 0:
        p.error("--data synthetic needs --iters")

    rank = a.rank if a.rank is not None else int(os.environ.get("RANK", "0"))
    world = a.world_size if a.world_size is not None else int(os.environ.get("WORLD_SIZE", "1"))
    if a.master:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = a.master.rsplit(":", 1)
    if a.threads:
        torch.set_num_threads(a.threads)
    cuda = a.backend == "nccl" or (torch.cuda.is_available() and
                                   a.backend not in ("gloo", "gloo-fp16", "phub-c10d"))
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    # DDP needs a process group of its own (its start-up broadcast); with phub it carries
    # nothing else.
    # phub-c10d: the one line that changes is the backend's name (phub.c10d, imported above,
    # registered it; `python3 -m phub.run` registers it too).
    backend = {"nccl": "nccl", "phub-c10d": "phub"}.get(a.backend, "gloo")
    dist.init_process_group(backend, rank=rank, world_size=world)

    torch.manual_seed(a.seed)
    model, size = make_model(a.model)
    model = DDP(model.to(device), device_ids=[device.index] if cuda else None,
                bucket_cap_mb=a.bucket_cap_mb)
    optimizer = make_optimizer(a.optimizer, model.parameters(), a.lr)
    state = None
    if a.backend == "phub":                                    # the two lines a user adds:
        state = phub.torch.connect(model, a.phub, rank=rank, world_size=world)
        model.register_comm_hook(state, phub.torch.allreduce_hook)
    elif a.backend.startswith("phub-optimizer"):               # or this one:
        optimizer = phub.torch.ServerOptimizer(model, optimizer, a.phub, rank=rank,
                                               world_size=world,
                                               overlap_forward=a.backend.endswith("-overlap"))
        state = optimizer.phub
    elif a.backend == "gloo-fp16":  # DDP's own compression, the peer of PHUB_WIRE=fp16
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)

    if a.data == "fashion-mnist":
        x, y = fashion_mnist(a.data_dir, "train", size)
        test_x, test_y = fashion_mnist(a.data_dir, "test", size)
        if a.train_size:
            x, y = x[:a.train_size], y[:a.train_size]
        if a.test_size:
            test_x, test_y = test_x[:a.test_size], test_y[:a.test_size]
        shard = torch.arange(rank, len(x), world)  # each rank its own interleaved shard
        shard = shard[:len(x) // world]  # every rank as many images (and steps) as the others
    else:
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(a.batch * 4, 1, size, size, generator=g)
        y = torch.randint(0, 10, (a.batch * 4,), generator=g)
        shard = torch.arange(len(x))
    steps_per_epoch = len(shard) // a.batch
    epochs = a.epochs if a.iters <= 0 else -(-a.iters // steps_per_epoch)
    total = min(a.iters, epochs * steps_per_epoch) if a.iters else epochs * steps_per_epoch
    scheduler = make_schedule(a, optimizer, total)
    times, step_times, accuracy, losses, lrs, step = [], [], [], [], [], 0
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        order = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(
            1000 * a.seed + epoch))]
        for i in range(steps_per_epoch):
            if a.iters and step >= a.iters:
                break
            idx = order[i * a.batch:(i + 1) * a.batch]
            xb, yb = x[idx].to(device, non_blocking=True), y[idx].to(device, non_blocking=True)
            if cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()  # the exchange: DDP waits for every bucket before it returns
            stepping = time.perf_counter()
            lrs.append(optimizer.param_groups[0]["lr"])  # this step's (sent to phubd as well)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            if cuda:
                torch.cuda.synchronize()
            losses.append(loss.item())
            if step >= a.warmup:
                times.append(time.perf_counter() - started)
                step_times.append(time.perf_counter() - stepping)
            step += 1
            if rank == 0 and step % 50 == 0:
                print(f"epoch {epoch + 1} step {step}: loss {loss.item():.4f}", flush=True)
        if a.data == "fashion-mnist":
            accuracy.append(evaluate(model, test_x, test_y, device))
            if rank == 0:
                print(f"epoch {epoch + 1}: test accuracy {100 * accuracy[-1]:.2f} %", flush=True)
    if state is not None:
        state.close()
    # Every rank's losses, for their mean per step (over DDP's own group: gloo, or nccl; the
    # phub c10d backend sends an allgather over its gloo group).
    mine = torch.tensor(losses, dtype=torch.float64, device=device)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    mean_losses = torch.stack(every).mean(0).tolist()
    ms = 1000 * statistics.median(times) if times else float("nan")
    if rank == 0:
        print(f"{a.backend} {a.model} N={world} batch {a.batch}: {ms:.1f} ms per mini-batch, "
              f"{1000 * world * a.batch / ms:.0f} images/s ({len(times)} timed steps)", flush=True)
        if a.results:
            with open(a.results, "w") as f:
                json.dump({"backend": a.backend, "model": a.model, "n": world,
                           "batch": a.batch, "bucket_cap_mb": a.bucket_cap_mb,
                           "median_ms": ms, "steps": len(times),
                           "optimizer_step_ms": 1000 * statistics.median(step_times)
                           if step_times else None,
                           "accuracy": accuracy, "losses": losses, "losses_mean": mean_losses,
                           "lrs": lrs}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
