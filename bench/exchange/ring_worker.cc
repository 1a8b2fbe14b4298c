// phub_ring_worker: one rank of our own ring allreduce (phub/ring) in the `exchange`
// benchmark, timed exactly like the external baselines (allreduce_timing.h: barrier, timed
// sum, untimed 1/N scaling, result check, checksum, TSV output).
#include <CLI/CLI.hpp>

#include "allreduce_timing.h"
#include "phub/common/logging.h"
#include "phub/ring/ring_allreduce.h"
#include "phub/transport/transport_flags.h"

int main(int argc, char** argv) {
  phub::ring::RingOptions options;
  phub::Membership membership;
  phub::bench::AllreduceRun run;
  CLI::App app{"PHub exchange benchmark: one ring-allreduce rank"};
  app.add_option("--rank", membership.rank)->required();
  app.add_option("--world", membership.world_size)->required();
  app.add_option("--rendezvous", options.rendezvous,
                 "A directory shared by all ranks, or tcp://HOST:PORT of rank 0's node")->required();
  app.add_option("--mib", run.mib, "Buffer size in MiB")->capture_default_str();
  app.add_option("--iters", run.iters)->capture_default_str();
  app.add_option("--warmup", run.warmup)->capture_default_str();
  app.add_option("--piece-bytes", options.piece_bytes, "Pipelining granularity")->capture_default_str();
  app.add_option("--host", options.listen_host, "Address this rank listens on and publishes")
      ->capture_default_str();
  app.add_option("--out", run.out_path)->required();
  phub::transport::AddTransportFlag(app, options.transport, "Ring links: tcp, verbs or shm");
  phub::transport::AddRdmaFlags(app, {&options.rdma});
  app.add_option_function<std::string>(
         "--wire",
         [&](const std::string& name) { options.wire = *phub::kernels::ParseWireFormat(name); },
         "The format pieces travel in (sums stay float32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  CLI11_PARSE(app, argc, argv);
  (void)phub::SetUpLogging("warn", "ring " + std::to_string(membership.rank));
  run.rank = static_cast<int>(membership.rank);
  run.world = static_cast<int>(membership.world_size);
  run.label = "phub_ring_worker piece_bytes=" + std::to_string(options.piece_bytes);

  auto ring = phub::ring::RingAllreduce::Connect(options, membership);
  if (!ring.ok()) return phub::bench::Fail(ring.status(), 3);
  std::vector<float> data = phub::bench::InitialData(run);
  float barrier = 0;
  return phub::bench::RunTimedAllreduce(
      run, data, [&] { return (*ring)->Allreduce({&barrier, 1}); },
      [&] { return (*ring)->Allreduce(data, phub::ring::ReduceOp::kSum); });
}
