#include "tests/fuzz/shard_fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace phub::fuzz {

std::shared_ptr<const server::JobSpec> MakeShardFuzzJob(std::uint8_t flags) {
  auto table = keys::KeyTable::Build({{"a", 10}, {"b", 3}, {"c", 7}}, kChunkBytes, kCores);
  if (!table.ok()) {
    std::fprintf(stderr, "shard fuzz job: %s\n", std::string(table.status().message()).c_str());
    std::abort();
  }
  auto job = std::make_shared<server::JobSpec>(server::JobSpec{.table = std::move(*table)});
  job->world_size = kWorld;
  job->session = kSession;
  job->optimizer.kind = static_cast<kernels::OptimizerKind>(flags & 3);
  // Bits 3-4: the wire (fp32, bf16 pushes, fp16 pushes, bf16 both ways: changes of a view).
  switch ((flags >> 3) & 3) {
    case 1:
      job->wire.format = kernels::WireFormat::kBf16;
      break;
    case 2:
      job->wire.format = kernels::WireFormat::kFp16;
      break;
    case 3:
      job->wire.format = kernels::WireFormat::kBf16;
      job->wire.weights = true;
      break;
  }
  job->keep_previous = (flags & 32) != 0;
  // Bit 6: an elastic job of both ranks (its membership changed by the steps, as phubd would).
  if (flags & 64) {
    job->elastic = true;
    job->initial_members = {0, 1};
  }
  if (flags & 4) {
    job->initial_weights.resize(job->table.total_elements());
    for (std::size_t i = 0; i < job->initial_weights.size(); ++i) {
      job->initial_weights[i] = 0.25f * static_cast<float>(i);
    }
  }
  return job;
}

void ShardInputWriter::Header(transport::Op op, std::uint32_t worker, std::uint32_t chunk,
                              std::uint8_t iteration, std::uint8_t size) {
  Put(0xff);                                          // mode: structured header
  Put(static_cast<std::uint8_t>(op) - 1);             // op = 1 + byte % 6
  Put(static_cast<std::uint8_t>(worker));             // < 240: worker % world
  Put(static_cast<std::uint8_t>(chunk));              // < 240: chunk % (chunks + 1); ATTACH: core
  Put(op == transport::Op::kAttach ? 0 : iteration);  // ATTACH: < 240 is the session
  Put(size);                                          // see NextHeader
  Put(0xff);                                          // no damage
}

void ShardInputWriter::Message(std::size_t connection, transport::Op op, std::uint32_t worker,
                               std::uint32_t chunk, std::uint8_t iteration,
                               std::span<const float> payload) {
  Action(connection, kReceive);
  const bool compact = op == transport::Op::kPush && wire_ != kernels::WireFormat::kFp32;
  Header(op, worker, chunk, iteration, payload.empty() ? 0 : compact ? 2 : 1);
  if (payload.empty()) return;
  Put(1);  // the payload comes now
  if (compact) {
    std::string wire(payload.size() * kernels::WireBytes(wire_), '\0');
    kernels::ConvertToWire(wire_, payload, reinterpret_cast<std::byte*>(wire.data()));
    bytes_ += wire;
    return;
  }
  const auto* p = reinterpret_cast<const char*>(payload.data());
  bytes_.append(p, payload.size_bytes());
}

void ShardInputWriter::LandingZones(std::size_t connection, std::uint32_t worker) {
  Action(connection, kLandingZones);
  Header(transport::Op::kAttach, worker, kCore, 0, 0);
}

void ShardInputWriter::CompleteSends(std::size_t connection, std::uint8_t n) {
  Action(connection, kCompleteSends);
  Put(static_cast<std::uint8_t>(n - 1));
}

void ShardInputWriter::PeerCloses(std::size_t connection) { Action(connection, kPeerCloses); }

void ShardInputWriter::Reconnect(std::size_t connection) { Action(connection, kReconnect); }

}  // namespace phub::fuzz
