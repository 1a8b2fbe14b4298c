// phub_nccl_worker: one rank of NCCL's allreduce (phub/nccl) in the `exchange` benchmark: the
// GPU ring a user would otherwise pick, timed exactly like the others (allreduce_timing.h:
// barrier, timed sum, untimed 1/N scaling, result check, checksum, TSV output).
//
// The buffer is copied to the GPU once; each iteration the barrier is a 1-float allreduce and
// the timed sum is one NcclAllreduce::Allreduce on the device buffer (it returns when the GPU
// is done). The untimed scaling copies the sum to the host, scales it there exactly as the
// other workers do and copies it back, so the final buffer and checksum are the same bytes as
// phub_ring_worker's. One GPU per rank: device = rank % visible devices unless --device.
// Without a GPU it exits with 3 and says so.
#include <CLI/CLI.hpp>

#include "allreduce_timing.h"
#include "phub/common/logging.h"
#include "phub/nccl/device_buffer.h"
#include "phub/nccl/nccl_allreduce.h"

int main(int argc, char** argv) {
  phub::nccl::NcclOptions options;
  phub::bench::AllreduceRun run;
  CLI::App app{"PHub exchange benchmark: one NCCL allreduce rank (one GPU)"};
  app.add_option("--rank", options.rank)->required();
  app.add_option("--world", options.world_size)->required();
  app.add_option("--rendezvous", options.rendezvous,
                 "A directory shared by all ranks, or tcp://HOST:PORT of rank 0's node")
      ->required();
  app.add_option("--mib", run.mib, "Buffer size in MiB")->capture_default_str();
  app.add_option("--iters", run.iters)->capture_default_str();
  app.add_option("--warmup", run.warmup)->capture_default_str();
  app.add_option("--device", options.device, "CUDA device ordinal; -1: rank % visible devices")
      ->capture_default_str();
  app.add_option("--timeout-ms", options.timeout_ms, "Bound on joining and on each call")
      ->capture_default_str();
  app.add_option("--out", run.out_path)->required();
  CLI11_PARSE(app, argc, argv);
  (void)phub::SetUpLogging("warn", "nccl " + std::to_string(options.rank));
  run.rank = static_cast<int>(options.rank);
  run.world = static_cast<int>(options.world_size);

  auto nccl = phub::nccl::NcclAllreduce::Connect(options);  // FailedPrecondition without a GPU
  if (!nccl.ok()) return phub::bench::Fail(nccl.status(), 3);
  run.label = "phub_nccl_worker nccl=" + phub::nccl::NcclVersion() +
              " device=" + std::to_string((*nccl)->device());

  std::vector<float> data = phub::bench::InitialData(run);
  auto buffer = phub::nccl::DeviceBuffer::Allocate((*nccl)->device(), data.size());
  if (!buffer.ok()) return phub::bench::Fail(buffer.status(), 3);
  auto barrier = phub::nccl::DeviceBuffer::Allocate((*nccl)->device(), 1);
  if (!barrier.ok()) return phub::bench::Fail(barrier.status(), 3);
  if (auto s = buffer->CopyFromHost(data); !s.ok()) return phub::bench::Fail(s, 3);
  if (auto s = barrier->CopyFromHost(std::vector<float>{0.0f}); !s.ok()) {
    return phub::bench::Fail(s, 3);
  }
  return phub::bench::RunTimedAllreduce(
      run, data, [&] { return (*nccl)->Allreduce(barrier->data(), 1); },
      [&] {
        return (*nccl)->Allreduce(buffer->data(), buffer->size(), phub::nccl::ReduceOp::kSum);
      },
      [&]() -> absl::Status {
        if (auto s = buffer->CopyToHost(data); !s.ok()) return s;
        phub::bench::ScaleToMean(run, data);
        return buffer->CopyFromHost(data);
      });
}
