// phub_gloo_worker: one rank of Gloo's allreduce in the `exchange` benchmark, an external
// baseline beside phub_ring_worker (same timing rule, data, check and output:
// allreduce_timing.h).
//
// Ranks meet through gloo::rendezvous::FileStore in --rendezvous (a fresh directory per run,
// shared by all ranks), build a TCP device on --host and connect a full mesh. --algo picks the
// timed collective:
//   ring-chunked  gloo::AllreduceRingChunked<float> (the classic algorithm object: built once,
//                 its buffers registered once, run() per iteration; 2·N chunks in flight);
//   allreduce     gloo::allreduce(AllreduceOptions) with the algorithm left UNSPECIFIED, which
//                 this Gloo (Debian 0.5.0, git 2022-05-18) runs as its segmented ring over
//                 unbound buffers (1 MiB segments, two in flight) — what PyTorch's
//                 ProcessGroupGloo calls.
// The barrier before each iteration is gloo::allreduce of one float in both modes
// (AllreduceRingChunked pads to 256-float chunks and is not meant for one element).
//
// Reduction: sum (gloo::sum<float>); the 1/N scaling to the mean is done after the timed span
// (allreduce_timing.h says why), so the result is checked against (N + 1) / 2.
//
// Gloo reports failures by throwing gloo::Exception (IoException, TimeoutException,
// EnforceNotMet); they are caught here and become exit code 3.
#include <CLI/CLI.hpp>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <climits>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "allreduce_timing.h"

namespace {

// Runs `fn`, turning a Gloo exception into a Status naming `what`.
template <typename Fn>
absl::Status Guard(const char* what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::UnavailableError(std::string(what) + ": " + e.what());
  }
}

// Sum reduction in the type-erased form AllreduceOptions wants.
void SumFloats(void* c, const void* a, const void* b, size_t n) { gloo::sum<float>(c, a, b, n); }

}  // namespace

int main(int argc, char** argv) {
  phub::bench::AllreduceRun run;
  std::string rendezvous, host = "127.0.0.1";
  std::string algo = "ring-chunked";
  int timeout_s = 120;
  CLI::App app{"PHub exchange benchmark: one Gloo allreduce rank"};
  app.add_option("--rank", run.rank)->required()->check(CLI::NonNegativeNumber);
  app.add_option("--world", run.world)->required()->check(CLI::PositiveNumber);
  app.add_option("--rendezvous", rendezvous, "Directory shared by all ranks (FileStore)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--host", host, "Address of the TCP device")->capture_default_str();
  app.add_option("--algo", algo, "ring-chunked: AllreduceRingChunked; allreduce: gloo::allreduce")
      ->check(CLI::IsMember({"ring-chunked", "allreduce"}))
      ->capture_default_str();
  app.add_option("--mib", run.mib, "Buffer size in MiB")->capture_default_str();
  app.add_option("--iters", run.iters)->capture_default_str();
  app.add_option("--warmup", run.warmup)->capture_default_str();
  app.add_option("--timeout-s", timeout_s, "Gloo's per-operation timeout")->capture_default_str();
  app.add_option("--out", run.out_path)->required();
  CLI11_PARSE(app, argc, argv);
  if (run.rank >= run.world) {
    std::fprintf(stderr, "--rank %d must be below --world %d\n", run.rank, run.world);
    return 2;
  }
  run.label = "phub_gloo_worker algo=" + algo;

  std::shared_ptr<gloo::rendezvous::Context> context;
  if (auto s = Guard("gloo rendezvous", [&] {
        gloo::transport::tcp::attr attr;
        attr.hostname = host;
        auto device = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::FileStore store(rendezvous);
        context = std::make_shared<gloo::rendezvous::Context>(run.rank, run.world);
        context->setTimeout(std::chrono::seconds(timeout_s));
        context->connectFullMesh(store, device);
      });
      !s.ok()) {
    return phub::bench::Fail(s, 3);
  }

  std::vector<float> data = phub::bench::InitialData(run);
  if (data.size() > static_cast<std::size_t>(INT_MAX)) {  // AllreduceRingChunked counts in int
    std::fprintf(stderr, "--mib %g is more floats than an int counts\n", run.mib);
    return 2;
  }
  float one = 0;
  gloo::AllreduceOptions barrier_opts(context);
  barrier_opts.setOutput(&one, 1);
  barrier_opts.setReduceFunction(&SumFloats);
  barrier_opts.setTag(0);
  // Built once, like a framework that keeps its gradient buffer: only run() is timed.
  std::unique_ptr<gloo::AllreduceRingChunked<float>> chunked;
  std::unique_ptr<gloo::AllreduceOptions> sum_opts;
  if (auto s = Guard("gloo setup", [&] {
        if (algo == "ring-chunked") {
          chunked = std::make_unique<gloo::AllreduceRingChunked<float>>(
              context, std::vector<float*>{data.data()}, static_cast<int>(data.size()));
        } else {
          sum_opts = std::make_unique<gloo::AllreduceOptions>(context);
          sum_opts->setOutput(data.data(), data.size());
          sum_opts->setReduceFunction(&SumFloats);
          sum_opts->setTag(1);
        }
      });
      !s.ok()) {
    return phub::bench::Fail(s, 3);
  }

  return phub::bench::RunTimedAllreduce(
      run, data,
      [&] { return Guard("gloo barrier allreduce", [&] { gloo::allreduce(barrier_opts); }); },
      [&] {
        return Guard("gloo allreduce", [&] {
          if (chunked) {
            chunked->run();
          } else {
            gloo::allreduce(*sum_opts);
          }
        });
      });
}
