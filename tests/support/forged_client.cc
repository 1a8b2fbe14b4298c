#include "tests/support/forged_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "phub/common/token_proof.h"
#include "phub/common/version.h"

namespace phub::testing {

namespace {

using Clock = std::chrono::steady_clock;

// Larger than any frame phubd sends; a longer claim from phubd is treated as garbage.
constexpr std::uint32_t kMaxFrameFromPhubd = 64u << 20;

int MillisLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

}  // namespace

RawSocket RawSocket::Connect(std::uint16_t port, Millis timeout, const std::string& source) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return RawSocket();
    if (!source.empty()) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      if (inet_pton(AF_INET, source.c_str(), &from.sin_addr) != 1 ||
          bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
        close(fd);
        return RawSocket();
      }
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      return RawSocket(fd, /*worker=*/true);
    }
    const int error = errno;
    close(fd);
    // Refused: the listener may not be up yet (or its backlog is full); retry until the deadline.
    if ((error != ECONNREFUSED && error != EAGAIN && error != EINTR) || Clock::now() >= deadline) {
      return RawSocket();
    }
    std::this_thread::sleep_for(Millis(20));
  }
}

RawSocket::RawSocket(RawSocket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      worker_(other.worker_),
      nonce_(std::move(other.nonce_)),
      held_(std::move(other.held_)) {}

RawListener RawListener::Listen() {
  RawListener listener;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return listener;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 8) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return listener;
  }
  listener.fd_ = fd;
  listener.port_ = ntohs(address.sin_port);
  return listener;
}

RawListener::RawListener(RawListener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(other.port_) {}

RawListener& RawListener::operator=(RawListener&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    port_ = other.port_;
  }
  return *this;
}

RawSocket RawListener::Accept(Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  while (fd_ >= 0) {
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return RawSocket(fd);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) break;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, MillisLeft(deadline)) == 0) break;
  }
  return RawSocket();
}

void RawListener::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

RawSocket& RawSocket::operator=(RawSocket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    worker_ = other.worker_;
    nonce_ = std::move(other.nonce_);
    held_ = std::move(other.held_);
  }
  return *this;
}

RawSocket::~RawSocket() { Close(); }

void RawSocket::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::size_t RawSocket::Unread() const {
  int bytes = 0;
  return fd_ >= 0 && ioctl(fd_, SIOCINQ, &bytes) == 0 ? static_cast<std::size_t>(bytes) : 0;
}

std::size_t RawSocket::Unacknowledged() const {
  int bytes = 0;
  return fd_ >= 0 && ioctl(fd_, SIOCOUTQ, &bytes) == 0 ? static_cast<std::size_t>(bytes) : 0;
}

void RawSocket::ShutdownWrite() {
  if (fd_ >= 0) shutdown(fd_, SHUT_WR);
}

bool RawSocket::Send(std::span<const std::byte> bytes) {
  if (fd_ < 0) return false;
  const auto deadline = Clock::now() + Millis(5000);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (poll(&p, 1, MillisLeft(deadline)) <= 0) return false;
      continue;
    }
    return false;  // EPIPE, ECONNRESET: the peer is gone
  }
  return true;
}

bool RawSocket::Send(std::string_view bytes) {
  return Send(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
}

bool RawSocket::SendMessage(const proto::ControlMessage& message) {
  if (worker_ && message.has_hello()) {
    if (nonce_.empty() && !held_) {
      proto::ControlMessage first;
      if (ReadFrame(first, Millis(5000)) == Read::kOk) {
        if (first.has_challenge()) {
          nonce_ = first.challenge().nonce();
        } else {
          held_ = std::move(first);  // phubd's refusal: the next ReadMessage returns it
        }
      }
    }
    proto::ControlMessage answered = message;
    proto::Hello& hello = *answered.mutable_hello();
    hello.set_token_proof(TokenProof(hello.token_proof(), nonce_, hello.job()));
    return SendFramed(answered);
  }
  return SendFramed(message);
}

bool RawSocket::SendFramed(const proto::ControlMessage& message) {
  std::string body = message.SerializeAsString();
  std::string framed(4, '\0');
  const auto length = static_cast<std::uint32_t>(body.size());
  std::memcpy(framed.data(), &length, 4);
  framed += body;
  return Send(std::string_view(framed));
}

bool RawSocket::SendWire(const transport::EncodedHeader& header,
                         std::span<const std::byte> payload) {
  std::vector<std::byte> bytes(header.begin(), header.end());
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return Send(std::span<const std::byte>(bytes));
}

RawSocket::Read RawSocket::ReadExact(std::span<std::byte> out, Millis timeout) {
  if (fd_ < 0) return Read::kClosed;
  const auto deadline = Clock::now() + timeout;
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t n = recv(fd_, out.data() + got, out.size() - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return Read::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Read::kClosed;  // reset
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, MillisLeft(deadline));
    if (ready == 0) return Read::kTimeout;
    if (ready < 0 && errno != EINTR) return Read::kClosed;
  }
  return Read::kOk;
}

RawSocket::Read RawSocket::ReadMessage(proto::ControlMessage& out, Millis timeout) {
  if (held_) {
    out = std::move(*held_);
    held_.reset();
    return Read::kOk;
  }
  const auto deadline = Clock::now() + timeout;
  Read r = ReadFrame(out, timeout);
  if (r == Read::kOk && worker_ && nonce_.empty() && out.has_challenge()) {
    nonce_ = out.challenge().nonce();
    return ReadFrame(out, Millis(MillisLeft(deadline)));
  }
  return r;
}

RawSocket::Read RawSocket::ReadFrame(proto::ControlMessage& out, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  std::uint32_t length = 0;
  Read r = ReadExact(std::as_writable_bytes(std::span<std::uint32_t>(&length, 1)), timeout);
  if (r != Read::kOk) return r;
  if (length > kMaxFrameFromPhubd) return Read::kGarbage;
  std::string body(length, '\0');
  r = ReadExact(std::as_writable_bytes(std::span<char>(body.data(), body.size())),
                Millis(MillisLeft(deadline)));
  if (r != Read::kOk) return r;
  return out.ParseFromString(body) ? Read::kOk : Read::kGarbage;
}

RawSocket::Read RawSocket::ReadWire(transport::WireHeader& header, std::vector<std::byte>& payload,
                                    Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  transport::EncodedHeader bytes;
  Read r = ReadExact(bytes, timeout);
  if (r != Read::kOk) return r;
  auto decoded = transport::DecodeWireHeader(bytes);
  if (!decoded.ok()) return Read::kGarbage;
  header = *decoded;
  payload.resize(header.payload_bytes);
  return ReadExact(payload, Millis(MillisLeft(deadline)));
}

bool RawSocket::WaitClosed(Millis timeout) {
  if (fd_ < 0) return true;
  const auto deadline = Clock::now() + timeout;
  std::byte sink[4096];
  while (true) {
    ssize_t n = recv(fd_, sink, sizeof(sink), 0);
    if (n == 0) return true;
    if (n > 0) continue;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return true;  // reset
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, MillisLeft(deadline));
    if (ready == 0) return false;
    if (ready < 0 && errno != EINTR) return true;
  }
}

const char* ReadName(RawSocket::Read read) {
  switch (read) {
    case RawSocket::Read::kOk:
      return "ok";
    case RawSocket::Read::kClosed:
      return "closed by phubd";
    case RawSocket::Read::kTimeout:
      return "nothing before the deadline";
    case RawSocket::Read::kGarbage:
      return "garbage";
  }
  return "?";
}

proto::Hello MakeHello(std::uint32_t rank, std::uint32_t world,
                       const std::vector<keys::TensorSpec>& tensors, const std::string& token) {
  proto::Hello hello;
  hello.set_protocol_version(kProtocolVersion);
  hello.set_token_proof(token);  // answered when sent (RawSocket::SendMessage)
  hello.set_rank(rank);
  hello.set_world_size(world);
  for (const auto& t : tensors) {
    auto* spec = hello.add_tensors();
    spec->set_name(t.name);
    spec->set_elements(t.elements);
  }
  return hello;
}

proto::ControlMessage Wrap(const proto::Hello& hello) {
  proto::ControlMessage message;
  *message.mutable_hello() = hello;
  return message;
}

proto::ControlMessage WrapGoodbye(std::uint64_t iterations) {
  proto::ControlMessage message;
  message.mutable_goodbye()->set_iterations(iterations);
  return message;
}

bool ForgedMember::SendHello(std::uint16_t port, const proto::Hello& hello) {
  rank = hello.rank();
  control = RawSocket::Connect(port);
  return control.connected() && control.SendMessage(Wrap(hello));
}

std::string ForgedMember::AwaitWelcome(const std::vector<keys::TensorSpec>& tensors,
                                       Millis timeout) {
  proto::ControlMessage reply;
  RawSocket::Read r = control.ReadMessage(reply, timeout);
  if (r != RawSocket::Read::kOk) return std::string("no Welcome: ") + ReadName(r);
  if (reply.has_error()) return "Error instead of a Welcome: " + reply.error().message();
  if (!reply.has_welcome()) return "neither Welcome nor Error";
  welcome = reply.welcome();
  std::vector<keys::CoreIndex> owners(welcome.chunk_owner().begin(), welcome.chunk_owner().end());
  auto built = keys::KeyTable::WithPlacement(tensors, welcome.chunk_bytes(),
                                             static_cast<std::uint32_t>(welcome.cores_size()),
                                             std::move(owners));
  if (!built.ok())
    return "the Welcome does not fit the model: " + std::string(built.status().message());
  table = std::move(*built);
  return "";
}

std::uint16_t ForgedMember::DataPort(std::uint32_t core) const {
  return static_cast<std::uint16_t>(welcome.cores(static_cast<int>(core)).port());
}

bool ForgedMember::AttachAll() {
  data.clear();
  for (int i = 0; i < welcome.cores_size(); ++i) {
    RawSocket socket = RawSocket::Connect(DataPort(static_cast<std::uint32_t>(i)));
    if (!socket.connected()) return false;
    if (!socket.SendWire(AttachHeader(rank, static_cast<std::uint32_t>(i), welcome.session()))) {
      return false;
    }
    data.push_back(std::move(socket));
  }
  return true;
}

transport::EncodedHeader Header(transport::Op op, std::uint32_t worker, std::uint32_t chunk,
                                std::uint64_t iteration, std::uint32_t payload_bytes) {
  return transport::EncodeWireHeader({op, worker, chunk, iteration, payload_bytes});
}

transport::EncodedHeader AttachHeader(std::uint32_t rank, std::uint32_t core,
                                      std::uint64_t session) {
  return Header(transport::Op::kAttach, rank, core, session, 0);
}

}  // namespace phub::testing
