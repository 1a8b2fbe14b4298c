#!/usr/bin/python3
"""An elastic PyTorch DDP job on phubd: torchrun --nnodes=MIN:MAX restarts every worker at each
change of its nodes, and the restarted workers carry on from phubd's weights, optimizer state,
iteration and data position — no checkpoint (docs/torch.md "Elastic jobs and torchrun
--nnodes=MIN:MAX").

  phubd --max-world-size 4 &
  export PYTHONPATH=$PWD/build/python PHUB_ADDRESS=127.0.0.1:7070
  export PHUB_MIN_WORKERS=1 PHUB_MAX_WORKERS=2   # the job's size, never WORLD_SIZE
  # on each node (Debian 12: /usr/bin/python3 -m phub.run for torchrun):
  torchrun --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=HOST:29400 \\
      --rdzv_id=fmnist-1 --rdzv_conf last_call_timeout=1 --monitor_interval 1 \\
      examples/torch_elastic_phub.py --epochs 2

The job's name on phubd is torchrun's run id (--rdzv_id). A small MLP on Fashion-MNIST
(Debian's dataset-fashion-mnist; --data synthetic without it), momentum SGD on phubd with a
warm-up + cosine schedule over the job's global batches (--schedule progress), or a torch
LambdaLR over iterations that a restarted worker fast-forwards (--schedule iterations).
Each worker prints its first iteration (the job's, not 1 after a restart) and, with
Fashion-MNIST, the test accuracy at the end; --progress FILE gets one JSON line per step (the
test reads it).
"""
import argparse
import json
import math
import os
import sys
import time
import warnings

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "build", "python"))
import phub.torch  # noqa: E402

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def load_data(kind, data_dir, samples, seed):
    if kind == "fashion-mnist":
        sys.path.insert(0, HERE)
        from torch_ddp_phub import fashion_mnist  # the IDX reader of the DDP example
        x, y = fashion_mnist(data_dir, "train", 28)
        if samples:
            x, y = x[:samples], y[:samples]
        return x.reshape(len(x), -1), y
    g = torch.Generator().manual_seed(seed)  # a learnable synthetic task: y from a fixed map
    n = samples or 4096
    x = torch.randn(n, 784, generator=g)
    y = (x @ torch.randn(784, 10, generator=g)).argmax(1)
    return x, y


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="fashion-mnist", choices=["fashion-mnist", "synthetic"])
    p.add_argument("--data-dir", default=FASHION_MNIST)
    p.add_argument("--samples", type=int, default=0, help="use the first N (0: all)")
    p.add_argument("--batch", type=int, default=64, help="per worker and iteration")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--schedule", default="progress", choices=["progress", "iterations"])
    p.add_argument("--warmup-batches", type=int, default=50, help="--schedule progress")
    p.add_argument("--warmup-iters", type=int, default=20, help="--schedule iterations")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-delay", type=float, default=0.0,
                   help="seconds to sleep per step (tests: a run long enough to change)")
    p.add_argument("--progress", default=None, help="append one JSON line per step here")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)  # the same initial weights everywhere (only rank 0's are used)

    started = time.time()
    x, y = load_data(a.data, a.data_dir, a.samples, a.seed)
    # DDP over a group of this process alone (no init_process_group): workers join phubd's job
    # at different iterations, and a collective across them would deadlock (local_process_group).
    model = DDP(nn.Sequential(nn.Linear(x.shape[1], a.hidden), nn.ReLU(),
                              nn.Linear(a.hidden, 10)),
                process_group=phub.torch.local_process_group())
    sgd = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    # PHUB_MIN_WORKERS / PHUB_MAX_WORKERS make it elastic; a restarted worker joins the job.
    optimizer = phub.torch.ServerOptimizer(model, sgd)
    batches = optimizer.batches(len(x), a.batch, seed=a.seed, epochs=a.epochs)

    # The lr schedule: a warm-up + cosine. Each iteration's lr must be the same on all its
    # members. --schedule progress (default): over the job's progress, the global batches
    # taken before the iteration (the same for its members, whoever they are), so the
    # schedule ends with the data however many workers trained it. --schedule iterations: a
    # torch scheduler stepped per iteration, over an iteration count estimated for the job's
    # largest size; a restarted worker steps it to the job's iteration first.
    total = batches.total_batches
    if a.schedule == "progress":
        def lr_factor(before):
            warm = min(1.0, (before + 1) / a.warmup_batches)
            return warm * 0.5 * (1 + math.cos(math.pi * min(1.0, before / total)))
        scheduler = None
    else:
        iterations = max(1, total // (optimizer.phub.elastic[1] if optimizer.phub.elastic else 1))

        def lr_at(step):
            if step < a.warmup_iters:
                return (step + 1) / a.warmup_iters
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - a.warmup_iters) /
                                                     max(1, iterations - a.warmup_iters))))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
        with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": meant
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(optimizer.iteration - 1):
                scheduler.step()
    first = optimizer.iteration
    ready = time.time()
    print(f"RANK {os.environ.get('RANK')} of WORLD_SIZE {os.environ.get('WORLD_SIZE')}: slot "
          f"{optimizer.phub.rank}, first iteration {first} (job resumed at "
          f"{optimizer.phub.resume_iteration}), up {time.time() - started:.2f} s", flush=True)

    out = open(a.progress, "a", buffering=1) if a.progress else None
    loss_fn = nn.CrossEntropyLoss()
    steps = 0
    for indices in batches:
        t = optimizer.iteration
        before = batches.last_members["member_iterations_before"]
        if scheduler is None:
            for group in optimizer.param_groups:
                group["lr"] = a.lr * lr_factor(before)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.zero_grad()
        loss = loss_fn(model(x[indices]), y[indices])
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        steps += 1
        if out:
            m = batches.last_members
            out.write(json.dumps({"pid": os.getpid(), "agent": os.getppid(),
                                  "rank": int(os.environ.get("RANK", -1)),
                                  "slot": optimizer.phub.rank, "iteration": t,
                                  "batch": batches.batches_taken[-1], "world": m["world"],
                                  "before": before,
                                  "loss": loss.item(), "lr": lr, "time": time.time(),
                                  "main": started, "ready": ready}) + "\n")
        if a.step_delay:
            time.sleep(a.step_delay)
    accuracy = None
    if a.data == "fashion-mnist":  # the job's weights, as this worker last installed them
        from torch_ddp_phub import fashion_mnist
        tx, ty = fashion_mnist(a.data_dir, "test", 28)
        with torch.no_grad():
            accuracy = (model(tx.reshape(len(tx), -1)).argmax(1) == ty).float().mean().item()
    print(f"slot {optimizer.phub.rank}: {steps} steps, iterations {first}..{first + steps - 1}"
          + (f", test accuracy {accuracy:.4f}" if accuracy is not None else ""), flush=True)
    if out:
        out.write(json.dumps({"pid": os.getpid(), "agent": os.getppid(), "done": True,
                              "steps": steps, "accuracy": accuracy,
                              "next_iteration": optimizer.iteration,
                              "time": time.time()}) + "\n")
    optimizer.close()


if __name__ == "__main__":
    main()
