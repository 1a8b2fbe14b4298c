// Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/): a few small, valid
// inputs each, made with the project's own encoders so they stay valid when the formats change.
// Usage: fuzz_seed_writer <corpus dir>   (tests/fuzz/README.md; the files are committed)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "phub/rendezvous/frame.h"
#include "phub/server/checkpoint/checkpoint_file.h"
#include "phub/transport/control_channel.h"
#include "phub/transport/wire_header.h"
#include "tests/fuzz/control_frame_fuzz_input.h"
#include "tests/fuzz/shard_fuzz_input.h"
#include "tests/phub/ctl/metrics_fixture.h"

namespace phub::fuzz {
namespace {

namespace fs = std::filesystem;
using transport::Op;
using transport::WireHeader;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
}

void WireHeaders(const fs::path& dir) {
  const std::vector<std::pair<std::string, WireHeader>> headers = {
      {"push", {Op::kPush, 1, 3, 7, 16}},
      {"weights", {Op::kWeights, 0, 5, 7, 12}},
      {"init", {Op::kInit, 0, 2, 0, 16}},
      {"attach", {Op::kAttach, 1, 0, kSession, 0}},
      {"bye", {Op::kBye, 1, 0, 0, 0}},
      {"error", {Op::kError, 0, 0, 0, 24}},
      {"largest_payload", {Op::kPush, 0, 0, 1, transport::kMaxPayloadBytes}},
  };
  for (const auto& [name, header] : headers) {
    const auto bytes = transport::EncodeWireHeader(header);
    Write(dir, name, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
}

std::string Framed(const proto::ControlMessage& message) {
  return *transport::FrameControlMessage(message);
}

proto::ControlMessage HelloMessage(const proto::Hello& hello) {
  proto::ControlMessage message;
  *message.mutable_hello() = hello;
  return message;
}

void ControlFrames(const fs::path& dir) {
  const std::string whole(1, '\0');  // k = 0: one Feed
  const std::string hello = Framed(HelloMessage(FuzzHello(1)));
  Write(dir, "hello", whole + hello);
  // Feeds of 1, 6 and 201 bytes in turn.
  Write(dir, "hello_split", std::string("\x03\x00\x05\xc8", 4) + hello);

  // A job that asks for its optimizer (summation mode), and one whose optimizer is invalid.
  proto::Hello average = FuzzHello(1);
  average.mutable_optimizer()->set_kind("average");
  Write(dir, "hello_average", whole + Framed(HelloMessage(average)));
  proto::Hello bad_optimizer = FuzzHello(1);
  bad_optimizer.mutable_optimizer()->set_kind("adam");
  bad_optimizer.mutable_optimizer()->set_lr(-1.0f);
  Write(dir, "hello_bad_optimizer", whole + Framed(HelloMessage(bad_optimizer)));

  proto::Hello other = FuzzHello(2);
  other.mutable_tensors(1)->set_elements(33);
  Write(dir, "hello_other_model", whole + Framed(HelloMessage(other)));

  // Over the fuzz job's 1 MiB of model, and past 2^64 bytes.
  proto::Hello large = FuzzHello(1);
  large.mutable_tensors(2)->set_elements(1 << 20);
  Write(dir, "hello_model_over_limit", whole + Framed(HelloMessage(large)));
  proto::Hello huge = FuzzHello(1);
  huge.mutable_tensors(0)->set_elements(std::uint64_t{1} << 62);
  huge.mutable_tensors(1)->set_elements(std::uint64_t{1} << 62);
  Write(dir, "hello_model_overflows", whole + Framed(HelloMessage(huge)));

  proto::Hello crowded = FuzzHello(3);
  crowded.clear_tensors();
  for (int i = 0; i < 17; ++i) crowded.add_tensors();  // one over the fuzz limit of 16
  Write(dir, "hello_too_many_tensors", whole + Framed(HelloMessage(crowded)));

  proto::ControlMessage welcome;
  welcome.mutable_welcome()->set_protocol_version(kProtocolVersion);
  welcome.mutable_welcome()->set_chunk_bytes(1 << 20);
  welcome.mutable_welcome()->add_chunk_owner(0);
  auto* core = welcome.mutable_welcome()->add_cores();
  core->set_host("127.0.0.1");
  core->set_port(7071);
  Write(dir, "welcome", whole + Framed(welcome));

  proto::ControlMessage error;
  error.mutable_error()->set_code(proto::Error::BAD_RANK);
  error.mutable_error()->set_message("rank 9 is out of range");
  error.mutable_error()->set_fix("use ranks 0..3");
  proto::ControlMessage goodbye;
  goodbye.mutable_goodbye()->set_iterations(12);
  Write(dir, "error_then_goodbye", whole + Framed(error) + Framed(goodbye));

  proto::ControlMessage endpoint;
  auto* verbs = endpoint.mutable_verbs_endpoint();
  verbs->set_qpn(17);
  verbs->set_gid(std::string(16, '\x01'));
  auto* zone = verbs->add_zones();
  zone->set_op(1);
  zone->set_bytes(16);
  Write(dir, "verbs_endpoint", whole + Framed(endpoint));

  Write(dir, "empty_frame", whole + std::string(4, '\0'));
}

std::vector<float> Floats(std::uint32_t n, float base) {
  std::vector<float> v(n);
  for (std::uint32_t i = 0; i < n; ++i) v[i] = base + 0.125f * static_cast<float>(i);
  return v;
}

// Both workers attach; rank 0 sends the initial weights (unless phubd loaded them); both push
// every chunk of core 0 for `iterations` iterations, the shard's broadcasts completing between
// them; both say BYE.
std::string TrainingRun(std::uint8_t flags, int iterations) {
  const auto job = MakeShardFuzzJob(flags);
  ShardInputWriter w(flags);
  w.LandingZones(0, 0);  // as verbs asks before the ATTACH arrives
  w.LandingZones(1, 1);
  w.Message(0, Op::kAttach, 0, kCore, 0, {});
  w.Message(1, Op::kAttach, 1, kCore, 0, {});
  const auto& table = job->table;
  if (job->initial_weights.empty()) {
    for (std::uint32_t id : table.chunks_on_core(kCore)) {
      w.Message(0, Op::kInit, 0, id, 0, Floats(table.chunks()[id].elements, 1.0f));
    }
  }
  for (int t = 1; t <= iterations; ++t) {
    w.CompleteSends(0, 8);
    w.CompleteSends(1, 8);
    for (std::uint32_t id : table.chunks_on_core(kCore)) {
      for (std::uint32_t rank = 0; rank < kWorld; ++rank) {
        w.Message(rank, Op::kPush, rank, id, static_cast<std::uint8_t>(t),
                  Floats(table.chunks()[id].elements, 0.5f * (rank + 1)));
      }
    }
  }
  w.CompleteSends(0, 8);
  w.CompleteSends(1, 8);
  w.Message(0, Op::kBye, 0, 0, 0, {});
  w.Message(1, Op::kBye, 1, 0, 0, {});
  return w.bytes();
}

void ShardInputs(const fs::path& dir) {
  Write(dir, "sgd_attach_init_push_bye", TrainingRun(0, 2));
  Write(dir, "adam_three_iterations", TrainingRun(3, 3));
  Write(dir, "momentum_weights_from_file", TrainingRun(4 | 1, 2));
  // The compact wire: bf16 pushes; fp16 pushes with previous weights kept; bf16 both ways.
  Write(dir, "bf16_pushes", TrainingRun(1 | 1 << 3, 2));
  Write(dir, "fp16_pushes_keep_previous", TrainingRun(2 | 2 << 3 | 32, 2));
  Write(dir, "bf16_weights_as_changes", TrainingRun(1 | 3 << 3 | 32, 3));

  // Rank 1 dies mid-iteration, reconnects on a fresh connection and tries to attach again.
  const auto job = MakeShardFuzzJob(0);
  const std::uint32_t first = job->table.chunks_on_core(kCore).front();
  const std::uint32_t elements = job->table.chunks()[first].elements;
  ShardInputWriter w(0);
  w.Message(0, Op::kAttach, 0, kCore, 0, {});
  w.Message(1, Op::kAttach, 1, kCore, 0, {});
  for (std::uint32_t id : job->table.chunks_on_core(kCore)) {
    w.Message(0, Op::kInit, 0, id, 0, Floats(job->table.chunks()[id].elements, 1.0f));
  }
  w.Message(0, Op::kPush, 0, first, 1, Floats(elements, 0.5f));
  w.PeerCloses(1);
  w.Reconnect(1);
  w.Message(1, Op::kAttach, 1, kCore, 0, {});
  w.Message(2, Op::kAttach, 0, kCore, 0, {});  // a second rank 0
  Write(dir, "worker_lost_and_back", w.bytes());

  // An elastic job: both train an iteration; rank 1 is dropped, rank 0 pushes alone; rank 1's
  // slot is given to a joiner that attaches and becomes a member from the frozen iteration + 2.
  const std::uint8_t elastic = 64;
  ShardInputWriter e(elastic);
  e.Message(0, Op::kAttach, 0, kCore, 0, {});
  e.Message(1, Op::kAttach, 1, kCore, 0, {});
  for (std::uint32_t id : job->table.chunks_on_core(kCore)) {
    e.Message(0, Op::kInit, 0, id, 0, Floats(job->table.chunks()[id].elements, 1.0f));
  }
  for (std::uint32_t id : job->table.chunks_on_core(kCore)) {
    for (std::uint32_t rank = 0; rank < kWorld; ++rank) {
      e.Message(rank, Op::kPush, rank, id, 1, Floats(job->table.chunks()[id].elements, 0.5f));
    }
  }
  e.CompleteSends(0, 8);
  e.MembershipStep(3 | 1 << 7);  // drop rank 1
  for (std::uint32_t id : job->table.chunks_on_core(kCore)) {
    e.Message(0, Op::kPush, 0, id, 2, Floats(job->table.chunks()[id].elements, 0.25f));
  }
  e.CompleteSends(0, 8);
  e.MembershipStep(2 | 1 << 7);  // rank 1's slot: a joiner
  e.Reconnect(1);
  e.Message(1, Op::kAttach, 1, kCore, 0, {});
  e.MembershipStep(1 | 4 | 8);  // ranks 0 and 1 from the frozen iteration + 2
  Write(dir, "elastic_drop_and_join", e.bytes());
}

// Small whole checkpoint files (chunks of 2 floats): each optimizer's state arrays, with and
// without previous weights, chunks one iteration apart, an empty tensor, no tensors at all,
// format 1 and (with the batches taken) 2.
server::JobSnapshot Checkpoint(kernels::OptimizerKind kind, std::vector<keys::TensorSpec> tensors,
                               bool previous) {
  server::JobSnapshot s;
  s.tensors = std::move(tensors);
  s.chunk_bytes = 8;
  s.world_size = 2;
  s.optimizer.kind = kind;
  const auto table = keys::KeyTable::Build(s.tensors, s.chunk_bytes, 1);
  for (const keys::Chunk& chunk : table->chunks()) {
    server::ChunkSnapshot c;
    c.chunk = chunk.id;
    c.iteration = 3 + chunk.id % 2;
    c.weights = Floats(chunk.elements, 1.0f + chunk.id);
    if (previous) c.previous = Floats(chunk.elements, -1.0f - chunk.id);
    for (int i = 0; i < kernels::StateArrays(kind); ++i) {
      c.state.push_back(Floats(chunk.elements, 0.25f * (i + 1)));
    }
    s.chunks.push_back(std::move(c));
  }
  return s;
}

void CheckpointFiles(const fs::path& dir) {
  using kernels::OptimizerKind;
  const std::vector<keys::TensorSpec> model = {{"conv.weight", 5}, {"conv.bias", 2}};
  Write(dir, "sgd_previous",
        server::EncodeCheckpoint(Checkpoint(OptimizerKind::kSgd, model, true)));
  Write(dir, "momentum",
        server::EncodeCheckpoint(Checkpoint(OptimizerKind::kMomentum, model, false)));
  server::JobSnapshot elastic = Checkpoint(OptimizerKind::kMomentum, model, false);
  elastic.batches_before = 5;  // format 2: an elastic job's data position
  Write(dir, "momentum_batches_before", server::EncodeCheckpoint(elastic));
  Write(dir, "adam_previous",
        server::EncodeCheckpoint(Checkpoint(OptimizerKind::kAdam, model, true)));
  Write(dir, "nesterov_empty_tensor",
        server::EncodeCheckpoint(
            Checkpoint(OptimizerKind::kNesterov, {{"empty", 0}, {"x", 1}}, false)));
  Write(dir, "no_tensors", server::EncodeCheckpoint(Checkpoint(OptimizerKind::kSgd, {}, false)));
}

// phubd-like /metrics bodies (metrics_fixture.h): one scrape, two scrapes of a busy phubd
// (NUL between them: metrics_text_fuzzer.cc), and the format's corners phubd does not use.
void MetricsTexts(const fs::path& dir) {
  ctl::fixture::PhubdState state;
  state.jobs = {ctl::fixture::FakeJob{
      .name = "train", .running = 1, .world_size = 2, .model_bytes = 4096, .connected = 2}};
  state.cores.resize(2);
  state.cores[0].chunks = 3;
  state.cores[1].chunks = 1;
  const std::string before = ctl::fixture::MetricsBody(state);
  Write(dir, "phubd_two_cores", before);
  for (auto& core : state.cores) {
    core.received += 1 << 20;
    core.sent += 1 << 19;
    core.pushes += 12;
    core.aggregations += 6;
    core.aggregation_counts[5] += 6;
    core.round_counts[3] += 3;
  }
  state.cpu_seconds += 1.25;
  Write(dir, "two_scrapes", before + std::string(1, '\0') + ctl::fixture::MetricsBody(state));
  Write(dir, "format_corners",
        "# HELP x_total Escapes \\\\ and \\n in help.\n"
        "# TYPE x_total counter\n"
        "# just a comment\n"
        "\n"
        "x_total{a=\"q\\\"uote\",b=\"back\\\\slash\",c=\"new\\nline\",} 1.5e3 1700000000000\r\n"
        "  y +Inf\n"
        "y_neg -Inf\n"
        "z NaN -12\n"
        "h_bucket{core=\"0\",le=\"0.5\"} 2\n"
        "h_bucket{core=\"0\",le=\"+Inf\"} 3\n"
        "phub_build_info{version=\"\xc3\xa9\",protocol=\"3\"} 1\n");
}

// The TCP rendezvous (rendezvous_frame_fuzzer): byte 0 = k, k feed sizes, then the stream.
void RendezvousFrames(const fs::path& dir) {
  using rendezvous::Message;
  using rendezvous::MessageType;
  auto frame = [](const Message& m) { return *rendezvous::EncodeFrame(m); };
  const std::string whole(1, '\0');
  Message hello{.type = MessageType::kHello};
  hello.rank = 1;
  hello.world_size = 4;
  hello.job = "slurm-4242";
  Message publish{.type = MessageType::kPublish};
  publish.key = "rank1.addr";
  publish.value = "10.0.0.2 40123\n";
  Message lookup{.type = MessageType::kLookup};
  lookup.key = "rank2.addr";
  lookup.wait_ms = 30000;
  Message remove{.type = MessageType::kRemove};
  remove.key = "nccl.id";
  const std::string client = frame(hello) + frame(publish) + frame(lookup) + frame(remove) +
                             frame(Message{.type = MessageType::kDone});
  Write(dir, "client_session", whole + client);
  // Feeds of 1, 6 and 201 bytes in turn.
  Write(dir, "client_session_split", std::string("\x03\x00\x05\xc8", 4) + client);

  Message value{.type = MessageType::kValue};
  value.value = std::string(128, '\x5a');  // an NCCL id
  Message error{.type = MessageType::kError};
  error.retryable = true;
  error.text = "the rendezvous server holds its limit of 12 connections";
  Write(dir, "server_replies",
        whole + frame(Message{.type = MessageType::kWelcome}) +
            frame(Message{.type = MessageType::kOk}) + frame(value) +
            frame(Message{.type = MessageType::kNotFound}) + frame(error));

  Message largest{.type = MessageType::kPublish};
  largest.key = std::string(rendezvous::kMaxKeyBytes, 'k');
  largest.value = std::string(rendezvous::kMaxValueBytes, 'v');
  Write(dir, "largest_publish", whole + frame(largest));
  Write(dir, "oversized_length", whole + std::string("\xff\xff\xff\x7f\x03", 5));
  Write(dir, "http_request", whole + "GET / HTTP/1.1\r\n\r\n");
  Write(dir, "empty_frame", whole + std::string(4, '\0'));
}

// shm_stream_fuzzer's ops (its header comment): an ATTACH and a PUSH written in pieces, a forged
// position, a death in the middle of a payload, a Finish met by the peer's end.
void ShmStreams(const fs::path& dir) {
  auto header = [](const WireHeader& h) {
    const auto bytes = transport::EncodeWireHeader(h);
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  auto write = [](const std::string& bytes) {  // op 0 takes 4 * N bytes
    std::string out;
    for (std::size_t at = 0; at < bytes.size(); at += 4 * 255) {
      const std::string piece = bytes.substr(at, 4 * 255);
      const std::size_t n = (piece.size() + 3) / 4;
      out += std::string(1, '\0') + std::string(1, static_cast<char>(n)) +
             piece + std::string(4 * n - piece.size(), '\0');
    }
    return out;
  };
  const std::string attach = header({Op::kAttach, 1, 0, kSession, 0});
  const std::string push = header({Op::kPush, 1, 3, 7, 16}) + std::string(16, '\x01');
  Write(dir, "attach_push", write(attach + push));
  Write(dir, "forged_head", write(attach) + std::string(1, '\1') + std::string(8, '\xff'));
  Write(dir, "death_mid_payload", write(attach + push.substr(0, 40)) + std::string(1, '\5'));
  Write(dir, "finish_then_end", write(attach) + std::string(1, '\4') + std::string(1, '\2'));
  Write(dir, "forged_tail", std::string(1, '\4') + std::string(1, '\3') + std::string(8, '\x7f'));
}

}  // namespace
}  // namespace phub::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  phub::fuzz::WireHeaders(root / "wire_header_fuzzer");
  phub::fuzz::ControlFrames(root / "control_frame_fuzzer");
  phub::fuzz::ShardInputs(root / "shard_fuzzer");
  phub::fuzz::CheckpointFiles(root / "checkpoint_fuzzer");
  phub::fuzz::RendezvousFrames(root / "rendezvous_frame_fuzzer");
  phub::fuzz::MetricsTexts(root / "metrics_text_fuzzer");
  phub::fuzz::ShmStreams(root / "shm_stream_fuzzer");
  return 0;
}
