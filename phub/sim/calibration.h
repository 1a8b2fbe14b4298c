// Every constant the simulator takes from a measurement, each with where it was measured
// (docs/benchmarks.md unless said): the simulator guesses nothing a bench/ run on this project
// has measured. A Scenario carries a Calibration; `phubctl plan` and bench/sim/ may override
// any of them (another machine's measurements, a faster NIC).
#pragma once

#include "phub/placement/sizing.h"

namespace phub::sim {

struct Calibration {
  // A shaped link's goodput over its rate: TCP through an htb-shaped veth, 95.6 % of the rate
  // (deploy/netns/README.md "Shaping", bench/topo/measure_shaping.py). Applied to every link.
  double link_goodput = 0.956;
  // Incast: a PS host's link into which more senders push than it can take (o = the senders'
  // rates together over its rate; a cloud server's o = N, each of K servers' N / K) loses goodput to the queue's drops
  // and TCP's backoff: its goodput is min(link_goodput, incast_floor + incast_slope / o) of
  // its rate. Fitted on the cloud PS rows at 100 MiB, N = 2, 4, 8 (docs/benchmarks.md
  // "Exchange", cloud: 1902.0, 4324.8, 9198.8 ms against 1678, 3355, 6711 at the rate: 0.882,
  // 0.776, 0.730 = 0.679 + 0.405 / N within 0.004); every other row validates it
  // (bench/sim/validate.py).
  double incast_floor = 0.679;
  double incast_slope = 0.405;
  // Gradient bytes one phubd core absorbs a second with the fused sum + optimizer kernel, N
  // copies summed and momentum applied, one core of this VM (bench/aggregation, "Kernel on C
  // cores": 25.3 GB/s at C = 1, ~19 GB/s a core at C = 2).
  double aggregate_bytes_per_core_second = 19e9;
  // phubd's core-seconds per byte received over TCP on the emulated PBox rack (the job-end log
  // line's "ns per byte in", "phubd CPU per byte": 0.504 / 0.506 ns on pbox, 0.30 on loopback),
  // and over verbs (the NIC places the bytes): phubd's own sizing figures, which warn at start
  // when a NIC has too few cores (phub/placement/sizing.h says where each was measured).
  double tcp_core_seconds_per_byte = placement::kTcpCoreSecondsPerByte;
  double verbs_core_seconds_per_byte = placement::kVerbsCoreSecondsPerByte;
  // A worker's compute, FLOPs a second (a model's FLOPs as bench/sim/models.py counts them: the
  // convolutions' and matrix products'): ResNet-50 at batch 64, 1.570 TFLOP a step, took
  // phub-worker 38.9 ms on one H200 in TF32 (docs/benchmarks.md "Fourth GPU": 40.4 TFLOP/s;
  // PyTorch took 32.8 ms, 47.9). Transformers' FLOPs are denser matrix products and run faster
  // on the same GPU, so their compute here is, if anything, long: the exchange's share short.
  double compute_flops_per_second = 40.4e12;
  // One message's fixed cost on its link beyond its bytes (headers, the stack's per-send
  // work), in seconds. The emulated racks add no delay (this kernel has no netem), so this is
  // all a message costs beyond bandwidth there; 0 until bench/sim/validate.py fits it.
  double message_seconds = 0;
};

}  // namespace phub::sim
