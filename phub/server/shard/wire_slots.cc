#include "phub/server/shard/wire_slots.h"

namespace phub::server {
namespace {

std::size_t FloatsFor(std::size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); }

template <class T>
void Step(const std::vector<const void*>& scratch, std::span<const float> weights_in,
          std::span<float> weights_out, std::span<float* const> state,
          const kernels::OptimizerConfig& config, std::uint64_t step) {
  const auto* inputs = reinterpret_cast<const T* const*>(scratch.data());
  const std::span<const T* const> in(inputs, scratch.size());
  if (weights_in.empty()) {
    kernels::AggregateAndStep(in, weights_out, state, config, step);
  } else {
    kernels::AggregateAndStep(in, weights_in, weights_out, state, config, step);
  }
}

}  // namespace

AlignedBuffer MakeSlots(std::uint32_t world, std::uint32_t elements, kernels::WireFormat format) {
  return AlignedBuffer(FloatsFor(std::size_t{world} * elements * kernels::WireBytes(format)));
}

std::span<std::byte> SlotOf(AlignedBuffer& slots, std::uint32_t rank, std::uint32_t elements,
                            kernels::WireFormat format) {
  const std::size_t bytes = std::size_t{elements} * kernels::WireBytes(format);
  return {reinterpret_cast<std::byte*>(slots.data()) + rank * bytes, bytes};
}

void AggregateSlots(kernels::WireFormat format, const AlignedBuffer& slots, std::uint32_t world,
                    std::span<const std::uint8_t> which, std::uint32_t elements, std::span<const float> weights_in,
                    std::span<float> weights_out, std::span<float* const> state,
                    const kernels::OptimizerConfig& config, std::uint64_t step,
                    std::vector<const void*>& scratch) {
  const std::size_t bytes = std::size_t{elements} * kernels::WireBytes(format);
  const auto* base = reinterpret_cast<const std::byte*>(slots.data());
  scratch.clear();
  for (std::uint32_t w = 0; w < world; ++w) {
    if (which.empty() || which[w]) scratch.push_back(base + w * bytes);
  }
  switch (format) {
    case kernels::WireFormat::kFp32:
      return Step<float>(scratch, weights_in, weights_out, state, config, step);
    case kernels::WireFormat::kBf16:
      return Step<kernels::Bf16>(scratch, weights_in, weights_out, state, config, step);
    case kernels::WireFormat::kFp16:
      return Step<kernels::Fp16>(scratch, weights_in, weights_out, state, config, step);
  }
}

AlignedBuffer MakeWireBuffer(std::uint32_t elements, kernels::WireFormat format) {
  return AlignedBuffer(FloatsFor(std::size_t{elements} * kernels::WireBytes(format)));
}

}  // namespace phub::server
