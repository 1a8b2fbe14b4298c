#include "phub/transport/verbs/verbs_device.h"

#include <arpa/inet.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "phub/transport/verbs/verbs_error.h"

namespace phub::transport::verbs {
namespace {

// ::ffff:a.b.c.d — the RoCE v2 GID the kernel derives from an interface's IPv4 address.
bool IsIpv4Mapped(const ibv_gid& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid.raw[i] != 0) return false;
  }
  return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

bool IsZero(const ibv_gid& gid) {
  for (std::uint8_t b : gid.raw) {
    if (b != 0) return false;
  }
  return true;
}

int MtuBytes(ibv_mtu mtu) { return 128 << static_cast<int>(mtu); }

struct DeviceList {
  ibv_device** devices = nullptr;
  int count = 0;
  DeviceList() { devices = ibv_get_device_list(&count); }
  ~DeviceList() {
    if (devices != nullptr) ibv_free_device_list(devices);
  }
};

}  // namespace

std::string GidToString(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
  return text;
}

std::vector<std::string> ListDevices() {
  DeviceList list;
  std::vector<std::string> names;
  for (int i = 0; list.devices != nullptr && i < list.count; ++i) {
    names.emplace_back(ibv_get_device_name(list.devices[i]));
  }
  return names;
}

StatusOr<std::unique_ptr<VerbsDevice>> VerbsDevice::Open(const DeviceOptions& options) {
  if (options.port < 1 || options.port > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDMA port ", options.port, " is not a port number: ports count from 1"));
  }
  DeviceList list;
  if (list.devices == nullptr || list.count == 0) {
    return absl::NotFoundError(
        "no RDMA device: ibv_get_device_list found none (no HCA, no rdma_rxe/siw device, or "
        "no provider in ibverbs-providers); `ibv_devices` lists what verbs sees, or use TCP");
  }
  ibv_device* chosen = nullptr;
  std::vector<std::string> names;
  for (int i = 0; i < list.count; ++i) {
    names.emplace_back(ibv_get_device_name(list.devices[i]));
    if (chosen == nullptr && (options.device.empty() || names.back() == options.device)) {
      chosen = list.devices[i];
    }
  }
  if (chosen == nullptr) {
    return absl::NotFoundError(absl::StrCat("no RDMA device '", options.device,
                                            "'; this machine has: ", absl::StrJoin(names, ", ")));
  }
  std::unique_ptr<VerbsDevice> device(new VerbsDevice());
  device->name_ = ibv_get_device_name(chosen);
  device->port_ = static_cast<std::uint8_t>(options.port);
  device->context_ = ibv_open_device(chosen);
  if (device->context_ == nullptr) return VerbsError("ibv_open_device", device->name_, errno);

  ibv_device_attr device_attr{};
  if (int err = ibv_query_device(device->context_, &device_attr); err != 0) {
    return VerbsError("ibv_query_device", device->name_, err);
  }
  device->max_cqe_ = device_attr.max_cqe;
  device->completion_vectors_ = std::max(1, device->context_->num_comp_vectors);
  if (options.port > device_attr.phys_port_cnt) {
    return absl::NotFoundError(absl::StrCat(device->name_, " has ", int{device_attr.phys_port_cnt},
                                            " port(s); port ", options.port, " is not one"));
  }
  ibv_port_attr port_attr{};
  if (int err = ibv_query_port(device->context_, device->port_, &port_attr); err != 0) {
    return VerbsError(absl::StrCat("ibv_query_port(", options.port, ")"), device->name_, err);
  }
  if (port_attr.state != IBV_PORT_ACTIVE) {
    return absl::UnavailableError(absl::StrCat(
        device->name_, " port ", options.port, " is ", ibv_port_state_str(port_attr.state),
        ", not ACTIVE: check the link (`ibv_devinfo -d ", device->name_, "`)"));
  }
  device->lid_ = port_attr.lid;
  device->active_mtu_ = port_attr.active_mtu;
  device->roce_ = port_attr.link_layer == IBV_LINK_LAYER_ETHERNET;

  int index = options.gid_index;
  if (index < 0 && !device->roce_) index = 0;
  if (index < 0) {  // the first IPv4-mapped GID of the port's table
    for (int i = 0; i < port_attr.gid_tbl_len && index < 0; ++i) {
      ibv_gid gid{};
      if (ibv_query_gid(device->context_, device->port_, i, &gid) == 0 && IsIpv4Mapped(gid)) {
        index = i;
      }
    }
    if (index < 0) {
      return absl::NotFoundError(absl::StrCat(
          device->name_, " port ", options.port, " has no IPv4-mapped RoCE v2 GID: give its "
          "netdev an IPv4 address, or choose a GID with --rdma-gid-index (`show_gids`)"));
    }
  }
  if (index >= port_attr.gid_tbl_len) {
    return absl::InvalidArgumentError(absl::StrCat("GID index ", index, " is outside ",
                                                   device->name_, "'s table of ",
                                                   port_attr.gid_tbl_len, " entries"));
  }
  if (int err = ibv_query_gid(device->context_, device->port_, index, &device->gid_); err != 0) {
    return VerbsError(absl::StrCat("ibv_query_gid(", index, ")"), device->name_, err);
  }
  if (device->roce_ && IsZero(device->gid_)) {
    return absl::NotFoundError(absl::StrCat(device->name_, " GID ", index,
                                            " is empty: choose another with --rdma-gid-index"));
  }
  device->gid_index_ = index;

  device->pd_ = ibv_alloc_pd(device->context_);
  if (device->pd_ == nullptr) return VerbsError("ibv_alloc_pd", device->name_, errno);
  return device;
}

VerbsDevice::~VerbsDevice() {
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (context_ != nullptr) ibv_close_device(context_);
}

std::string VerbsDevice::Describe() const {
  return absl::StrCat(name_, " port ", int{port_}, ", ", roce_ ? "RoCE" : "InfiniBand", ", GID ",
                      gid_index_, " ", GidToString(gid_), roce_ ? "" : absl::StrCat(", LID ", lid_),
                      ", MTU ", MtuBytes(active_mtu_));
}

}  // namespace phub::transport::verbs
