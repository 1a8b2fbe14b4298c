// How PHub's logic gets Connections without knowing which transport carries them (the shape of
// gloo's transport::Device -> Pair):
//
//   auto device = OpenDevice(options);           // once per process (open_device.h: the only
//                                                // code that names tcp or verbs)
//   loop.Run([&] { transport = device->Bind(loop); });   // once per event loop
//   transport->Listen(address, port, hooks);     // accepting side: ready connections to hooks
//   transport->Dial(request, handler);           // dialing side: a connection ready to Start()
//
// Everything a transport does before a connection can carry data (TCP: connect and the ATTACH;
// verbs: queue pair, landing zones and their rkeys exchanged over a TCP side channel) happens
// behind Dial and Listen. What the owner decides (may this peer connect at all, who handles
// it, whether its ATTACH is acceptable) is passed in: the owner's ConnectionHandler checks the
// ATTACH (ResolveSlot, and LandingZones before any address is published), AcceptHooks decide
// admission. A transport knows nothing of jobs, shards or rings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "phub/common/status.h"
#include "phub/transport/connection.h"
#include "phub/transport/event_loop.h"

namespace phub::transport {

// What a connection's owner knows of its traffic. Transports that prepare buffers before any
// data (verbs: registered send buffers and the staged receive ring) size them from it, never
// from what the peer claims; TCP needs none of it.
struct ConnectionSizing {
  std::uint64_t max_send_bytes = 1 << 20;    // the largest payload this side ever sends
  std::uint32_t max_unplaced_bytes = 4096;   // the largest payload received outside a landing
                                             // zone (ConnectionHandler::LandingZones)
  std::uint32_t unplaced_in_flight = 8;      // such messages the peer may have on the way
  std::uint32_t send_copies = 8;             // payloads from unregistered memory in flight
};

// The dialing side's request.
struct DialRequest {
  std::string host;
  std::uint16_t port = 0;
  int timeout_ms = 30000;  // refused connections are retried this long (the peer may start late)
  // The first message, which says who this side is. The acceptor's handler receives it first;
  // verbs carries it in the set-up so that it is checked before any address goes out.
  WireHeader attach;
  ConnectionSizing sizing;
  // This side's address to dial from (the NIC it leaves by); empty: the kernel's choice.
  std::string local_address;
};

// What the accepting side's owner decides for each incoming connection. All run on the loop.
struct AcceptHooks {
  // At accept, before any set-up: the sizing of the new connection, or nullopt to refuse it
  // (closed at once). `setting_up`: this listener's connections accepted and not yet ready,
  // which hold resources too (for --max-connections).
  std::function<std::optional<ConnectionSizing>(std::size_t setting_up)> admit;
  // Who handles the connection, asked when the transport first needs it (TCP: at accept;
  // verbs: when the dialer's endpoint is in). Null refuses it (e.g. the job ended meanwhile).
  std::function<ConnectionHandler*()> handler_now;
  // The set-up is done: the connection is the owner's, not yet started.
  std::function<void(std::shared_ptr<Connection>)> ready;
  // Accept to ready, at most: a peer that stalls its set-up is closed then.
  int setup_timeout_ms = 30000;
};

// Accepts on one address until Stop() or destruction (on the loop's thread).
class Acceptor {
 public:
  virtual ~Acceptor() = default;
  virtual std::uint16_t port() const = 0;
  // Fails every connection still in its set-up with `why` (their `ready` never comes): an
  // owner whose job ends must not receive connections meant for it.
  virtual void CloseSettingUp(const Status& why) = 0;
  virtual void Stop() = 0;
};

// A transport bound to one event loop. Every call on the loop's thread, except Dial.
// A range of device memory as its driver exports it for a NIC: a dma-buf file descriptor
// (owned by the caller, who may close it once registered) whose bytes from `offset` are
// `range`, the memory's virtual addresses in this process (cuMemGetHandleForAddressRange).
struct DeviceMemory {
  std::span<std::byte> range;
  int dmabuf_fd = -1;
  std::uint64_t offset = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Connects to request.host:port and sets the connection up; blocks the calling thread, which
  // must not be the loop's. The connection runs on the loop and is returned not yet started.
  virtual StatusOr<std::shared_ptr<Connection>> Dial(const DialRequest& request,
                                                     ConnectionHandler* handler) = 0;

  // Binds address:port (0: the kernel picks; Acceptor::port() says which) and accepts.
  virtual StatusOr<std::unique_ptr<Acceptor>> Listen(const std::string& address,
                                                     std::uint16_t port, AcceptHooks hooks) = 0;

  // Memory that connections of this loop send from or receive into in place, until
  // ForgetRegistered (a job's buffers, a worker's weights). Verbs registers it with the NIC
  // (errors name the memlock limit); TCP has nothing to do. Connections made before a
  // ForgetRegistered keep what they were made with.
  virtual Status Register(std::span<std::byte> bytes) = 0;
  virtual void ForgetRegistered() = 0;
  // Forgets one buffer given to Register (one owner's memory, when the owner goes while others
  // stay: a job's shard on a core that serves several). A peer still writing there fails.
  virtual void Unregister(std::span<std::byte> bytes) = 0;

  // Device memory (a GPU's) that the NIC reads and writes itself (GPUDirect RDMA), as
  // Register's memory otherwise: connections send from it and land into it in place, and the
  // transport's CPU never touches it — a message from or into it that would need a copy fails
  // (FailedPrecondition), it is never copied. Unregister forgets it. Unimplemented where the
  // data plane cannot (TCP: the kernel copies every byte through the CPU; an RDMA device or
  // driver without dma-buf support): the caller stages through host memory instead.
  virtual Status RegisterDeviceMemory(const DeviceMemory& memory) {
    return absl::UnimplementedError(absl::StrCat(
        Describe(), " cannot reach device memory: only an RDMA NIC reads and writes it itself "
                    "(GPUDirect RDMA); stage through host memory"));
  }

  // For logs: "tcp", "verbs on rxe0 port 1 (RoCE v2 GID 1)".
  virtual std::string Describe() const = 0;
};

// A transport opened once per process (verbs: the RDMA device), bound to each event loop.
class Device {
 public:
  virtual ~Device() = default;
  // On `loop`'s thread: a Transport whose connections run there (verbs: its own completion
  // queue, so loops share nothing). `queue`: which of the NIC's queues the loop uses, so that
  // loops on one NIC spread over its queues (verbs: the CQ's completion vector, modulo the
  // device's; TCP: the kernel steers by flow, deploy/pbox/tune-nics.sh).
  virtual StatusOr<std::unique_ptr<Transport>> Bind(EventLoop& loop, int queue = 0) = 0;
  virtual std::string Describe() const = 0;
};

}  // namespace phub::transport
