// --io-threads, a PS client's threads for its data connections (PsClientOptions::io_threads),
// declared once for phub-worker and the exchange benchmark's worker.
#pragma once

#include <CLI/CLI.hpp>

namespace phub::client {

inline void AddIoThreadsFlag(CLI::App& app, int& io_threads) {
  app.add_option("--io-threads", io_threads,
                 "PS on TCP: threads serving this worker's connections to phubd's cores (at "
                 "most one per core). One thread copies every byte both ways through the "
                 "kernel; a worker moving ~100 MB a step on loopback or a fast NIC (a GPU's) "
                 "needs several. verbs uses one")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
}

}  // namespace phub::client
