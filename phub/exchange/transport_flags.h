// A worker's data-plane flags, declared once for phub-worker and the test worker: --transport
// (the ring's links; a PS job follows phubd's --transport), --nics (a PS client's NICs) and the
// RDMA device flags, written
// into every exchange's options so ps, ps-colocated and ring use the same device; and the PS
// client's --send-window-bytes (priority scheduling of its pushes) and --io-threads, --wire
// (PS, ring and NCCL), and the staging's --segment-bytes.
#pragma once

#include "phub/client/io_threads_flag.h"
#include "phub/client/wire_flags.h"
#include "phub/exchange/make_exchange.h"
#include "phub/placement/nics.h"
#include "phub/transport/transport_flags.h"

namespace phub::exchange {

inline void AddTransportFlags(CLI::App& app, ExchangeOptions& options) {
  transport::AddTransportFlag(app, options.ring.ring.transport,
                              "Ring links: tcp, verbs (RDMA) or shm (every rank on one host). "
                              "PS jobs use what phubd was started with");
  transport::AddRdmaFlags(app, {&options.ps.client.rdma, &options.ring.ring.rdma});
  app.add_option_function<std::string>(
      "--nics",
      [&options](const std::string& list) {
        options.ps.client.nics = placement::SplitList(list);
      },
      "PS: this worker's NICs, comma-separated interfaces or addresses; the connection to a "
      "phubd core on phubd's NIC k leaves from NIC k modulo their number (a PBox and workers "
      "with a NIC per rail). With --transport verbs each NIC's RDMA device is the one on it, "
      "or --rdma-device lists one per NIC. Default: the kernel's choice");
  app.add_option_function<std::string>(
         "--gpudirect",
         [&options](const std::string& name) {
           auto mode = ParseGpuDirectMode(name);
           if (!mode) throw CLI::ValidationError("--gpudirect", "auto, on or off, not " + name);
           options.gpudirect = *mode;
         },
         "GPU workers, PS: auto lets the NIC read gradients from and write weights into GPU "
         "memory (GPUDirect RDMA) where the GPU, its driver, the RDMA device and phubd on "
         "verbs allow, else stages through pinned host memory, saying why; on: GPUDirect or an "
         "error; off: always stage")
      ->default_str("auto");
  app.add_option("--segment-bytes", options.segment_bytes,
                 "GPU workers (staged), and CPU workers alike so that both can share a job: a "
                 "tensor longer than this is copied to host, pushed and copied back in segments "
                 "of it, so its push starts once its first segment is on the host. A multiple "
                 "of 4; 0: whole tensors. Every worker of a job must give the same")
      ->default_val(options.segment_bytes);
  transport::AddSendWindowFlag(app, options.ps.client.send_window_bytes);
  client::AddIoThreadsFlag(app, options.ps.client.io_threads);
  client::AddWireFlags(app, options.ps.client.wire,
                       {&options.ring.ring.wire, &options.nccl.wire});
}

}  // namespace phub::exchange
