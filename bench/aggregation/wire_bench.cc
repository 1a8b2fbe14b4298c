// wire_bench: how close the compact wire's conversions (phub/kernels/wire_format.h) come to the
// memory streams they touch. On arrays of --mib MiB of float32, one pinned core:
//   feedback   ConvertToWireWithFeedback: read in and residual, write residual and the wire
//              (a worker's every push on --wire bf16/fp16); bytes 4 + 4 + 4 + 2 per element
//   change     ConvertChangeToWire: read target and view, write view and the wire (phubd's
//              weights to each worker as changes); the same 14 bytes
//   add        AddFromWire: read the wire and the view, write the view (a worker taking the
//              changes); 2 + 4 + 4 bytes
// each for bf16 and fp16, against the reference: a plain loop over the same streams doing
// nothing but a float add and a truncation to 16 bits (`stream` for 14 bytes, `stream add` for
// 10), measured in the same rounds. Every measurement runs once as a warm-up, then --runs
// rounds of all of them interleaved; the median is kept. Writes DIR/wire.tsv and DIR/wire.md.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/aggregation/streams.h"
#include "fmt/format.h"
#include "phub/common/cpu_pinning.h"
#include "phub/kernels/wire_format.h"

namespace phub::bench {
namespace {

using kernels::WireFormat;

// The streams of feedback/change without their work: out16 = top half of (a + b), b = a + b.
[[gnu::noinline]] void Stream14(const float* __restrict a, float* __restrict b,
                                std::uint16_t* __restrict out, std::size_t n) {
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) {
    const float v = a[i] + b[i];
    out[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);
    b[i] = v;
  }
}
// The streams of add: b += the float whose top half is in[i].
[[gnu::noinline]] void Stream10(const std::uint16_t* __restrict in, float* __restrict b,
                                std::size_t n) {
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) b[i] += std::bit_cast<float>(std::uint32_t{in[i]} << 16);
}

struct Measure {
  std::string kernel, format;
  int bytes_per_element;
  std::string reference;  // the stream row it is compared with ("" for the references)
  std::function<void()> run;
  std::vector<double> ms;
};

int Main(int argc, char** argv) {
  std::size_t mib = 64;
  int runs = 9, core = 0;
  std::string out = "results/wire";
  CLI::App app{"The compact wire's conversions against the memory streams they touch"};
  app.add_option("--mib", mib, "MiB of float32 per array")->check(CLI::Range(1, 4096));
  app.add_option("--runs", runs, "timed rounds (median reported)")->check(CLI::Range(1, 1000));
  app.add_option("--core", core, "core to pin to (-1: unpinned)");
  app.add_option("--out", out, "directory for wire.tsv and wire.md");
  CLI11_PARSE(app, argc, argv);
  if (core >= 0) {
    if (Status s = PinThisThreadToCore(core); !s.ok()) std::cerr << s << " (running unpinned)\n";
  }
  const std::size_t n = mib * (std::size_t{1} << 20) / sizeof(float);
  BenchArray in(n, false), residual(n, false), target(n, false), view(n, false);
  in.FillRandom(1);
  target.FillRandom(2);
  std::fill_n(residual.data(), n, 0.0f);
  std::fill_n(view.data(), n, 0.0f);
  std::vector<std::uint16_t> wire(n);
  auto* bytes = reinterpret_cast<std::byte*>(wire.data());
  std::vector<Measure> m;
  m.push_back(
      {"stream", "-", 14, "", [&] { Stream14(in.data(), residual.data(), wire.data(), n); }, {}});
  m.push_back({"stream add", "-", 10, "", [&] { Stream10(wire.data(), view.data(), n); }, {}});
  for (WireFormat f : {WireFormat::kBf16, WireFormat::kFp16}) {
    const std::string name = kernels::WireFormatName(f);
    m.push_back(
        {"feedback",
         name,
         14,
         "stream",
         [&, f] { kernels::ConvertToWireWithFeedback(f, in.span(), residual.span(), bytes); },
         {}});
    m.push_back({"change",
                 name,
                 14,
                 "stream",
                 [&, f] {
                   kernels::ConvertChangeToWire(f, target.span(), view.span(), view.span(), bytes);
                 },
                 {}});
    m.push_back({"add",
                 name,
                 10,
                 "stream add",
                 [&, f] { kernels::AddFromWire(f, bytes, view.span()); },
                 {}});
  }
  for (Measure& x : m) x.run();  // warm-up: every page touched
  for (int r = 0; r < runs; ++r) {
    std::cerr << fmt::format("round {}/{}\n", r + 1, runs);
    for (Measure& x : m) {
      const auto t0 = std::chrono::steady_clock::now();
      x.run();
      x.ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::filesystem::create_directories(out);
  std::ofstream tsv(out + "/wire.tsv"), md(out + "/wire.md");
  tsv << "kernel\tformat\tmib\tbytes_per_element\tmedian_ms\tgb_per_s\tover_reference\n";
  md << fmt::format("{} MiB of float32 per array, one core, median of {} rounds\n\n", mib, runs);
  md << "| kernel | format | bytes / element | median ms | GB/s | time over its stream "
        "reference |\n|---|---|---:|---:|---:|---:|\n";
  for (const Measure& x : m) {
    const double ms = Median(x.ms);
    const double gbs = double(x.bytes_per_element) * double(n) / (ms * 1e6);
    double ratio = 1.0;
    for (const Measure& ref : m) {
      if (!x.reference.empty() && ref.kernel == x.reference) ratio = ms / Median(ref.ms);
    }
    tsv << fmt::format("{}\t{}\t{}\t{}\t{:.3f}\t{:.2f}\t{:.2f}\n", x.kernel, x.format, mib,
                       x.bytes_per_element, ms, gbs, ratio);
    md << fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {} |\n", x.kernel, x.format,
                      x.bytes_per_element, ms, gbs,
                      x.reference.empty() ? "(reference)" : fmt::format("{:.2f}×", ratio));
  }
  tsv.close();
  md.close();
  if (!tsv || !md) {
    std::cerr << "could not write " << out << "/wire.tsv or wire.md (disk full? permissions?)\n";
    return 1;
  }
  std::cout << std::ifstream(out + "/wire.md").rdbuf();
  return 0;
}

}  // namespace
}  // namespace phub::bench

int main(int argc, char** argv) { return phub::bench::Main(argc, argv); }
