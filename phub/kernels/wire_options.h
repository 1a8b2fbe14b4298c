// kernels::WireOptions: the wire settings of a PS job in one struct.
#pragma once

#include "phub/kernels/wire_format.h"

namespace phub::kernels {

// How a PS job's tensors travel (`--wire`, `--wire-weights`, `--error-feedback`,
// phub/client/wire_flags.h), declared once: PsClientOptions embeds it; the ring and NCCL,
// which only sum, take `format` alone. The same on every worker of a job.
struct WireOptions {
  // The element format of the pushes: fp32, or bf16/fp16 to halve the bytes; phubd still
  // sums into float32 weights.
  WireFormat format = WireFormat::kFp32;
  // With a compact `format`: phubd sends the weights back in it too, as rounded changes of the
  // float32 weights every worker holds (half the bytes both ways; the default: at parity with
  // float32 in accuracy, docs/benchmarks.md); false: they come back in float32.
  bool weights = true;
  // With a compact `format`: what rounding drops from a tensor's gradient is added to its next
  // push (ConvertToWireWithFeedback), so rounding errors do not accumulate (off only to
  // measure what it is worth). One float per parameter on the worker.
  bool error_feedback = true;

  bool compact() const { return format != WireFormat::kFp32; }
};

}  // namespace phub::kernels
