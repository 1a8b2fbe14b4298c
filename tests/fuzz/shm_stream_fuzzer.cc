// libFuzzer target: the receiving side of an shm connection (phub/transport/shm/) driven by a
// hostile process on the other end. A real set-up over a socketpair (OfferEndpoint, then
// TakeEndpoint as the dialer does; 64 KiB rings), the acceptor's ShmConnection on an
// io_context, and the input as a list of what the peer does to the shared memory:
//
//   op 0: write N bytes of the input into its ring (N from the next byte), publish, ring
//   op 1: forge its write position (next 8 bytes), ring
//   op 2: set its end flag, ring
//   op 3: forge its read position in the ring this side sends on (next 8 bytes), ring
//   op 4: this side sends a message (so op 3 is met), and Finishes on odd counts
//   op 5: die (close its end of the set-up socket)
//
// After each op the loop runs until idle. What must hold: no crash, no read or write outside
// the mapping (ASan), no payload larger than the handler's limit taken, at most one OnClosed,
// and once the peer died the connection is closed.
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "phub/common/unique_fd.h"
#include "phub/transport/shm/shm_connection.h"
#include "phub/transport/shm/shm_ring.h"
#include "phub/transport/shm/shm_setup.h"

namespace {

using namespace phub::transport;  // NOLINT: a fuzz target's whole vocabulary

void Fail(const char* what) {
  std::fprintf(stderr, "shm_stream_fuzzer: %s\n", what);
  std::abort();
}

// Accepts any header with a payload of at most 256 KiB into a fresh buffer; refuses the rest.
class Handler final : public ConnectionHandler {
 public:
  phub::StatusOr<std::span<std::byte>> ResolveSlot(Connection&, const WireHeader& h) override {
    if (h.payload_bytes > (256u << 10)) return absl::InvalidArgumentError("too large");
    slots.emplace_back(h.payload_bytes, std::byte{0xee});
    return std::span<std::byte>(slots.back());
  }
  phub::Status OnReceived(Connection&, const WireHeader&) override {
    ++received;
    return received % 97 == 0 ? absl::AbortedError("handler says stop") : absl::OkStatus();
  }
  void OnClosed(Connection&, const phub::Status&) override {
    if (++closed > 1) Fail("OnClosed twice");
  }
  std::vector<std::vector<std::byte>> slots;
  int received = 0;
  int closed = 0;
};

std::uint64_t Take64(const std::uint8_t*& data, std::size_t& size) {
  std::uint64_t v = 0;
  const std::size_t n = std::min<std::size_t>(8, size);
  std::memcpy(&v, data, n);
  data += n;
  size -= n;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 0;
  phub::UniqueFd acceptor_socket(pair[0]);
  phub::UniqueFd peer_socket(pair[1]);
  auto offered = shm::OfferEndpoint(acceptor_socket.get(), shm::kMinRingBytes);
  if (!offered.ok()) Fail("OfferEndpoint failed");
  auto peer = shm::TakeEndpoint(peer_socket.get(),
                                std::chrono::steady_clock::now() + std::chrono::seconds(5), "fuzz");
  if (!peer.ok()) Fail("TakeEndpoint refused a real OfferEndpoint");

  boost::asio::io_context context;
  Handler handler;
  auto connection = shm::ShmConnection::Create(context, shm::Side::kAcceptor, *std::move(offered),
                                               std::move(acceptor_socket), &handler, "local:fuzz");
  connection->Start();
  context.poll();

  shm::RingMemory ring = shm::RingIn(peer->mapping(), peer->ring_bytes(), 1);    // peer -> us
  shm::RingMemory back = shm::RingIn(peer->mapping(), peer->ring_bytes(), 0);    // us -> peer
  shm::RingWriter writer(ring);
  const std::vector<std::byte> payload(1000, std::byte{1});
  bool died = false;
  int sends = 0;
  auto ring_bell = [&] {
    const std::uint64_t one = 1;
    if (::write(peer->peer_bell().get(), &one, sizeof(one)) < 0) {}
  };
  while (size > 0 && !died) {
    const std::uint8_t op = *data++ % 6;
    --size;
    switch (op) {
      case 0: {
        std::size_t n = size > 0 ? std::min<std::size_t>(size - 1, std::size_t{data[0]} * 4) : 0;
        if (size > 0) ++data, --size;
        auto free = writer.Free();
        if (!free.ok()) break;
        n = writer.Write(std::span(reinterpret_cast<const std::byte*>(data), n), *free);
        data += n;
        size -= n;
        writer.Publish();
        ring_bell();
        break;
      }
      case 1: *ring.head = Take64(data, size); ring_bell(); break;
      case 2: *ring.ended = 1; ring_bell(); break;
      case 3: *back.tail = Take64(data, size); ring_bell(); break;
      case 4:
        connection->Send(WireHeader{Op::kWeights, 0, 0, 1, 1000}, payload, nullptr);
        if (++sends % 2 == 1) connection->Finish(std::chrono::milliseconds(1), nullptr);
        break;
      case 5: peer_socket.reset(); died = true; break;
    }
    context.restart();
    context.poll();
  }
  if (died) {
    // The liveness watch may need a turn more than the poll above gave it.
    for (int i = 0; i < 4 && !connection->closed(); ++i) {
      context.restart();
      context.poll();
    }
    if (!connection->closed()) Fail("the peer died and the connection is still open");
  }
  connection->Close(absl::OkStatus());
  connection.reset();
  context.restart();
  context.poll();  // the cancelled waits end, and with them the connection
  return 0;
}
