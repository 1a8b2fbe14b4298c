// Writing the checkpoint format (checkpoint_file.h, constants in checkpoint_format.h), and the
// checks a snapshot must pass before it is written. No I/O: bytes go to a sink.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "phub/server/checkpoint/checkpoint_file.h"
#include "phub/server/checkpoint/checkpoint_format.h"

namespace phub::server {
namespace detail {
namespace {

// Arrays at least this long go to the sink as they are, shorter ones through the buffer.
constexpr std::size_t kDirectBytes = 64 << 10;
constexpr std::size_t kFlushBytes = 1 << 20;

// Buffers the small fields and passes long arrays straight on, so a file is written in a few
// large writes whatever its shape.
class Encoder {
 public:
  explicit Encoder(const CheckpointSink& sink) : sink_(sink) {}

  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    buffer_.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  void PutBytes(std::string_view bytes) { buffer_.append(bytes); }
  // The crc32 of what was put since buffer offset `mark` (still in the buffer: no Flush since).
  std::uint32_t CrcSince(std::size_t mark) const {
    return Crc(buffer_.data() + mark, buffer_.size() - mark);
  }
  std::size_t mark() const { return buffer_.size(); }

  Status PutFloats(const std::vector<float>& values, std::uint32_t& crc) {
    const std::size_t bytes = values.size() * sizeof(float);
    crc = Crc(crc, values.data(), bytes);
    if (bytes < kDirectBytes) {
      buffer_.append(reinterpret_cast<const char*>(values.data()), bytes);
      return absl::OkStatus();
    }
    PHUB_RETURN_IF_ERROR(Flush());
    return sink_(values.data(), bytes);
  }
  Status FlushIfLarge() { return buffer_.size() >= kFlushBytes ? Flush() : absl::OkStatus(); }
  Status Flush() {
    if (buffer_.empty()) return absl::OkStatus();
    Status status = sink_(buffer_.data(), buffer_.size());
    buffer_.clear();
    return status;
  }

 private:
  const CheckpointSink& sink_;
  std::string buffer_;
};

}  // namespace

Status EncodeCheckpointTo(const JobSnapshot& s, const CheckpointSink& sink) {
  Encoder e(sink);
  e.PutBytes({kMagic, sizeof(kMagic)});
  e.Put(VersionOf(s));
  e.Put(static_cast<std::uint32_t>(HeaderBodyBytes(s)));
  e.Put(s.chunk_bytes);
  e.Put(s.world_size);
  e.Put(KindCode(s.optimizer.kind));
  for (float f : {s.optimizer.lr, s.optimizer.momentum, s.optimizer.weight_decay, s.optimizer.beta1,
                  s.optimizer.beta2, s.optimizer.eps}) {
    e.Put(f);
  }
  if (s.batches_before) e.Put(*s.batches_before);
  e.Put(static_cast<std::uint32_t>(s.tensors.size()));
  for (const auto& t : s.tensors) {
    e.Put(t.elements);
    e.Put(static_cast<std::uint32_t>(t.name.size()));
    e.PutBytes(t.name);
  }
  e.Put(static_cast<std::uint32_t>(s.chunks.size()));
  e.Put(e.CrcSince(0));

  for (const ChunkSnapshot& c : s.chunks) {
    const std::size_t mark = e.mark();
    e.Put(c.chunk);
    e.Put(static_cast<std::uint32_t>(c.weights.size()));
    e.Put(c.iteration);
    e.Put(static_cast<std::uint8_t>(c.previous.empty() ? 0 : 1));
    e.Put(static_cast<std::uint8_t>(c.state.size()));
    e.Put(std::uint16_t{0});
    e.Put(e.CrcSince(mark));
    std::uint32_t crc = 0;
    PHUB_RETURN_IF_ERROR(e.PutFloats(c.weights, crc));
    if (!c.previous.empty()) PHUB_RETURN_IF_ERROR(e.PutFloats(c.previous, crc));
    for (const auto& array : c.state) PHUB_RETURN_IF_ERROR(e.PutFloats(array, crc));
    e.Put(crc);
    PHUB_RETURN_IF_ERROR(e.FlushIfLarge());
  }

  const std::size_t mark = e.mark();
  e.PutBytes({kTrailerMagic, sizeof(kTrailerMagic)});
  e.Put(CheckpointBytes(s));
  e.Put(e.CrcSince(mark));
  return e.Flush();
}

}  // namespace detail

// ---- The public pieces that need no I/O ----

std::uint64_t CheckpointIteration(const JobSnapshot& s) {
  if (s.chunks.empty()) return 0;
  std::uint64_t least = std::numeric_limits<std::uint64_t>::max();
  for (const auto& c : s.chunks) least = std::min(least, c.iteration);
  return least;
}

std::string CheckpointFileName(std::uint64_t iteration) {
  return fmt::format("checkpoint-{:012}.phub", iteration);
}

std::uint64_t CheckpointBytes(const JobSnapshot& s) {
  std::uint64_t bytes =
      detail::kPrefixBytes + detail::HeaderBodyBytes(s) + 4 + detail::kTrailerBytes;
  for (const auto& c : s.chunks) {
    bytes +=
        detail::RecordBytes(c.weights.size(), 1 + (c.previous.empty() ? 0 : 1) + c.state.size());
  }
  return bytes;
}

Status ValidateSnapshot(const JobSnapshot& s) {
  auto refuse = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint snapshot: ", what));
  };
  if (Status st = kernels::ValidateStepValues(s.optimizer.kind, kernels::ValuesOf(s.optimizer));
      !st.ok()) {
    return refuse(absl::StrCat("its optimizer is invalid: ", st.message()));
  }
  if (s.world_size == 0) return refuse("its world size is 0; a job has at least one worker");
  auto table = keys::KeyTable::Build(s.tensors, s.chunk_bytes, 1);
  if (!table.ok()) return refuse(absl::StrCat("its spec is invalid: ", table.status().message()));
  if (detail::HeaderBodyBytes(s) > kMaxCheckpointHeaderBytes) {
    return refuse(absl::StrCat("its tensor table takes ", detail::HeaderBodyBytes(s),
                               " bytes; a checkpoint header holds at most ",
                               kMaxCheckpointHeaderBytes, ": shorten the tensor names"));
  }
  if (s.chunks.size() != table->chunks().size()) {
    return refuse(absl::StrCat("it has ", s.chunks.size(), " chunks; the spec makes ",
                               table->chunks().size(), ": snapshot every chunk"));
  }
  const std::size_t states = kernels::StateArrays(s.optimizer.kind);
  for (std::size_t i = 0; i < s.chunks.size(); ++i) {
    const ChunkSnapshot& c = s.chunks[i];
    const std::uint64_t n = table->chunks()[i].elements;
    if (c.chunk != i) {
      return refuse(
          absl::StrCat("entry ", i, " is chunk ", c.chunk, ": chunks must be in id order"));
    }
    if (c.weights.size() != n || (!c.previous.empty() && c.previous.size() != n)) {
      return refuse(absl::StrCat("chunk ", i, " has ", c.weights.size(), " weights and ",
                                 c.previous.size(), " previous weights; the spec makes it ", n,
                                 " elements (previous: that or none)"));
    }
    if (!c.previous.empty() && c.iteration == 0) {
      return refuse(absl::StrCat("chunk ", i, " has previous weights at iteration 0"));
    }
    if (c.state.size() != states) {
      return refuse(absl::StrCat("chunk ", i, " has ", c.state.size(), " state arrays; ",
                                 kernels::OptimizerName(s.optimizer.kind), " keeps ", states));
    }
    for (const auto& array : c.state) {
      if (array.size() != n) {
        return refuse(absl::StrCat("a state array of chunk ", i, " has ", array.size(),
                                   " elements, not ", n));
      }
    }
  }
  // Each iteration has at most world_size members, each taking one batch.
  const unsigned __int128 most =
      static_cast<unsigned __int128>(CheckpointIteration(s)) * s.world_size;
  if (s.batches_before && *s.batches_before > most) {
    return refuse(absl::StrCat("it says the job took ", *s.batches_before, " batches in ",
                               CheckpointIteration(s), " iterations of at most ", s.world_size,
                               " workers"));
  }
  return absl::OkStatus();
}

std::string EncodeCheckpoint(const JobSnapshot& snapshot) {
  std::string bytes;
  bytes.reserve(CheckpointBytes(snapshot));
  const detail::CheckpointSink sink = [&](const void* data, std::size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return absl::OkStatus();
  };
  Status status = detail::EncodeCheckpointTo(snapshot, sink);
  (void)status;  // appending to a string cannot fail
  return bytes;
}

}  // namespace phub::server
