// Reading the checkpoint format (checkpoint_file.h, constants in checkpoint_format.h) without
// trusting a byte: every size is checked against the bytes there and the spec before anything
// is allocated, every section against its checksum. No I/O: bytes come from a source
// (checkpoint_file.cc gives a file, DecodeCheckpoint a buffer), so the fuzzer drives exactly
// the code phubd runs.
#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "phub/common/bounded_text.h"
#include "phub/server/checkpoint/checkpoint_file.h"
#include "phub/server/checkpoint/checkpoint_format.h"

namespace phub::server {
namespace detail {
namespace {

constexpr const char* kCorrupt =
    "the file is corrupt: remove it (LoadNewestCheckpoint then falls back to the previous "
    "checkpoint) or restore it from a copy";
constexpr const char* kTruncated =
    "the file is incomplete (cut short: a full disk, an interrupted copy): remove it "
    "(LoadNewestCheckpoint then falls back to the previous checkpoint) or copy it again";

std::string Hex(std::uint32_t v) { return fmt::format("{:#010x}", v); }

std::string Dec(unsigned __int128 v) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return digits;
}

// Reads the file front to back. Every read is first checked against the real size, every
// allocation against the spec and the bytes actually left.
class Decoder {
 public:
  Decoder(std::uint64_t size, const CheckpointSource& read, const std::string& name)
      : size_(size), read_(read), name_(name) {}

  StatusOr<JobSnapshot> Decode();

 private:
  Status Corrupt(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat("checkpoint '", name_, "': ", what, ": ", kCorrupt));
  }
  // `what` needs bytes [offset_, offset_ + bytes) before `limit` (the file's end, or where the
  // trailer must start).
  Status Need(std::uint64_t bytes, absl::string_view what, std::uint64_t limit) const {
    if (bytes <= limit && offset_ <= limit - bytes) return absl::OkStatus();
    const unsigned __int128 end = static_cast<unsigned __int128>(offset_) + bytes;
    const std::uint64_t trailer = size_ - limit;
    const std::string whole =
        least_ > end + trailer ? absl::StrCat(" (the whole file at least ", Dec(least_), ")") : "";
    return absl::DataLossError(absl::StrCat(
        "checkpoint '", name_, "' is truncated: ", what, " (bytes ", offset_, "..", Dec(end), ")",
        trailer > 0 ? absl::StrCat(" and the ", trailer, "-byte trailer") : "", " expected ",
        Dec(end + trailer), " bytes", whole, ", file has ", size_, ": ", kTruncated));
  }
  Status Read(void* data, std::uint64_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    PHUB_RETURN_IF_ERROR(read_(offset_, data, bytes));
    offset_ += bytes;
    return absl::OkStatus();
  }
  template <typename T>
  T Take(const char*& p) {
    T value;
    std::memcpy(&value, p, sizeof(T));
    p += sizeof(T);
    return value;
  }

  Status ReadHeader(JobSnapshot& s, std::uint32_t& chunks);
  Status CheckSizes(const JobSnapshot& s, std::uint32_t chunks);
  Status ReadChunk(const keys::KeyTable& table, int state_arrays, ChunkSnapshot& c);
  Status ReadTrailer();

  const std::uint64_t size_;
  const CheckpointSource& read_;
  const std::string& name_;
  std::uint64_t offset_ = 0;
  unsigned __int128 least_ = 0;  // the least the whole file can be, once the header is read
};

Status Decoder::ReadHeader(JobSnapshot& s, std::uint32_t& chunks) {
  char prefix[kPrefixBytes];
  const std::uint64_t magic_bytes = std::min<std::uint64_t>(size_, sizeof(kMagic));
  PHUB_RETURN_IF_ERROR(Read(prefix, magic_bytes));
  if (std::memcmp(prefix, kMagic, magic_bytes) != 0) {
    return Corrupt(absl::StrCat("not a PHub checkpoint: it starts with \"",
                                absl::CHexEscape(absl::string_view(prefix, magic_bytes)),
                                "\", not \"PHUBCKPT\" (is it the right file?)"));
  }
  PHUB_RETURN_IF_ERROR(Need(kPrefixBytes - offset_, "the header's first 16 bytes", size_));
  PHUB_RETURN_IF_ERROR(Read(prefix + offset_, kPrefixBytes - offset_));
  const char* p = prefix + sizeof(kMagic);
  const auto version = Take<std::uint32_t>(p);
  const auto body_bytes = Take<std::uint32_t>(p);
  if (version != 1 && version != kFormatVersion) {
    return absl::UnimplementedError(absl::StrCat(
        "checkpoint '", name_, "' is in format version ", version, "; this phubd reads versions 1 "
        "to ", kFormatVersion, ": resume with the phubd that wrote it (or the file is corrupt)"));
  }
  const std::uint64_t fixed = kBodyFixedBytes + (version >= 2 ? kBatchesBeforeBytes : 0);
  if (body_bytes < fixed || body_bytes > kMaxCheckpointHeaderBytes) {
    return Corrupt(absl::StrCat("the header claims ", body_bytes, " bytes; a version ", version,
                                " header has ", fixed, " to ", kMaxCheckpointHeaderBytes));
  }
  PHUB_RETURN_IF_ERROR(Need(
      body_bytes + 4, absl::StrCat("the header (", body_bytes, " bytes) and its checksum"), size_));
  std::string body(body_bytes + 4, '\0');
  PHUB_RETURN_IF_ERROR(Read(body.data(), body.size()));
  std::uint32_t stored;
  std::memcpy(&stored, body.data() + body_bytes, 4);
  const std::uint32_t actual = Crc(Crc(prefix, kPrefixBytes), body.data(), body_bytes);
  if (stored != actual) {
    return Corrupt(absl::StrCat("checksum of the header is ", Hex(stored),
                                " but the header hashes to ", Hex(actual)));
  }

  // The checksum holds, so what follows is what a writer wrote; still, every count is checked
  // against the bytes that are there before it is used.
  p = body.data();
  const char* end = body.data() + body_bytes;
  s.chunk_bytes = Take<std::uint64_t>(p);
  s.world_size = Take<std::uint32_t>(p);
  const auto kind = Take<std::uint32_t>(p);
  for (float* f : {&s.optimizer.lr, &s.optimizer.momentum, &s.optimizer.weight_decay,
                   &s.optimizer.beta1, &s.optimizer.beta2, &s.optimizer.eps}) {
    *f = Take<float>(p);
  }
  if (version >= 2) s.batches_before = Take<std::uint64_t>(p);
  const auto tensors = Take<std::uint32_t>(p);
  if (tensors > static_cast<std::uint64_t>(end - p - 4) / kTensorFixedBytes) {
    return Corrupt(absl::StrCat("the header lists ", tensors, " tensors but has room for ",
                                (end - p - 4) / kTensorFixedBytes));
  }
  s.tensors.resize(tensors);
  for (std::uint32_t t = 0; t < tensors; ++t) {
    if (static_cast<std::uint64_t>(end - p) < kTensorFixedBytes + 4) {
      return Corrupt(absl::StrCat("the header ends inside tensor ", t));
    }
    s.tensors[t].elements = Take<std::uint64_t>(p);
    const auto name_bytes = Take<std::uint32_t>(p);
    if (name_bytes > static_cast<std::uint64_t>(end - p - 4)) {
      return Corrupt(absl::StrCat("the name of tensor ", t, " claims ", name_bytes,
                                  " bytes, past the header's end"));
    }
    s.tensors[t].name.assign(p, name_bytes);
    p += name_bytes;
  }
  if (end - p != 4) {
    return Corrupt(
        absl::StrCat("the header has ", end - p - 4, " bytes left over after its last field"));
  }
  chunks = Take<std::uint32_t>(p);

  if (kind >= std::size(kKindByCode)) {
    return Corrupt(absl::StrCat("optimizer code ", kind, " is not known (0 sgd, 1 momentum, ",
                                "2 nesterov, 3 adam, 4 average)"));
  }
  s.optimizer.kind = kKindByCode[kind];
  // Its hyper-parameters are those of its iteration: with a schedule lr may be 0 there.
  if (Status st = kernels::ValidateStepValues(s.optimizer.kind, kernels::ValuesOf(s.optimizer));
      !st.ok()) {
    return Corrupt(absl::StrCat("its optimizer is invalid: ", st.message()));
  }
  if (s.world_size == 0) return Corrupt("its world size is 0");
  return absl::OkStatus();
}

// The spec's chunk count, checked against the header's, and the least the file can hold for it,
// computed without building the table. A spec of more chunks than the file has room for (a
// claim of 10^12 floats, say) is refused here, before the table is allocated; the records'
// arrays are each checked against the bytes left before they are allocated.
Status Decoder::CheckSizes(const JobSnapshot& s, std::uint32_t chunks) {
  if (Status st = keys::KeyTable::Build({}, s.chunk_bytes, 1).status(); !st.ok()) {
    return Corrupt(absl::StrCat("its chunk size is invalid: ", st.message()));
  }
  const std::uint64_t per_chunk = s.chunk_bytes / sizeof(float);
  unsigned __int128 count = 0, elements = 0;
  for (const auto& t : s.tensors) {
    count += t.elements / per_chunk + (t.elements % per_chunk != 0 ? 1 : 0);
    elements += t.elements;
  }
  if (count != chunks) {
    return Corrupt(
        absl::StrCat("the header says ", chunks, " chunks but its ", s.tensors.size(),
                     " tensors in chunks of ", s.chunk_bytes, " bytes make ", Dec(count),
                     " (KeyTable::Build): the chunk layout disagrees with the tensor table"));
  }
  const int arrays = 1 + kernels::StateArrays(s.optimizer.kind);
  least_ = offset_ + count * RecordBytes(0, 0) + elements * sizeof(float) * arrays + kTrailerBytes;
  // Each record holds at least one float.
  if (offset_ + count * RecordBytes(1, 1) + kTrailerBytes > size_) {
    return absl::DataLossError(
        absl::StrCat("checkpoint '", name_, "' is truncated: its header describes ", chunks,
                     " chunks of ", Dec(elements), " floats in all and ", arrays - 1,
                     " optimizer state array(s) per chunk, expected at least ", Dec(least_),
                     " bytes, file has ", size_, ": ", kTruncated));
  }
  return absl::OkStatus();
}

Status Decoder::ReadChunk(const keys::KeyTable& table, int state_arrays, ChunkSnapshot& c) {
  const std::uint32_t id = c.chunk;
  const std::uint64_t limit = size_ - kTrailerBytes;
  const std::uint64_t at = offset_;
  PHUB_RETURN_IF_ERROR(
      Need(kRecordHeaderBytes, absl::StrCat("the record header of chunk ", id), limit));
  char header[kRecordHeaderBytes];
  PHUB_RETURN_IF_ERROR(Read(header, kRecordHeaderBytes));
  const char* p = header;
  const auto record_id = Take<std::uint32_t>(p);
  const auto elements = Take<std::uint32_t>(p);
  c.iteration = Take<std::uint64_t>(p);
  const auto has_previous = Take<std::uint8_t>(p);
  const auto states = Take<std::uint8_t>(p);
  const auto zero = Take<std::uint16_t>(p);
  const auto stored = Take<std::uint32_t>(p);
  const std::uint32_t actual = Crc(header, kRecordHeaderBytes - 4);
  if (stored != actual) {
    return Corrupt(absl::StrCat("checksum of the record header of chunk ", id, " (byte ", at,
                                ") is ", Hex(stored), " but it hashes to ", Hex(actual)));
  }
  const keys::Chunk& expected = table.chunks()[id];
  if (record_id != id || elements != expected.elements) {
    return Corrupt(absl::StrCat(
        "record ", id, " (byte ", at, ") holds chunk ", record_id, " of ", elements,
        " elements, but KeyTable::Build(tensors, chunk_bytes, 1) makes chunk ", id, " of ",
        expected.elements, " elements (tensor '", Bounded(table.tensors()[expected.tensor].name),
        "' from element ", expected.offset, "): the chunk layout disagrees with the tensor table"));
  }
  if (has_previous > 1 || zero != 0) {
    return Corrupt(absl::StrCat("the record header of chunk ", id, " has flags ", int{has_previous},
                                " and ", zero, " (0 or 1, and 0)"));
  }
  if (has_previous == 1 && c.iteration == 0) {
    return Corrupt(absl::StrCat("chunk ", id, " has previous weights at iteration 0"));
  }
  if (states != state_arrays) {
    return Corrupt(absl::StrCat("chunk ", id, " has ", int{states}, " optimizer state arrays; ",
                                "the header's optimizer keeps ", state_arrays));
  }
  const std::uint64_t arrays = 1 + has_previous + states;
  PHUB_RETURN_IF_ERROR(Need(RecordBytes(elements, arrays) - kRecordHeaderBytes,
                            absl::StrCat("the ", arrays, " arrays of ", elements,
                                         " floats of chunk ", id, " and their checksum"),
                            limit));
  std::uint32_t crc = 0;
  std::vector<std::vector<float>*> targets = {&c.weights};
  if (has_previous) targets.push_back(&c.previous);
  c.state.resize(states);
  for (auto& s : c.state) targets.push_back(&s);
  for (std::vector<float>* array : targets) {
    array->resize(elements);
    PHUB_RETURN_IF_ERROR(Read(array->data(), std::uint64_t{elements} * sizeof(float)));
    crc = Crc(crc, array->data(), array->size() * sizeof(float));
  }
  std::uint32_t stored_data;
  PHUB_RETURN_IF_ERROR(Read(&stored_data, 4));
  if (stored_data != crc) {
    return Corrupt(absl::StrCat("checksum of chunk ", id, " is ", Hex(stored_data),
                                " but the data hash to ", Hex(crc)));
  }
  return absl::OkStatus();
}

Status Decoder::ReadTrailer() {
  if (offset_ + kTrailerBytes != size_) {
    return Corrupt(absl::StrCat(size_ - kTrailerBytes - offset_,
                                " unexpected bytes after the last chunk (from byte ", offset_,
                                "), before the trailer: it was written by something else or "
                                "appended to"));
  }
  char trailer[kTrailerBytes];
  PHUB_RETURN_IF_ERROR(Read(trailer, kTrailerBytes));
  const char* p = trailer + sizeof(kTrailerMagic);
  const auto file_bytes = Take<std::uint64_t>(p);
  const auto stored = Take<std::uint32_t>(p);
  const std::uint32_t actual = Crc(trailer, kTrailerBytes - 4);
  if (stored != actual) {
    return Corrupt(absl::StrCat("checksum of the trailer is ", Hex(stored),
                                " but the trailer hashes to ", Hex(actual)));
  }
  if (std::memcmp(trailer, kTrailerMagic, sizeof(kTrailerMagic)) != 0 || file_bytes != size_) {
    return Corrupt(absl::StrCat("the trailer says the file has ", file_bytes, " bytes (it has ",
                                size_, ") or lacks \"PHUBTAIL\""));
  }
  return absl::OkStatus();
}

StatusOr<JobSnapshot> Decoder::Decode() {
  JobSnapshot s;
  std::uint32_t chunks = 0;
  PHUB_RETURN_IF_ERROR(ReadHeader(s, chunks));
  PHUB_RETURN_IF_ERROR(CheckSizes(s, chunks));
  // Bounded now: the table is at most one entry per 28 bytes of file.
  auto table = keys::KeyTable::Build(s.tensors, s.chunk_bytes, 1);
  if (!table.ok()) return Corrupt(absl::StrCat("its spec is invalid: ", table.status().message()));
  const int state_arrays = kernels::StateArrays(s.optimizer.kind);
  s.chunks.resize(chunks);
  for (std::uint32_t id = 0; id < chunks; ++id) {
    s.chunks[id].chunk = id;
    PHUB_RETURN_IF_ERROR(ReadChunk(*table, state_arrays, s.chunks[id]));
  }
  PHUB_RETURN_IF_ERROR(ReadTrailer());
  if (s.batches_before &&
      *s.batches_before >
          static_cast<unsigned __int128>(CheckpointIteration(s)) * s.world_size) {
    return Corrupt(absl::StrCat("it says the job took ", *s.batches_before, " batches in ",
                                CheckpointIteration(s), " iterations of at most ", s.world_size,
                                " workers"));
  }
  return s;
}

}  // namespace

StatusOr<JobSnapshot> DecodeCheckpointFrom(std::uint64_t size, const CheckpointSource& read,
                                           const std::string& name) {
  return Decoder(size, read, name).Decode();
}

}  // namespace detail

StatusOr<JobSnapshot> DecodeCheckpoint(std::string_view bytes, const std::string& name) {
  const detail::CheckpointSource source = [&](std::uint64_t offset, void* data, std::size_t n) {
    std::memcpy(data, bytes.data() + offset, n);
    return absl::OkStatus();
  };
  return detail::DecodeCheckpointFrom(bytes.size(), source, name);
}

}  // namespace phub::server
