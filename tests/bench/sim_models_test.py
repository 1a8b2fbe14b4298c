#!/usr/bin/python3
"""bench/sim/models.py against PyTorch's own models, an independent count: torchvision's
ResNet-50 tensor by tensor (parameters, and each convolution's and the classifier's FLOPs as
forward hooks measure them from the output shapes of a real 224 x 224 forward pass), and a
transformer layer (torch.nn.TransformerEncoderLayer: the same tensors, and its feed-forward
FLOPs a token). Exit 77 (skipped) without python3-torch."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "sim"))

try:
    import torch
    import torchvision
except ImportError:
    print("SKIP: python3-torch / python3-torchvision not installed (deploy/install-deps.sh --torch)")
    sys.exit(77)

import models  # noqa: E402


def hook_flops(model, x, kinds):
    """FLOPs a sample of every hooked module's weight, from its output's shape."""
    flops = {}

    def hook(module, _inputs, output):
        per_sample = output[0].numel()
        if isinstance(module, torch.nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1]
            flops[id(module.weight)] = 2 * per_sample * module.in_channels // module.groups * k
        else:  # Linear: out features a row, in_features multiply-adds each
            flops[id(module.weight)] = 2 * per_sample * module.in_features

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, kinds)]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return flops


def check_resnet50():
    net = torchvision.models.resnet50().eval()
    measured = hook_flops(net, torch.zeros(1, 3, 224, 224), (torch.nn.Conv2d, torch.nn.Linear))
    ours = models.resnet50()
    params = list(net.parameters())
    assert len(params) == len(ours), (len(params), len(ours))
    for i, (p, (n, f)) in enumerate(zip(params, ours)):
        assert p.numel() == n, f"tensor {i}: torchvision {p.numel()} parameters, ours {n}"
        want = measured.get(id(p), 0)
        assert f == want, f"tensor {i} ({tuple(p.shape)}): torchvision {want} FLOPs, ours {f}"
    print(f"resnet50: {len(ours)} tensors and {sum(f for _, f in ours) / 2e9:.3f} G "
          "multiply-adds agree with torchvision's")


def check_zoo(name, zoo_name, shape):
    """models.py's table of phub-worker's model against bench/train/torch_models.py's (the zoo
    layer for layer in PyTorch), tensor by tensor, FLOPs by hooks."""
    sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "train"))
    import torch_models
    net = torch_models.MODELS[zoo_name][0]().eval()
    measured = hook_flops(net, torch.zeros((1,) + shape), (torch.nn.Conv2d, torch.nn.Linear))
    ours = models.MODELS[name]()
    params = list(net.parameters())
    assert len(params) == len(ours), (name, len(params), len(ours))
    for i, (p, (n, f)) in enumerate(zip(params, ours)):
        assert p.numel() == n, f"{name} tensor {i}: the zoo's {p.numel()} parameters, ours {n}"
        want = measured.get(id(p), 0)
        assert f == want, f"{name} tensor {i} ({tuple(p.shape)}): the zoo's {want} FLOPs, ours {f}"
    print(f"{name}: {len(ours)} tensors and their FLOPs agree with bench/train's {zoo_name}")


def check_transformer_layer():
    width, heads, ffn, seq = 1024, 16, 4096, 128
    layer = torch.nn.TransformerEncoderLayer(width, heads, ffn, batch_first=True).eval()
    theirs = sorted(p.numel() for p in layer.parameters())
    # models.transformer with one layer, less its embeddings and their LayerNorm (4 tensors).
    ours_all = models.transformer(1, width, ffn, 30522, 512, seq)
    ours = ours_all[4:16]  # then the tied head's entry
    assert sorted(n for n, _ in ours) == theirs, (sorted(n for n, _ in ours), theirs)
    measured = hook_flops(torch.nn.Sequential(layer.linear1, layer.linear2),
                          torch.zeros(1, seq, width), (torch.nn.Linear,))
    for module, index in ((layer.linear1, 6), (layer.linear2, 8)):
        assert ours[index][1] == measured[id(module.weight)], (index, ours[index][1],
                                                               measured[id(module.weight)])
    print("transformer layer: its 12 tensors and feed-forward FLOPs agree with torch.nn's")


def main():
    check_resnet50()
    check_zoo("alexnet-zoo", "alexnet", (3, 224, 224))
    check_zoo("resnet56", "resnet56", (3, 32, 32))
    check_transformer_layer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
