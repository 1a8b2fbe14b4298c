#!/usr/bin/python3
"""The zoo of worker/nn/models in PyTorch, layer for layer (same shapes, same parameter counts),
and a timer for one mini-batch: forward, cross-entropy, backward, momentum-SGD step. This is
the reference bench/train prints beside phub-worker, measured in the same run.

Usage: /usr/bin/python3 bench/train/torch_models.py --model resnet56 --batch 64 \
           [--iters 20] [--warmup 3] [--threads 2] [--channels-last] [--device cpu|cuda]
Prints one JSON line: model, batch, threads, parameters, median_ms, times_ms.
Debian's python3-torch (1.13, CPU); install libopenblas0-pthread or its BLAS is ~25x slower.
"""
import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn


def fashion_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, 10))


def fcn5():
    return nn.Sequential(nn.Linear(784, 2048), nn.Sigmoid(), nn.Linear(2048, 4096), nn.Sigmoid(),
                         nn.Linear(4096, 1024), nn.Sigmoid(), nn.Linear(1024, 10))


def alexnet():
    lrn = dict(size=5, alpha=1e-4, beta=0.75, k=2.0)
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(), nn.LocalResponseNorm(**lrn),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.LocalResponseNorm(**lrn),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Flatten(), nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(),
        nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 1000))


def conv_bn(cin, cout, k, stride, relu=True):
    layers = [nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*(layers + [nn.ReLU()] if relu else layers))


class ShortcutA(nn.Module):
    """Option A: x[:, :, ::s, ::s] with zero channels around it (worker/backend ShortcutOp)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride, self.front, self.back = stride, (cout - cin) // 2, cout - cin - (cout - cin) // 2

    def forward(self, x):
        x = x[:, :, ::self.stride, ::self.stride]
        return nn.functional.pad(x, (0, 0, 0, 0, self.front, self.back))


class Residual(nn.Module):
    def __init__(self, body, shortcut):
        super().__init__()
        self.body, self.shortcut, self.relu = body, shortcut, nn.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


def resnet56():
    layers, cin = [conv_bn(3, 16, 3, 1)], 16
    for stage, width in enumerate((16, 32, 64)):
        for b in range(9):
            stride = 2 if b == 0 and stage > 0 else 1
            body = nn.Sequential(conv_bn(cin, width, 3, stride), conv_bn(width, width, 3, 1, False))
            short = ShortcutA(cin, width, stride) if (stride != 1 or cin != width) else nn.Identity()
            layers.append(Residual(body, short))
            cin = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def resnet50():
    layers, cin = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, padding=1)], 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 0 else 1
            body = nn.Sequential(conv_bn(cin, width, 1, 1), conv_bn(width, width, 3, stride),
                                 conv_bn(width, 4 * width, 1, 1, False))
            short = conv_bn(cin, 4 * width, 1, stride, False) if b == 0 else nn.Identity()
            layers.append(Residual(body, short))
            cin = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000))


class LstmLanguageModel(nn.Module):
    """worker/nn/models/lstm_lm.cc: embedding 256, two LSTM layers of 256, a 10,000-way decoder
    at every step. nn.LSTM has two biases per layer where ours has one (the same function):
    2,048 parameters more, nothing in the time."""

    def __init__(self, vocab=10000, hidden=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=2)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, ids):  # [T, N] -> [T*N, vocab]
        y, _ = self.lstm(self.embed(ids))
        return self.decoder(y.reshape(-1, y.shape[-1]))


SEQ_LEN = 32  # dlbench's LSTM: 32 steps

MODELS = {  # name: (builder, input shape without the batch, classes); "tokens": [SEQ_LEN, N] ids
    "fashion-cnn": (fashion_cnn, (1, 28, 28), 10),
    "fcn5": (fcn5, (784,), 10),
    "alexnet": (alexnet, (3, 224, 224), 1000),
    "resnet56": (resnet56, (3, 32, 32), 10),
    "resnet50": (resnet50, (3, 224, 224), 1000),
    "lstm": (LstmLanguageModel, "tokens", 10000),
}


def time_model(name, batch, iters, warmup, threads, channels_last=False, seed=1, device="cpu",
               tf32=False, host_batch=False):
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    if device == "cuda":
        torch.backends.cudnn.benchmark = True  # autotuned algorithms, as our cuDNN backend
        # The same math as phub-worker's: PyTorch's convolutions default to TF32 on Ampere and
        # later while its matmuls stay float32; phub-worker is strict float32 unless --tf32.
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
    build, shape, classes = MODELS[name]
    model = build().to(device)
    if shape == "tokens":
        x = torch.randint(0, classes, (SEQ_LEN, batch), device=device)
        y = torch.randint(0, classes, (SEQ_LEN * batch,), device=device)
    else:
        x = torch.rand((batch,) + shape, device=device) * 2 - 1
        y = torch.randint(0, classes, (batch,), device=device)
    if channels_last and shape != "tokens" and len(shape) == 3:
        model, x = model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # host_batch: each step's batch comes from (pageable) host memory, as phub-worker's does.
    x_host = x.cpu() if host_batch and device != "cpu" else None
    times = []
    for i in range(warmup + iters):
        sync()
        start = time.perf_counter()
        if x_host is not None:
            x = x_host.to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        sync()
        ms = (time.perf_counter() - start) * 1e3
        if i >= warmup:
            times.append(ms)
    return {"model": name, "batch": batch, "threads": threads, "device": device,
            "torch": torch.__version__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "median_ms": statistics.median(times), "times_ms": times}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, choices=sorted(MODELS))
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--tf32", action="store_true", help="CUDA: TF32 convolutions and matmuls")
    p.add_argument("--host-batch", action="store_true",
                   help="CUDA: copy each step's batch from host memory, as phub-worker does")
    a = p.parse_args()
    if a.batch < 1 or a.iters < 1 or a.warmup < 0 or a.threads < 1:
        sys.exit("torch_models.py: --batch, --iters, --threads must be >= 1 and --warmup >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_models.py: --device cuda but this PyTorch sees no CUDA device "
                 f"(torch {torch.__version__}); use --device cpu")
    print(json.dumps(time_model(a.model, a.batch, a.iters, a.warmup, a.threads, a.channels_last,
                                device=a.device, tf32=a.tf32, host_batch=a.host_batch)))


if __name__ == "__main__":
    main()
