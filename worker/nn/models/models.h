// The model zoo: dlbench's models and a small CNN for Fashion-MNIST, built from worker/nn/layers.
// Each builder returns an unbuilt Model (call Build with a backend, which also reports a size
// the model cannot take, e.g. a batch of 0).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/nn/model.h"

namespace phub::worker {

// Two conv(5x5)+ReLU+maxpool stages (32, 64 channels), a 1024-unit hidden layer, 10 classes;
// input [N, 1, 28, 28].
std::unique_ptr<Model> MakeFashionCnn(std::int64_t batch);
// dlbench's FCN-5 (its Torch/Caffe definition): 784 -> 2048 -> 4096 -> 1024 -> 10 with
// sigmoids, input [N, 784]: 14,205,962 parameters.
std::unique_ptr<Model> MakeFcn5(std::int64_t batch);
// AlexNet, one tower as in torchvision (61,100,840 parameters), with the paper's two
// LocalResponseNorm layers; input [N, 3, 224, 224], 1000 classes.
std::unique_ptr<Model> MakeAlexNet(std::int64_t batch);
// ResNet-56 for CIFAR-10 (He et al. 2016, section 4.2: 3 stages of 9 basic blocks, 16/32/64
// channels, parameter-free option-A shortcuts), input [N, 3, 32, 32]: 853,018 parameters.
std::unique_ptr<Model> MakeResNet56(std::int64_t batch);
// ResNet-50 for ImageNet (He et al. 2016, torchvision's v1.5 layout: the stride on the 3x3 of
// each bottleneck), input [N, 3, 224, 224], 1000 classes: 25,557,032 parameters.
std::unique_ptr<Model> MakeResNet50(std::int64_t batch, std::int64_t image = 224);

// dlbench's LSTM (its Torch rnn config: PTB-sized vocabulary of 10,000, two LSTM layers of 256,
// 32 steps): embedding 256 -> LSTM 256 -> LSTM 256 -> a 10,000-way decoder at every step.
// Input [seq_len, N] token ids, logits [seq_len*N, 10000], labels the next token of each step.
// 6,180,624 parameters (PyTorch's nn.LSTM counts 2,048 more: a second, redundant bias).
std::unique_ptr<Model> MakeLstmLanguageModel(std::int64_t batch, std::int64_t seq_len = 32);

// By name ("fashion-cnn", "fcn5", "alexnet", "resnet56", "resnet50", "lstm");
// InvalidArgument listing the names otherwise, or for a batch below 1.
StatusOr<std::unique_ptr<Model>> MakeModel(const std::string& name, std::int64_t batch);
std::vector<std::string> ModelNames();

}  // namespace phub::worker
