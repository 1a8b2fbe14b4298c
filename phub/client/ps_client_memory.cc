// PsClient's memory and the data plane: the transport phubd chose, bound once per RDMA device
// (one per NIC) on each of the client's data loops, and the caller's buffers registered with
// it — the weights (landing zones) at connect, the gradients when declared — as host memory,
// or as device memory the NIC reads and writes itself (PsClientOptions::device_memory,
// GPUDirect RDMA).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "phub/client/ps_client_impl.h"
#include "phub/placement/nics.h"
#include "phub/transport/open_device.h"
#include "spdlog/spdlog.h"

namespace phub::client {

namespace {
// A data plane that cannot take device memory: what to do about it.
Status NoGpuDirect(const Status& why) {
  return absl::FailedPreconditionError(
      absl::StrCat("GPUDirect RDMA: ", why.message(),
                   "; start the worker with --gpudirect off to stage through host memory"));
}
}  // namespace

Status PsClient::Impl::CheckDeviceMemory() const {
  if (options_.device_memory && compact_pushes()) {
    return NoGpuDirect(absl::FailedPreconditionError(
        absl::StrCat("the ", kernels::WireFormatName(options_.wire.format),
                     " wire converts every push on the CPU, which cannot read device memory")));
  }
  return absl::OkStatus();
}

Status PsClient::Impl::RegisterWith(transport::Transport& transport, std::span<std::byte> region) {
  if (!options_.device_memory) return transport.Register(region);
  auto exported = options_.device_memory(region);
  if (!exported.ok()) return NoGpuDirect(exported.status());
  if (Status s = transport.RegisterDeviceMemory(*exported); !s.ok()) return NoGpuDirect(s);
  return absl::OkStatus();
}

Status PsClient::Impl::OpenTransport(transport::TransportKind kind, std::size_t cores) {
  // This worker's NICs: the kernel's choice, or --nics (each with its RDMA device).
  const std::vector<std::string> named = placement::SplitList(options_.rdma.device);
  std::vector<placement::Nic> nics{{"", "", options_.rdma.device}};
  if (!options_.nics.empty() || named.size() > 1) {
    PHUB_ASSIGN_OR_RETURN(nics, placement::ResolveNics(options_.nics, named, ""));
  }
  std::vector<std::string> rdma_devices;
  for (const placement::Nic& nic : nics) {
    nic_address_.push_back(nic.address);
    rdma_devices.push_back(nic.rdma_device);
  }
  auto per_nic = transport::OpenDevicePerNic(
      {kind,
       transport::ForScheduling({options_.tcp_no_delay, options_.socket_buffer_bytes},
                                options_.send_window_bytes),
       options_.rdma},
      rdma_devices);
  if (!per_nic.ok()) {
    return Status(per_nic.status().code(),
                  absl::StrCat("phubd's data plane is ", transport::TransportName(kind),
                               ", which this worker cannot open: ", per_nic.status().message()));
  }
  // TCP and shm: io_threads data loops (at most one per server core), loop_ the first (their
  // CPUs copy every byte); verbs: loop_ alone, the NIC moving the bytes.
  std::size_t threads = 1;
  if (options_.io_threads > 1) {
    if (kind != transport::TransportKind::kVerbs) {
      threads = std::min<std::size_t>({static_cast<std::size_t>(options_.io_threads),
                                        std::max<std::size_t>(cores, 1), kMaxIoThreads});
    } else {
      spdlog::info("rank {}: one I/O thread on {}, not {}: the NIC moves the bytes",
                   membership_.rank, transport::TransportName(kind), options_.io_threads);
    }
  }
  for (std::size_t k = 1; k < threads; ++k) {
    io_loops_.push_back(std::make_unique<transport::EventLoop>(
        absl::StrCat("client ", membership_.rank, " io ", k), /*pin_core=*/-1));
  }
  transports_.resize(threads);
  // On every data loop a transport per distinct device; each NIC uses its device's.
  std::vector<std::shared_ptr<transport::Device>> devices;
  for (const auto& device : *per_nic) {
    auto known = std::find(devices.begin(), devices.end(), device);
    transport_of_nic_.push_back(known - devices.begin());
    if (known == devices.end()) {
      spdlog::debug("rank {}: data plane: {}", membership_.rank, device->Describe());
      devices.push_back(device);
    }
  }
  Status status;
  RunOnEachLoop([&](std::size_t k) {
    if (!status.ok()) return;
    // The weight buffers are where phubd writes fresh weights: registered once, here (with
    // a compact wire: their staging buffers, and the pushes' too, which they are sent from),
    // with every device.
    std::vector<std::span<std::byte>> regions;
    for (std::span<float> w : weights_) regions.push_back(std::as_writable_bytes(w));
    for (AlignedBuffer& b : weights_wire_) regions.push_back(std::as_writable_bytes(b.span()));
    for (AlignedBuffer& b : push_wire_) regions.push_back(std::as_writable_bytes(b.span()));
    for (std::size_t d = 0; d < devices.size(); ++d) {
      auto transport = devices[d]->Bind(data_loop(k), static_cast<int>(d));
      if (!transport.ok()) {
        status = transport.status();
        return;
      }
      for (std::span<std::byte> region : regions) {
        if (region.empty()) continue;
        status = RegisterWith(**transport, region);
        if (!status.ok()) return;
      }
      transports_[k].push_back(*std::move(transport));
    }
  });
  return status;
}

Status PsClient::Impl::DeclareGradients(const std::vector<std::span<const float>>& grads) {
  if (grads.size() != weights_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DeclareGradients: ", grads.size(),
                                                   " buffers for ", weights_.size(), " tensors"));
  }
  for (std::size_t t = 0; t < grads.size(); ++t) {
    if (grads[t].size() != weights_[t].size()) {
      return absl::InvalidArgumentError(absl::StrCat("DeclareGradients: tensor ", t, "'s buffer has ",
                                                     grads[t].size(), " floats; it has ",
                                                     weights_[t].size()));
    }
  }
  Status status;
  RunOnEachLoop([&](std::size_t k) {  // each transport is its loop's
    if (!status.ok()) return;
    for (std::span<const float> g : grads) {
      if (g.empty()) continue;
      // Only ever read from (verbs: no rkey of it is published).
      std::span<float> writable(const_cast<float*>(g.data()), g.size());
      for (auto& transport : transports_[k]) {
        status = RegisterWith(*transport, std::as_writable_bytes(writable));
        if (!status.ok()) return;
      }
    }
  });
  return status;
}

}  // namespace phub::client
