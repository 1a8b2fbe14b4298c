"""Gradient tensor tables of the models issue 42 sizes PBoxes for, in the order backward
produces them (the last layer's first), float32 bytes each. Built from the architectures'
published definitions (torchvision's ResNet-50; BERT-large, Devlin et al. 2019: 24 layers,
hidden 1024, 16 heads, FFN 4096, vocabulary 30,522, 512 positions; a GPT-2 XL-shaped
transformer, Radford et al. 2019: 48 layers, width 1600, vocabulary 50,257, 1,024 positions,
~1.56 B parameters), counted here rather than copied; main() prints each one's tensor count and
parameters so they can be checked against the published totals (25.6 M, 335 M, 1.56 B)."""
import sys


def resnet50():
    t = [64 * 3 * 7 * 7, 64, 64]  # conv1, bn1
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            t += [planes * inplanes, planes, planes,            # 1x1, bn
                  planes * planes * 9, planes, planes,           # 3x3, bn
                  planes * 4 * planes, planes * 4, planes * 4]   # 1x1, bn
            if b == 0:
                t += [planes * 4 * inplanes, planes * 4, planes * 4]  # downsample, bn
            inplanes = planes * 4
    t += [1000 * 2048, 1000]  # fc
    return t


def transformer(layers, width, ffn, vocab, positions, segments=0, tied_head=True):
    t = [vocab * width, positions * width] + ([segments * width] if segments else [])
    t += [width, width]  # the embeddings' LayerNorm (BERT) / final LayerNorm (GPT)
    for _ in range(layers):
        t += [3 * width * width, 3 * width,  # q, k, v
              width * width, width,          # attention output
              width, width,                  # LayerNorm
              ffn * width, ffn,              # FFN in
              width * ffn, width,            # FFN out
              width, width]                  # LayerNorm
    if not tied_head:
        t += [vocab * width]
    return t


def bert_large():
    return transformer(24, 1024, 4096, 30522, 512, segments=2) + [1024 * 1024, 1024]  # pooler


def gpt_1_5b():
    return transformer(48, 1600, 6400, 50257, 1024)


MODELS = {"resnet50": resnet50, "bert-large": bert_large, "gpt-1.5b": gpt_1_5b}


def backward_bytes(name):
    """The model's tensors in backward order, in bytes (float32)."""
    return [4 * n for n in reversed(MODELS[name]())]


def main():
    for name, make in MODELS.items():
        t = make()
        print(f"{name}: {len(t)} tensors, {sum(t):,} parameters, {4 * sum(t) / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
