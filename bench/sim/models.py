"""Gradient tensor tables of the models issue 42 sizes PBoxes for, in the order backward
produces them (the last layer's first), float32 bytes each, with each layer's compute. Built
from the architectures' published definitions (torchvision's ResNet-50 v1.5 at 224 x 224;
BERT-large, Devlin et al. 2019: 24 layers, hidden 1024, 16 heads, FFN 4096, vocabulary 30,522,
512 positions; a GPT-2 XL-shaped transformer, Radford et al. 2019: 48 layers, width 1600,
vocabulary 50,257, 1,024 positions, ~1.56 B parameters; BERT as BertModel, encoder and pooler:
the pre-training heads' own transform, bias and NSP layer, 0.3 % of the gradient, are left
out, their tied decoder's FLOPs counted), counted here rather than copied;
main() prints each one's tensor count, parameters and forward FLOPs so they can be checked
against the published totals (25.6 M and ~4.1 G multiply-adds an image; 335 M; 1.56 B).

Compute is counted in FLOPs (a multiply-add is 2) of the matrix products and convolutions, the
work a GPU spends its time on; normalisation, activations and the optimizer are left out (the
PBox runs the optimizer). Each layer's FLOPs go to its weight tensor (its bias and norm
parameters get 0: their gradients are ready with it). Backward costs twice the forward (the
input's gradient and the weight's). `phubctl plan` turns FLOPs into seconds with the measured
rate in phub/sim/calibration.h (compute_flops_per_second)."""
import sys

# What one sample is, and the batch a worker trains on, for each model's step (its FLOPs).
BATCH = {"resnet50": 64, "bert-large": 64, "gpt-1.5b": 8,   # images; sequences
         "alexnet-zoo": 2, "resnet56": 16}                   # as bench/train's racks ran them
SEQUENCE = {"bert-large": 128, "gpt-1.5b": 1024}             # tokens a sequence


def resnet50():
    """(parameters, forward FLOPs an image) per tensor, forward order."""
    t = []

    def conv(cout, cin, k, out_hw):
        t.append((cout * cin * k * k, 2 * cout * cin * k * k * out_hw * out_hw))

    def bn(c):
        t.extend([(c, 0), (c, 0)])

    conv(64, 3, 7, 112)
    bn(64)
    inplanes, hw = 64, 56  # after the stem's max-pool
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            out = hw // s
            conv(planes, inplanes, 1, hw)     # 1x1 at the block's input size
            bn(planes)
            conv(planes, planes, 3, out)      # v1.5: the 3x3 carries the stride
            bn(planes)
            conv(planes * 4, planes, 1, out)
            bn(planes * 4)
            if b == 0:
                conv(planes * 4, inplanes, 1, out)  # downsample
                bn(planes * 4)
            inplanes, hw = planes * 4, out
    t += [(1000 * 2048, 2 * 1000 * 2048), (1000, 0)]  # fc
    return t


def alexnet_zoo():
    """phub-worker's AlexNet (worker/nn/models; bench/train/torch_models.py's alexnet: LRN,
    61.1 M parameters) at 224 x 224: the one the emulated racks trained (docs/benchmarks.md
    "distributed")."""
    t = []
    for cout, cin, k, hw in ((64, 3, 11, 55), (192, 64, 5, 27), (384, 192, 3, 13),
                             (256, 384, 3, 13), (256, 256, 3, 13)):
        t += [(cout * cin * k * k, 2 * cout * cin * k * k * hw * hw), (cout, 0)]
    for cout, cin in ((4096, 256 * 6 * 6), (4096, 4096), (1000, 4096)):
        t += [(cout * cin, 2 * cout * cin), (cout, 0)]
    return t


def resnet56():
    """phub-worker's ResNet-56 for 32 x 32 images (CIFAR; shortcut A, no parameters)."""
    t = []

    def conv_bn(cout, cin, hw):
        t.extend([(cout * cin * 9, 2 * cout * cin * 9 * hw * hw), (cout, 0), (cout, 0)])

    conv_bn(16, 3, 32)
    cin = 16
    for width, hw in ((16, 32), (32, 16), (64, 8)):
        for _ in range(9):
            conv_bn(width, cin, hw)
            conv_bn(width, width, hw)
            cin = width
    return t + [(10 * 64, 2 * 10 * 64), (10, 0)]


def transformer(layers, width, ffn, vocab, positions, seq, segments=0, head_share=1.0):
    """(parameters, forward FLOPs a sequence of `seq` tokens) per tensor. The output head is
    tied to the word embeddings, so it has no tensor of its own: it is an entry of 0 parameters
    at the end (forward order), its FLOPs on head_share of the tokens (BERT's masked 15 %, GPT's
    all), which backward runs first (step_flops)."""
    lin = lambda i, o: (i * o, 2 * i * o * seq)  # noqa: E731
    t = [(vocab * width, 0), (positions * width, 0)]
    t += [(segments * width, 0)] if segments else []
    t += [(width, 0), (width, 0)]  # the embeddings' LayerNorm (BERT) / final LayerNorm (GPT)
    attention = 2 * 2 * seq * seq * width  # scores and their weighted sum
    for _ in range(layers):
        qkv = lin(width, 3 * width)
        t += [(qkv[0], qkv[1] + attention), (3 * width, 0),
              lin(width, width), (width, 0),
              (width, 0), (width, 0),
              lin(width, ffn), (ffn, 0),
              lin(ffn, width), (width, 0),
              (width, 0), (width, 0)]
    return t + [(0, 2 * vocab * width * int(seq * head_share))]


def bert_large():
    seq = SEQUENCE["bert-large"]
    return (transformer(24, 1024, 4096, 30522, 512, seq, segments=2, head_share=0.15)
            + [(1024 * 1024, 2 * 1024 * 1024), (1024, 0)])  # pooler: the first token only


def gpt_1_5b():
    return transformer(48, 1600, 6400, 50257, 1024, SEQUENCE["gpt-1.5b"])


MODELS = {"resnet50": resnet50, "bert-large": bert_large, "gpt-1.5b": gpt_1_5b,
          "alexnet-zoo": alexnet_zoo, "resnet56": resnet56}


def backward_bytes(name):
    """The model's tensors in backward order, in bytes (float32)."""
    return [4 * n for n, _ in reversed(MODELS[name]()) if n > 0]


def step_flops(name):
    """(forward FLOPs, [backward FLOPs per tensor, backward order]) of one worker's step: a
    tensor's are the backward's since the tensor before it, so the FLOPs of an entry with no
    tensor (a tied head) go to the next tensor backward reaches."""
    t = MODELS[name]()
    batch = BATCH[name]
    backward, pending = [], 0
    for n, f in reversed(t):
        pending += 2 * batch * f
        if n > 0:
            backward.append(pending)
            pending = 0
    return batch * sum(f for _, f in t), backward


def write_tensors_file(name, path):
    """`phubctl plan --tensors-file`'s format: the forward's FLOPs, then a tensor a line,
    backward order: its bytes and its backward FLOPs."""
    forward, backward = step_flops(name)
    with open(path, "w") as f:
        f.write(f"# {name}, batch {BATCH[name]}: forward FLOPs, then bytes and backward FLOPs "
                "a tensor\n")
        f.write(f"forward {forward}\n")
        for b, flops in zip(backward_bytes(name), backward):
            f.write(f"{b} {flops}\n")


def main():
    for name, make in MODELS.items():
        t = make()
        forward, backward = step_flops(name)
        print(f"{name}: {sum(n > 0 for n, _ in t)} tensors, {sum(n for n, _ in t):,} parameters, "
              f"{4 * sum(n for n, _ in t) / 2**20:.1f} MiB; forward {sum(f for _, f in t) / 2e9:.2f} "
              f"G multiply-adds a sample; a step of batch {BATCH[name]}: "
              f"{(forward + sum(backward)) / 1e12:.2f} TFLOP")
    return 0


if __name__ == "__main__":
    sys.exit(main())
