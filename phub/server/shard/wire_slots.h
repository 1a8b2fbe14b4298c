// A chunk's buffers in the job's wire format (JobSpec::wire, docs/design.md "Compact wire"):
// the receive slots hold each worker's copy as it arrived (bf16/fp16: 2 bytes an element), the
// kernel widens them as it sums, and weights that go back compact go as rounded changes, in a
// buffer of their own (Shard::UpdateView). The one place the shard's code switches on the format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "phub/common/aligned_buffer.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/kernels/wire_format.h"

namespace phub::server {

// Slots for `world` copies of `elements` elements in `format`, worker-major, zeroed.
AlignedBuffer MakeSlots(std::uint32_t world, std::uint32_t elements, kernels::WireFormat format);

// Worker `rank`'s slot: elements × WireBytes(format) bytes.
std::span<std::byte> SlotOf(AlignedBuffer& slots, std::uint32_t rank, std::uint32_t elements,
                            kernels::WireFormat format);

// The fused step over the `world` copies in `slots` (or, with `which` by rank, those whose
// entry is non-zero, in rank order: their mean): in place (weights_in empty) or out of place
// (old weights read from weights_in). `scratch` holds one pointer per worker.
void AggregateSlots(kernels::WireFormat format, const AlignedBuffer& slots, std::uint32_t world,
                    std::span<const std::uint8_t> which, std::uint32_t elements, std::span<const float> weights_in,
                    std::span<float> weights_out, std::span<float* const> state,
                    const kernels::OptimizerConfig& config, std::uint64_t step,
                    std::vector<const void*>& scratch);

// A buffer for `elements` elements in `format` (fp16/bf16).
AlignedBuffer MakeWireBuffer(std::uint32_t elements, kernels::WireFormat format);

}  // namespace phub::server
