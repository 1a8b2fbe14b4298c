#include "phub/rendezvous/frame.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::rendezvous {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the rendezvous frames are little-endian and copied as such");
static_assert(kMaxFrameBytes <= 0xFFFF + 16, "strings carry 16-bit lengths");

bool IsNameByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

Status CheckName(absl::string_view what, absl::string_view name, std::size_t max_bytes,
                 bool may_be_empty) {
  if (name.empty()) {
    if (may_be_empty) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " is empty"));
  }
  if (name.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " '", Printable(name, 32), "' is ",
                                                   name.size(), " bytes, more than the limit of ",
                                                   max_bytes));
  }
  if (name.front() == '.' || !std::all_of(name.begin(), name.end(), IsNameByte)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " '", Printable(name, 32),
                     "' may hold only A-Z a-z 0-9 . _ - and must not start with '.'"));
  }
  return absl::OkStatus();
}

// Appends little-endian integers and 16-bit-length strings.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  template <typename T>
  void Int(T v) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    out_.append(bytes, sizeof(T));
  }
  void Str(absl::string_view s) {
    Int(static_cast<std::uint16_t>(s.size()));
    out_.append(s.data(), s.size());
  }

 private:
  std::string& out_;
};

// Reads what Writer writes, never past the end of the body.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> body) : body_(body) {}
  template <typename T>
  bool Int(T& v) {
    if (body_.size() < sizeof(T)) return false;
    std::memcpy(&v, body_.data(), sizeof(T));
    body_ = body_.subspan(sizeof(T));
    return true;
  }
  // A string of at most max_bytes; false when its length is over that or past the body.
  bool Str(std::string& s, std::size_t max_bytes) {
    std::uint16_t length = 0;
    if (!Int(length) || length > max_bytes || length > body_.size()) return false;
    s.assign(reinterpret_cast<const char*>(body_.data()), length);
    body_ = body_.subspan(length);
    return true;
  }
  bool at_end() const { return body_.empty(); }

 private:
  std::span<const std::byte> body_;
};

Status Refused(MessageType type, std::size_t body_bytes, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "rendezvous frame (", MessageTypeName(type), ", ", body_bytes, " bytes) ", why,
      ": the peer is not speaking PHub's rendezvous protocol, or runs a different release"));
}

}  // namespace

absl::string_view MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kHello:
      return "Hello";
    case MessageType::kWelcome:
      return "Welcome";
    case MessageType::kPublish:
      return "Publish";
    case MessageType::kLookup:
      return "Lookup";
    case MessageType::kValue:
      return "Value";
    case MessageType::kNotFound:
      return "NotFound";
    case MessageType::kRemove:
      return "Remove";
    case MessageType::kDone:
      return "Done";
    case MessageType::kOk:
      return "Ok";
    case MessageType::kError:
      return "Error";
  }
  return "unknown type";
}

Status CheckKey(absl::string_view key) { return CheckName("key", key, kMaxKeyBytes, false); }

Status CheckJob(absl::string_view job) { return CheckName("job id", job, kMaxJobBytes, true); }

std::string Printable(absl::string_view text, std::size_t max_bytes) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > max_bytes) absl::StrAppend(&out, "... (", text.size(), " bytes)");
  return out;
}

StatusOr<std::string> EncodeFrame(const Message& m) {
  std::string frame(kFramePrefixBytes, '\0');
  Writer w(frame);
  w.Int(static_cast<std::uint8_t>(m.type));
  switch (m.type) {
    case MessageType::kHello:
      PHUB_RETURN_IF_ERROR(CheckJob(m.job));
      w.Int(kHelloMagic);
      w.Int(m.version);
      w.Int(m.rank);
      w.Int(m.world_size);
      w.Str(m.job);
      break;
    case MessageType::kPublish:
      PHUB_RETURN_IF_ERROR(CheckKey(m.key));
      if (m.value.size() > kMaxValueBytes) {
        return absl::InvalidArgumentError(absl::StrCat("the value of '", m.key, "' is ",
                                                       m.value.size(), " bytes, more than the ",
                                                       kMaxValueBytes, " a rendezvous holds"));
      }
      w.Str(m.key);
      w.Str(m.value);
      break;
    case MessageType::kLookup:
      PHUB_RETURN_IF_ERROR(CheckKey(m.key));
      w.Str(m.key);
      w.Int(m.wait_ms);
      break;
    case MessageType::kRemove:
      PHUB_RETURN_IF_ERROR(CheckKey(m.key));
      w.Str(m.key);
      break;
    case MessageType::kValue:
      if (m.value.size() > kMaxValueBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("a value of ", m.value.size(), " bytes is over ", kMaxValueBytes));
      }
      w.Str(m.value);
      break;
    case MessageType::kError:
      w.Int(static_cast<std::uint8_t>(m.retryable ? 1 : 0));
      w.Str(absl::string_view(m.text).substr(0, kMaxTextBytes));
      break;
    case MessageType::kWelcome:
    case MessageType::kNotFound:
    case MessageType::kDone:
    case MessageType::kOk:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("message type ", static_cast<int>(m.type), " is not a rendezvous message"));
  }
  const auto length = static_cast<std::uint32_t>(frame.size() - kFramePrefixBytes);
  std::memcpy(frame.data(), &length, kFramePrefixBytes);
  return frame;
}

StatusOr<Message> DecodeBody(std::span<const std::byte> body) {
  if (body.empty()) {
    return absl::InvalidArgumentError(
        "empty rendezvous frame: the peer is not speaking PHub's rendezvous protocol");
  }
  Message m;
  m.type = static_cast<MessageType>(body[0]);
  Reader r(body.subspan(1));
  const auto refused = [&](absl::string_view why) { return Refused(m.type, body.size(), why); };
  switch (m.type) {
    case MessageType::kHello: {
      std::uint32_t magic = 0;
      if (!r.Int(magic) || magic != kHelloMagic) return refused("has the wrong magic number");
      if (!r.Int(m.version) || m.version != kProtocolVersion) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rendezvous Hello of protocol version ", m.version, ", this release speaks ",
            kProtocolVersion, ": run the same PHub release on every rank"));
      }
      if (!r.Int(m.rank) || !r.Int(m.world_size) || !r.Str(m.job, kMaxJobBytes)) {
        return refused("is cut short or has a job id over the limit");
      }
      if (Status s = CheckJob(m.job); !s.ok()) return refused(s.message());
      break;
    }
    case MessageType::kPublish:
      if (!r.Str(m.key, kMaxKeyBytes) || !r.Str(m.value, kMaxValueBytes)) {
        return refused("is cut short or has a key or value over the limit");
      }
      if (Status s = CheckKey(m.key); !s.ok()) return refused(s.message());
      break;
    case MessageType::kLookup:
      if (!r.Str(m.key, kMaxKeyBytes) || !r.Int(m.wait_ms)) {
        return refused("is cut short or has a key over the limit");
      }
      if (Status s = CheckKey(m.key); !s.ok()) return refused(s.message());
      break;
    case MessageType::kRemove:
      if (!r.Str(m.key, kMaxKeyBytes)) return refused("is cut short or has a key over the limit");
      if (Status s = CheckKey(m.key); !s.ok()) return refused(s.message());
      break;
    case MessageType::kValue:
      if (!r.Str(m.value, kMaxValueBytes)) return refused("is cut short or over the value limit");
      break;
    case MessageType::kError: {
      std::uint8_t retryable = 0;
      if (!r.Int(retryable) || retryable > 1 || !r.Str(m.text, kMaxTextBytes)) {
        return refused("is cut short, has a retryable flag other than 0 or 1, or too long a text");
      }
      m.retryable = retryable == 1;
      break;
    }
    case MessageType::kWelcome:
    case MessageType::kNotFound:
    case MessageType::kDone:
    case MessageType::kOk:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "rendezvous frame of unknown type ", static_cast<int>(body[0]),
          ": the peer is not speaking PHub's rendezvous protocol, or runs a different release"));
  }
  if (!r.at_end()) return refused("has bytes after its last field");
  return m;
}

Status FrameDecoder::Feed(std::span<const std::byte> bytes) {
  if (!status_.ok()) return status_;
  while (!bytes.empty()) {
    if (partial_.size() < kFramePrefixBytes) {
      const std::size_t n = std::min(kFramePrefixBytes - partial_.size(), bytes.size());
      partial_.append(reinterpret_cast<const char*>(bytes.data()), n);
      bytes = bytes.subspan(n);
      if (partial_.size() < kFramePrefixBytes) break;
    }
    std::uint32_t length = 0;
    std::memcpy(&length, partial_.data(), kFramePrefixBytes);
    if (length > kMaxFrameBytes) {
      return status_ = absl::InvalidArgumentError(absl::StrCat(
                 "rendezvous frame of ", length, " bytes is over the limit of ", kMaxFrameBytes,
                 ": the peer is not speaking PHub's rendezvous protocol (is something else "
                 "listening on, or connecting to, this port?)"));
    }
    const std::size_t body_have = partial_.size() - kFramePrefixBytes;
    const std::size_t n = std::min<std::size_t>(length - body_have, bytes.size());
    partial_.append(reinterpret_cast<const char*>(bytes.data()), n);
    bytes = bytes.subspan(n);
    if (partial_.size() - kFramePrefixBytes < length) break;
    auto message = DecodeBody(std::as_bytes(std::span(partial_).subspan(kFramePrefixBytes)));
    partial_.clear();
    if (!message.ok()) return status_ = message.status();
    ready_.push_back(*std::move(message));
  }
  return absl::OkStatus();
}

std::optional<Message> FrameDecoder::Pop() {
  if (ready_.empty()) return std::nullopt;
  Message m = std::move(ready_.front());
  ready_.pop_front();
  return m;
}

}  // namespace phub::rendezvous
