#include "phub/transport/verbs/verbs_endpoint.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::transport::verbs {

proto::ControlMessage EncodeEndpoint(const QpAddress& qp, const StagedRing& ring,
                                     const std::vector<PublishedZone>& zones,
                                     const std::optional<WireHeader>& attach) {
  proto::ControlMessage message;
  proto::VerbsEndpoint& e = *message.mutable_verbs_endpoint();
  e.set_qpn(qp.qpn);
  e.set_psn(qp.psn);
  e.set_gid(std::string(reinterpret_cast<const char*>(qp.gid.raw), sizeof qp.gid.raw));
  e.set_lid(qp.lid);
  e.set_mtu(qp.mtu);
  e.set_staged_address(ring.address);
  e.set_staged_rkey(ring.rkey);
  e.set_staged_slots(ring.slots);
  e.set_staged_slot_bytes(ring.slot_bytes);
  if (attach) {
    const EncodedHeader encoded = EncodeWireHeader(*attach);
    e.set_attach(std::string(reinterpret_cast<const char*>(encoded.data()), encoded.size()));
  }
  for (const PublishedZone& z : zones) {
    proto::VerbsZone& out = *e.add_zones();
    out.set_op(static_cast<std::uint32_t>(z.zone.op));
    out.set_worker(z.zone.worker);
    out.set_chunk(z.zone.chunk);
    out.set_first_iteration(z.zone.first_iteration);
    out.set_address(reinterpret_cast<std::uint64_t>(z.zone.bytes.data()));
    out.set_rkey(z.rkey);
    out.set_bytes(static_cast<std::uint32_t>(z.zone.bytes.size()));
  }
  return message;
}

StatusOr<PeerEndpoint> DecodeEndpoint(const proto::ControlMessage& message) {
  if (message.has_error()) {
    return absl::UnavailableError(absl::StrCat("the peer refused the verbs connection: ",
                                               message.error().message()));
  }
  if (!message.has_verbs_endpoint()) {
    return absl::InvalidArgumentError(
        "the peer's first message on a verbs data connection is not a VerbsEndpoint: is it "
        "running the TCP transport? (phubd --transport and the workers must agree)");
  }
  const proto::VerbsEndpoint& e = message.verbs_endpoint();
  PeerEndpoint peer;
  if (e.gid().size() != sizeof peer.qp.gid.raw) {
    return absl::InvalidArgumentError(
        absl::StrCat("VerbsEndpoint GID of ", e.gid().size(), " bytes; a GID has 16"));
  }
  // The slot size sizes our send buffers: bounded, so a peer cannot make us allocate gigabytes.
  if (e.staged_slots() == 0 || e.staged_slot_bytes() < kWireHeaderBytes ||
      e.staged_slot_bytes() > kWireHeaderBytes + (64u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VerbsEndpoint with a staged ring of ", e.staged_slots(), " slots of ",
        e.staged_slot_bytes(), " bytes: need at least one slot of a header up to 64 MiB"));
  }
  if (!e.attach().empty()) {
    if (e.attach().size() != kWireHeaderBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("VerbsEndpoint ATTACH of ", e.attach().size(), " bytes; a header has 32"));
    }
    auto header = DecodeWireHeader(std::span<const std::byte, kWireHeaderBytes>(
        reinterpret_cast<const std::byte*>(e.attach().data()), kWireHeaderBytes));
    if (!header.ok() || header->op != Op::kAttach) {
      return absl::InvalidArgumentError(absl::StrCat(
          "VerbsEndpoint ATTACH is not one: ",
          header.ok() ? OpName(header->op) : std::string(header.status().message())));
    }
    peer.attach = *header;
  }
  peer.qp.qpn = e.qpn();
  peer.qp.psn = e.psn();
  std::memcpy(peer.qp.gid.raw, e.gid().data(), sizeof peer.qp.gid.raw);
  peer.qp.lid = static_cast<std::uint16_t>(e.lid());
  peer.qp.mtu = static_cast<std::uint8_t>(e.mtu());
  peer.ring = StagedRing{e.staged_address(), e.staged_rkey(), e.staged_slots(),
                         e.staged_slot_bytes()};
  for (const proto::VerbsZone& z : e.zones()) {
    if (z.op() == 0 || z.op() > static_cast<std::uint32_t>(Op::kError) || z.worker() > 0xffffffu ||
        z.bytes() == 0 || z.bytes() > kMaxPayloadBytes) {
      return absl::InvalidArgumentError(absl::StrCat("VerbsEndpoint zone ", peer.zones.size(),
                                                     " is malformed (op ", z.op(), ", worker ",
                                                     z.worker(), ", ", z.bytes(), " bytes)"));
    }
    const std::uint64_t key = ZoneKey(static_cast<Op>(z.op()), z.worker(), z.chunk());
    if (!peer.zone_index.emplace(key, static_cast<std::uint32_t>(peer.zones.size())).second) {
      return absl::InvalidArgumentError(absl::StrCat("VerbsEndpoint lists the zone of op ", z.op(),
                                                     ", worker ", z.worker(), ", chunk ",
                                                     z.chunk(), " twice"));
    }
    peer.zones.push_back(RemoteZone{z.address(), z.rkey(), z.bytes(), z.first_iteration()});
  }
  return peer;
}

}  // namespace phub::transport::verbs
