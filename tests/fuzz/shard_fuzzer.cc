// libFuzzer target: one Shard (phub/server/shard/shard.h), core 0 of a 2-core job of 2 workers,
// driven through three in-memory connections (fake_connection.h) by arbitrary sequences of
// messages, send completions, disconnects, reconnects and the verbs set-up's LandingZones
// question. The harness is the transport: it
// keeps exactly the contract of connection.h and tcp_connection.cc:
//  - every 32-byte header is decoded first (DecodeWireHeader); a decode error closes;
//  - every decoded header, zero-length payload included, goes to ResolveSlot; non-OK closes;
//  - an OK slot must be exactly payload_bytes long; the payload is written there (a message with
//    a payload may wait for its bytes while other connections go on), then OnReceived; non-OK
//    closes; nothing reaches a closed connection.
// The job: tensors of 10, 3 and 7 floats cut into chunks of 4 floats (6 chunks, some on core 1),
// no initial weights unless the first byte asks (so rank 0's INITs are needed).
//
// Input format: shard_fuzz_input.h. Headers are built from a few bytes biased towards valid
// values (magic, version, a session that matches, chunks mostly in the table, small iterations,
// the chunk's own size) so the fuzzer gets past the first checks; a few take 32 raw bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/server/shard/job_spec.h"
#include "phub/server/shard/shard.h"
#include "phub/transport/wire_header.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/fake_connection.h"
#include "tests/fuzz/shard_fuzz_input.h"

namespace phub::fuzz {
namespace {

using transport::Op;
using transport::WireHeader;

constexpr int kMaxSteps = 2000;

// Reads the fuzz input front to back; past its end every read is 0.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ == size_; }
  std::uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  // Copies up to out.size() bytes into `out`, zero-filling what the input lacks.
  void Fill(std::span<std::byte> out) {
    const std::size_t n = std::min(out.size(), size_ - at_);
    if (n > 0) std::memcpy(out.data(), data_ + at_, n);
    if (out.size() > n) std::memset(out.data() + n, 0, out.size() - n);
    at_ += n;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

// One data connection as the transport sees it: the connection, and the message whose payload
// is still on its way (ResolveSlot answered, OnReceived not yet called).
struct Link {
  std::shared_ptr<FakeConnection> connection;
  std::optional<WireHeader> awaiting;
  std::span<std::byte> slot;
};

class Harness {
 public:
  explicit Harness(std::uint8_t flags)
      : job_(MakeShardFuzzJob(flags)),
        shard_(job_, kCore, [this](server::ShardEvent e) { ++events_; }) {
    for (std::size_t i = 0; i < kConnections; ++i) Connect(i);
  }

  void Step(Input& in) {
    const std::uint8_t action = in.Byte();
    if (job_->elastic && (action & 8)) return Membership(in.Byte());
    Link& link = links_[((action >> 4) & 3) % kConnections];
    switch (const std::uint8_t what = action & 7) {
      case kCompleteSends:
        link.connection->CompleteSends(1 + (in.Byte() & 7));
        break;
      case kPeerCloses:
        Drop(link, absl::UnavailableError("peer closed the connection"));
        break;
      case kReconnect:
        if (link.connection->closed() && reconnects_ < kMaxReconnects) {
          ++reconnects_;
          Connect(static_cast<std::size_t>(&link - links_));
        }
        break;
      case kLandingZones:
        QueryLandingZones(link, in);
        break;
      default:  // kReceive and the other values below kLandingZones
        if (what < kLandingZones && !link.connection->closed()) Receive(link, in);
        break;
    }
  }

  // Every queued send completes, then the job ends: CloseAll must close every connection.
  void Finish() {
    for (int round = 0; round < 64; ++round) {
      std::size_t completed = 0;
      for (Link& link : links_) completed += link.connection->CompleteSends(SIZE_MAX);
      if (completed == 0) break;
    }
    if (Verbose()) {
      std::fprintf(stderr, "aggregations %llu, bytes in %llu, out %llu, shard events %zu\n",
                   static_cast<unsigned long long>(shard_.stats().aggregations),
                   static_cast<unsigned long long>(shard_.stats().bytes_in),
                   static_cast<unsigned long long>(shard_.stats().bytes_out), events_);
    }
    shard_.CloseAll(absl::OkStatus());
    for (const auto& connection : adopted_) {
      if (!connection->closed()) Fail("CloseAll left a connection open");
    }
  }

 private:
  // A membership step (shard_fuzz_input.h), only in the orders phubd's control plane makes them.
  void Membership(std::uint8_t b) {
    const auto rank = static_cast<std::uint32_t>(b >> 7);
    switch (b % 4) {
      case 0:
        frozen_ = shard_.Freeze();
        break;
      case 1: {
        if (!frozen_) frozen_ = shard_.Freeze();
        std::vector<std::uint32_t> ranks, joiners;
        for (std::uint32_t r = 0; r < kWorld; ++r) {
          if (b & (4u << r)) ranks.push_back(r);
        }
        if (ranks.empty()) ranks.push_back(0);
        for (std::uint32_t r : ranks) {
          if (joining_[r]) joiners.push_back(r);
        }
        // Fewer than the job's minimum: held at the frozen iteration or the next.
        const bool below = (b & 16) != 0;
        const std::uint64_t hold_at = below ? *frozen_ + ((b >> 5) & 1) : UINT64_MAX;
        shard_.ChangeMembership(*frozen_ + 2, ranks, joiners, hold_at);
        for (std::uint32_t r : joiners) joining_[r] = false;
        if (!below) frozen_.reset();
        break;
      }
      case 2:
        shard_.ExpectJoin(rank);
        joining_[rank] = true;
        break;
      case 3:
        shard_.Drop(rank);
        joining_[rank] = false;
        break;
    }
  }

  void Connect(std::size_t i) {
    auto connection = std::make_shared<FakeConnection>(&shard_, absl::StrCat("fuzz-peer-", i));
    links_[i] = Link{connection, std::nullopt, {}};
    adopted_.push_back(connection);
    shard_.Adopt(connection);
    if (!connection->started()) Fail("Adopt did not start the connection");
  }

  void Drop(Link& link, const Status& why) {
    link.awaiting.reset();
    link.slot = {};
    link.connection->Close(why);
  }

  // The next thing the peer's bytes complete on this connection: the payload it owes, or a
  // new header.
  void Receive(Link& link, Input& in) {
    if (link.awaiting) return ReceivePayload(link, in);
    const transport::EncodedHeader bytes = NextHeader(in);
    auto header = transport::DecodeWireHeader(bytes);
    if (!header.ok()) return Drop(link, header.status());
    auto slot = shard_.ResolveSlot(*link.connection, *header);
    if (!slot.ok()) return Drop(link, slot.status());
    if (slot->size() != header->payload_bytes) {
      Fail(absl::StrCat("ResolveSlot gave ", slot->size(), " bytes for a ", OpName(header->op),
                        " of ", header->payload_bytes));
    }
    link.awaiting = *header;
    link.slot = *slot;
    // A message without payload is complete on its header; one with a payload may wait.
    if (header->payload_bytes == 0 || (in.Byte() & 1)) ReceivePayload(link, in);
  }

  void ReceivePayload(Link& link, Input& in) {
    in.Fill(link.slot);
    const WireHeader header = *link.awaiting;
    link.awaiting.reset();
    link.slot = {};
    if (Status s = shard_.OnReceived(*link.connection, header); !s.ok()) Drop(link, s);
  }

  // What verbs asks before any data: the zones the peer whose ATTACH this is may write to.
  // Each must be that rank's slot (or, for rank 0, a chunk's weights to INIT) of a chunk of
  // this core, exactly the chunk's size, inside the buffers the shard registers.
  void QueryLandingZones(Link& link, Input& in) {
    const transport::EncodedHeader bytes = NextHeader(in);
    auto attach = transport::DecodeWireHeader(bytes);
    const std::uint64_t aggregations = shard_.stats().aggregations;
    auto zones = shard_.LandingZones(*link.connection, attach.ok() ? &*attach : nullptr);
    if (shard_.stats().aggregations != aggregations) Fail("LandingZones changed the shard");
    if (Verbose()) {
      std::fprintf(stderr, "landing zones: %s\n",
                   zones.ok() ? absl::StrCat(zones->size(), " zones").c_str()
                              : std::string(zones.status().message()).c_str());
    }
    if (!zones.ok()) return;
    if (!attach.ok()) Fail("LandingZones for a peer that did not say who it is");
    const auto buffers = shard_.Buffers();
    const auto& table = job_->table;
    for (const transport::LandingZone& zone : *zones) {
      if (zone.worker != attach->worker) Fail("a zone for another worker");
      if (zone.op != Op::kPush && !(zone.op == Op::kInit && attach->worker == 0)) {
        Fail(absl::StrCat("a ", OpName(zone.op), " zone for rank ", attach->worker));
      }
      if (zone.chunk >= table.chunks().size() || table.owner(zone.chunk) != kCore) {
        Fail(absl::StrCat("a zone for chunk ", zone.chunk, ", not one of core ", kCore));
      }
      const std::size_t size = zone.op == Op::kPush ? table.chunks()[zone.chunk].elements *
                                                          kernels::WireBytes(job_->wire.format)
                                                    : table.chunks()[zone.chunk].bytes();
      if (zone.bytes.size() != size) Fail("a zone of the wrong size");
      bool inside = false;
      for (const auto& buffer : buffers) {
        inside = inside || (zone.bytes.data() >= buffer.data() &&
                            zone.bytes.data() + zone.bytes.size() <= buffer.data() + buffer.size());
      }
      if (!inside) Fail("a zone outside the shard's registered buffers");
    }
  }

  // A header from a few input bytes, mostly well-formed.
  transport::EncodedHeader NextHeader(Input& in) {
    transport::EncodedHeader bytes{};
    const std::uint8_t mode = in.Byte();
    if (mode < kRawHeaderModes) {  // ~2 %: 32 raw bytes
      in.Fill(bytes);
      return bytes;
    }
    WireHeader h;
    const std::uint8_t op = in.Byte();
    h.op = static_cast<Op>(1 + op % 6);
    const std::uint8_t worker = in.Byte();
    h.worker = worker < 240 ? worker % kWorld : worker;
    const std::uint8_t chunk = in.Byte();
    const std::size_t chunks = job_->table.chunks().size();
    h.chunk = chunk < 240 ? chunk % (chunks + 1) : chunk;  // one past the end now and then
    const std::uint8_t iteration = in.Byte();
    if (h.op == Op::kAttach) {
      h.chunk = chunk < 240 ? kCore : chunk;
      h.iteration = iteration < 240 ? kSession : iteration;
    } else {
      h.iteration = iteration % 8;
    }
    const std::uint8_t size = in.Byte();
    const std::uint32_t chunk_size =
        h.chunk < chunks ? static_cast<std::uint32_t>(job_->table.chunks()[h.chunk].bytes()) : 16;
    // A push in the job's wire format (fp32: the chunk's size; bf16/fp16: half of it).
    const std::uint32_t push_size = static_cast<std::uint32_t>(
        chunk_size / sizeof(float) * kernels::WireBytes(job_->wire.format));
    switch (size % 4) {
      case 0:
        h.payload_bytes = 0;
        break;
      case 1:
        h.payload_bytes = chunk_size;
        break;
      case 2:
        h.payload_bytes = push_size;
        break;
      case 3:
        h.payload_bytes = size / 4;
        break;
    }
    if (h.op == Op::kAttach || h.op == Op::kBye) {
      if (size % 4 != 3) h.payload_bytes = 0;
    }
    bytes = transport::EncodeWireHeader(h);
    const std::uint8_t damage = in.Byte();
    if (damage < kDamageBelow) {
      const std::size_t at = in.Byte() % bytes.size();
      bytes[at] ^= std::byte{static_cast<std::uint8_t>(in.Byte() | 1)};
    }
    return bytes;
  }

  std::shared_ptr<const server::JobSpec> job_;
  server::Shard shard_;
  Link links_[kConnections];
  std::vector<std::shared_ptr<FakeConnection>> adopted_;
  int reconnects_ = 0;
  std::size_t events_ = 0;
  // Elastic jobs: the iteration of the last Freeze not yet followed by a change, and the ranks
  // ExpectJoin admitted that no change has made members yet.
  std::optional<std::uint64_t> frozen_;
  bool joining_[kWorld] = {};
};

}  // namespace
}  // namespace phub::fuzz

// The shard logs every connection it drops; at thousands of runs a second that buries the
// fuzzer's output and halves its speed. PHUB_FUZZ_VERBOSE=1 keeps it.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (!phub::fuzz::Verbose()) spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  phub::fuzz::Input in(data, size);
  phub::fuzz::Harness harness(in.Byte());
  for (int step = 0; step < phub::fuzz::kMaxSteps && !in.empty(); ++step) harness.Step(in);
  harness.Finish();
  return 0;
}
