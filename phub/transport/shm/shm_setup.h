// Setting an shm connection up: the two processes meet on an abstract Unix socket named after
// the listener's port ("@phub-shm-<port>"), and the acceptor hands the dialer, in one message,
// the hello (below) and three descriptors: the shared memory (a memfd, sealed so that neither
// side can shrink it: a shrunk mapping would fault the other with SIGBUS) and the two bells
// (eventfds: the dialer's, then the acceptor's). The socket then stays open, silent, for the
// life of the connection: its end is how each side learns the other is gone (a crash too).
//
// The acceptor sizes and creates everything; the dialer maps only what it checked: the ring
// size within [kMinRingBytes, kMaxRingBytes] and a power of two, the memfd's seals and size,
// and that each bell is an eventfd. Abstract socket names live in a network namespace, as a
// host's addresses do: a peer in another namespace (an emulated rack's host) cannot meet here.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "phub/common/status.h"
#include "phub/common/unique_fd.h"

namespace phub::transport::shm {

// Bytes per ring (each direction has one). Large enough that a sender copies a few 512 KiB
// chunks ahead of its receiver; small enough that phubd's memory for a connection stays 8 MiB.
inline constexpr std::size_t kDefaultRingBytes = std::size_t{4} << 20;
inline constexpr std::size_t kMinRingBytes = std::size_t{64} << 10;
inline constexpr std::size_t kMaxRingBytes = std::size_t{64} << 20;

// The hello: magic "PHSM" u32, version u16, reserved u16 (0), ring_bytes u64; little-endian.
inline constexpr std::size_t kHelloBytes = 16;
inline constexpr std::uint32_t kShmMagic = 0x4d534850;
inline constexpr std::uint16_t kShmVersion = 1;

// The socket's name for a listener on `port`: with the leading NUL of an abstract name, and as
// logs show it ("@phub-shm-7000").
std::string AbstractName(std::uint16_t port);
std::string ShownName(std::uint16_t port);

// The ring size the hello carries, checked (InvalidArgument naming the field).
StatusOr<std::size_t> DecodeHello(std::span<const std::byte> bytes);

// One side's share of a connection: the mapping, and the two bells.
class Endpoint {
 public:
  Endpoint(std::span<std::byte> mapping, std::size_t ring_bytes, UniqueFd my_bell,
           UniqueFd peer_bell)
      : mapping_(mapping), ring_bytes_(ring_bytes), my_bell_(std::move(my_bell)),
        peer_bell_(std::move(peer_bell)) {}
  Endpoint(Endpoint&& other) noexcept;
  Endpoint& operator=(Endpoint&&) = delete;
  ~Endpoint();  // unmaps

  std::span<std::byte> mapping() const { return mapping_; }
  std::size_t ring_bytes() const { return ring_bytes_; }
  UniqueFd& my_bell() { return my_bell_; }
  UniqueFd& peer_bell() { return peer_bell_; }

 private:
  std::span<std::byte> mapping_;
  std::size_t ring_bytes_;
  UniqueFd my_bell_;
  UniqueFd peer_bell_;
};

// The acceptor: creates the memory and the bells, and sends them with the hello over the
// accepted socket (non-blocking: a fresh socket's buffer takes 16 bytes at once).
StatusOr<Endpoint> OfferEndpoint(int socket_fd, std::size_t ring_bytes);

// The dialer: receives the hello and the descriptors by `deadline`, checks them, maps.
StatusOr<Endpoint> TakeEndpoint(int socket_fd, std::chrono::steady_clock::time_point deadline,
                                const std::string& listener);

// Connects to the listener on `port`, retrying while nobody listens yet, until `deadline`.
StatusOr<UniqueFd> ConnectUntil(std::uint16_t port, std::chrono::steady_clock::time_point deadline);

// OK if `host` names this host (a loopback or one of its interfaces' addresses): an shm
// connection reaches only a phubd there. FailedPrecondition otherwise, saying what to use.
Status CheckHostIsThisOne(const std::string& host);

// The peer's process id from the socket (SO_PEERCRED), -1 if unknown: for logs.
int PeerPid(int socket_fd);

}  // namespace phub::transport::shm
