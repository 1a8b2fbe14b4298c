// One opened RDMA device: its context, a protection domain, and the port and GID this process
// talks through. Chosen by flags (phubd/phub-worker --rdma-device, --rdma-port, --rdma-gid-index)
// with defaults that work on a single-HCA box: the first device, port 1, and on RoCE the
// IPv4-mapped RoCE v2 GID (soft-RoCE exposes v2 GIDs only; on a dummy netdev index 1 is the
// IPv4-mapped one, index 0 the link-local). InfiniBand ports address by LID and use GID 0.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::transport::verbs {


// The names of the RDMA devices this process can open ("rxe0", "mlx5_0"); empty without any
// (no provider, no kernel driver) — the caller's cue to skip or to fall back to TCP.
std::vector<std::string> ListDevices();

class VerbsDevice {
 public:
  // NotFound (naming the devices there are) for an unknown device, a port that is not there
  // or not ACTIVE, or no usable GID; the verbs call's error otherwise.
  static StatusOr<std::unique_ptr<VerbsDevice>> Open(const DeviceOptions& options);
  ~VerbsDevice();
  VerbsDevice(const VerbsDevice&) = delete;
  VerbsDevice& operator=(const VerbsDevice&) = delete;

  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  const std::string& name() const { return name_; }
  std::uint8_t port() const { return port_; }
  int gid_index() const { return gid_index_; }
  const ibv_gid& gid() const { return gid_; }
  std::uint16_t lid() const { return lid_; }
  ibv_mtu active_mtu() const { return active_mtu_; }
  bool is_roce() const { return roce_; }
  int max_cqe() const { return max_cqe_; }  // the deepest completion queue it allows
  // Interrupt vectors completions can be signalled on (a NIC's queues, each with its IRQ,
  // which deploy/pbox/tune-nics.sh points at the core that polls it); at least 1.
  int completion_vectors() const { return completion_vectors_; }
  // "rxe0 port 1, RoCE, GID 1 ::ffff:192.0.2.1, MTU 4096": for the start-up log line.
  std::string Describe() const;

 private:
  VerbsDevice() = default;

  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::string name_;
  std::uint8_t port_ = 1;
  int gid_index_ = 0;
  ibv_gid gid_{};
  std::uint16_t lid_ = 0;
  ibv_mtu active_mtu_ = IBV_MTU_1024;
  bool roce_ = false;
  int max_cqe_ = 0;
  int completion_vectors_ = 1;
};

// "::ffff:192.0.2.1" or the 8 groups of a full IPv6 GID.
std::string GidToString(const ibv_gid& gid);

}  // namespace phub::transport::verbs
