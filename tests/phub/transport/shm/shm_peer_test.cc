// What a hostile or dying process on the other end of an shm connection can do to this side:
// rewrite the shared positions, write garbage headers, die in the middle of a message, talk on
// the set-up socket, or (as the listener) hand over memory that could fault this process or
// bells that are not eventfds. Each ends that one connection with an error naming what was
// wrong; the process goes on. The raw peer here speaks the set-up itself (shm_setup.h), as
// another program on the host could.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "phub/transport/shm/shm_ring.h"
#include "phub/transport/shm/shm_setup.h"
#include "tests/phub/transport/transport_pair.h"

namespace phub::transport {
namespace {

using shm::Endpoint;
using shm::RingIn;
using shm::RingWriter;

class ShmPeerTest : public TransportPairTest {
 protected:
  // A raw dialer: connected and set up as a dialer is, nothing written yet; accepted_ started.
  void RawDialer() {
    ASSERT_NO_FATAL_FAILURE(Listen());
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    StatusOr<UniqueFd> socket = shm::ConnectUntil(port_, deadline);
    ASSERT_TRUE(socket.ok()) << socket.status();
    socket_ = *std::move(socket);
    StatusOr<Endpoint> endpoint = shm::TakeEndpoint(socket_.get(), deadline, "test listener");
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_.emplace(*std::move(endpoint));
    accepted_ = WaitReady();
    ASSERT_NE(accepted_, nullptr);
    accept_loop_.Run([&] { accepted_->Start(); });
  }
  // The ring the raw dialer sends on (ring 1: dialer -> acceptor).
  shm::RingMemory SendRing() { return RingIn(endpoint_->mapping(), endpoint_->ring_bytes(), 1); }
  void RingAcceptor() {
    const std::uint64_t one = 1;
    ASSERT_EQ(::write(endpoint_->peer_bell().get(), &one, sizeof(one)), 8);
  }
  Status AcceptorsEnd() {
    EXPECT_TRUE(acceptor_handler_.WaitForClosed());
    return acceptor_handler_.why();
  }

  UniqueFd socket_;
  std::optional<Endpoint> endpoint_;
};

TEST_P(ShmPeerTest, AForgedWritePositionClosesWithDataLoss) {
  ASSERT_NO_FATAL_FAILURE(RawDialer());
  *SendRing().head = std::uint64_t{1} << 40;  // far more than the ring holds
  RingAcceptor();
  const Status why = AcceptorsEnd();
  EXPECT_EQ(why.code(), absl::StatusCode::kDataLoss) << why;
  EXPECT_TRUE(MessageHas(why, "corrupted the shared memory"));
  EXPECT_TRUE(MessageHas(why, "local:"));  // names the peer
}

// The read position of the ring this side sends on, forged while this side has nothing to
// send: an end too. (It was once taken for "more to do": the loop re-posted itself for good,
// a core spinning on one connection; shm_stream_fuzzer found it.)
TEST_P(ShmPeerTest, AForgedReadPositionClosesEvenWithNothingToSend) {
  ASSERT_NO_FATAL_FAILURE(RawDialer());
  *RingIn(endpoint_->mapping(), endpoint_->ring_bytes(), 0).tail = 12345;  // nothing was sent
  RingAcceptor();
  const Status why = AcceptorsEnd();
  EXPECT_EQ(why.code(), absl::StatusCode::kDataLoss) << why;
  EXPECT_TRUE(MessageHas(why, "corrupted the shared memory"));
}

TEST_P(ShmPeerTest, AGarbageHeaderClosesWithInvalidArgument) {
  ASSERT_NO_FATAL_FAILURE(RawDialer());
  RingWriter writer(SendRing());
  const std::vector<std::byte> garbage(kWireHeaderBytes, std::byte{0xff});
  writer.Write(garbage, *writer.Free());
  writer.Publish();
  RingAcceptor();
  const Status why = AcceptorsEnd();
  EXPECT_EQ(why.code(), absl::StatusCode::kInvalidArgument) << why;
  EXPECT_TRUE(MessageHas(why, "malformed header"));
  EXPECT_EQ(acceptor_handler_.resolve_calls(), 0);
}

// What the peer published before it died is delivered (its ATTACH here); the half message
// after it is not, and the end says so.
TEST_P(ShmPeerTest, APeerThatDiesInTheMiddleOfAPayloadIsUnavailable) {
  ASSERT_NO_FATAL_FAILURE(RawDialer());
  RingWriter writer(SendRing());
  const EncodedHeader attach = EncodeWireHeader(kTestAttach);
  const EncodedHeader push = EncodeWireHeader(WireHeader{Op::kPush, 2, 0, 1, 1000});
  const std::vector<std::byte> part(10, std::byte{3});
  writer.Write(attach, *writer.Free());
  writer.Write(push, *writer.Free());
  writer.Write(part, *writer.Free());
  writer.Publish();
  socket_.reset();  // as the kernel does for a process that dies
  const Status why = AcceptorsEnd();
  EXPECT_EQ(why.code(), absl::StatusCode::kUnavailable) << why;
  EXPECT_TRUE(MessageHas(why, "in the middle of a payload"));
  ASSERT_EQ(acceptor_handler_.messages().size(), 1u);
  EXPECT_EQ(acceptor_handler_.messages()[0].header.op, Op::kAttach);
}

TEST_P(ShmPeerTest, BytesOnTheSetUpSocketCloseTheConnection) {
  ASSERT_NO_FATAL_FAILURE(RawDialer());
  ASSERT_EQ(::send(socket_.get(), "x", 1, MSG_NOSIGNAL), 1);
  const Status why = AcceptorsEnd();
  EXPECT_EQ(why.code(), absl::StatusCode::kInvalidArgument) << why;
  EXPECT_TRUE(MessageHas(why, "set-up socket"));
}

// --- A hostile listener: what the dialer checks before it maps anything ---

class FakeListener {
 public:
  // Listens on shm's name for a port nobody uses; `serve` gets each accepted socket.
  explicit FakeListener(std::function<void(int)> serve) {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    for (port_ = 40000; port_ < 40100; ++port_) {
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      const std::string name = shm::AbstractName(port_);
      std::memcpy(address.sun_path, name.data(), name.size());
      const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
      if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&address), length) == 0) break;
    }
    EXPECT_EQ(::listen(fd_.get(), 4), 0);
    thread_ = std::thread([this, serve = std::move(serve)] {
      UniqueFd client(::accept(fd_.get(), nullptr, nullptr));
      if (client.valid()) serve(client.get());
      // Held open until the dialer gave up or took what it got.
      char byte;
      (void)::recv(client.get(), &byte, 1, 0);
    });
  }
  ~FakeListener() {
    ::shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::uint16_t port() const { return port_; }

 private:
  UniqueFd fd_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// Sends a good hello with the three descriptors given.
void SendHello(int socket, int memory, int bell1, int bell2) {
  std::vector<std::byte> hello(shm::kHelloBytes);
  const std::uint32_t magic = shm::kShmMagic;
  const std::uint16_t version = shm::kShmVersion;
  const std::uint64_t ring = shm::kMinRingBytes;
  std::memcpy(hello.data(), &magic, 4);
  std::memcpy(hello.data() + 4, &version, 2);
  std::memcpy(hello.data() + 8, &ring, 8);
  iovec data{hello.data(), hello.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* rights = CMSG_FIRSTHDR(&message);
  rights->cmsg_level = SOL_SOCKET;
  rights->cmsg_type = SCM_RIGHTS;
  rights->cmsg_len = CMSG_LEN(3 * sizeof(int));
  const int fds[3] = {memory, bell1, bell2};
  std::memcpy(CMSG_DATA(rights), fds, sizeof(fds));
  ASSERT_EQ(::sendmsg(socket, &message, MSG_NOSIGNAL), static_cast<ssize_t>(hello.size()));
}

UniqueFd Memory(bool sealed) {
  UniqueFd memory(::memfd_create("fake", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_EQ(::ftruncate(memory.get(), shm::kControlBytes + 2 * shm::kMinRingBytes), 0);
  if (sealed) EXPECT_EQ(::fcntl(memory.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  return memory;
}

StatusOr<std::shared_ptr<Connection>> DialFake(Transport& transport, std::uint16_t port,
                                               ConnectionHandler* handler, int timeout_ms) {
  DialRequest request;
  request.host = "127.0.0.1";
  request.port = port;
  request.timeout_ms = timeout_ms;
  request.attach = kTestAttach;
  return transport.Dial(request, handler);
}

TEST_P(ShmPeerTest, MemoryThatCouldShrinkIsRefused) {
  FakeListener listener([](int socket) {
    UniqueFd memory = Memory(/*sealed=*/false);
    UniqueFd a(::eventfd(0, EFD_CLOEXEC)), b(::eventfd(0, EFD_CLOEXEC));
    SendHello(socket, memory.get(), a.get(), b.get());
  });
  auto dialed = DialFake(*dial_transport_, listener.port(), &dialer_handler_, 10000);
  ASSERT_FALSE(dialed.ok());
  EXPECT_EQ(dialed.status().code(), absl::StatusCode::kInvalidArgument) << dialed.status();
  EXPECT_TRUE(MessageHas(dialed.status(), "sealed against shrinking"));
}

TEST_P(ShmPeerTest, BellsThatAreNotEventfdsAreRefused) {
  FakeListener listener([](int socket) {
    UniqueFd memory = Memory(/*sealed=*/true);
    int pipe_ends[2];
    ASSERT_EQ(::pipe2(pipe_ends, O_CLOEXEC), 0);
    UniqueFd r(pipe_ends[0]), w(pipe_ends[1]);
    SendHello(socket, memory.get(), r.get(), w.get());
  });
  auto dialed = DialFake(*dial_transport_, listener.port(), &dialer_handler_, 10000);
  ASSERT_FALSE(dialed.ok());
  EXPECT_TRUE(MessageHas(dialed.status(), "not eventfds")) << dialed.status();
}

TEST_P(ShmPeerTest, AListenerThatSaysNothingIsADeadline) {
  FakeListener listener([](int) {});
  auto dialed = DialFake(*dial_transport_, listener.port(), &dialer_handler_, 300);
  ASSERT_FALSE(dialed.ok());
  EXPECT_EQ(dialed.status().code(), absl::StatusCode::kDeadlineExceeded) << dialed.status();
  EXPECT_TRUE(MessageHas(dialed.status(), "no shm hello"));
}

TEST_P(ShmPeerTest, NobodyListeningIsUnavailableSayingWhatToCheck) {
  auto dialed = DialFake(*dial_transport_, 1, &dialer_handler_, 100);
  ASSERT_FALSE(dialed.ok());
  EXPECT_EQ(dialed.status().code(), absl::StatusCode::kUnavailable) << dialed.status();
  EXPECT_TRUE(MessageHas(dialed.status(), "--transport shm"));
}

TEST_P(ShmPeerTest, AnotherHostIsRefusedBeforeAnyConnect) {
  DialRequest request;
  request.host = "192.0.2.7";  // TEST-NET-1: never an address of this host
  request.port = 1;
  request.timeout_ms = 100;
  auto dialed = dial_transport_->Dial(request, &dialer_handler_);
  ASSERT_FALSE(dialed.ok());
  EXPECT_EQ(dialed.status().code(), absl::StatusCode::kFailedPrecondition) << dialed.status();
  EXPECT_TRUE(MessageHas(dialed.status(), "--transport tcp"));
}

INSTANTIATE_TEST_SUITE_P(Shm, ShmPeerTest, ::testing::Values(TransportKind::kShm),
                         [](const auto& info) { return TransportName(info.param); });

}  // namespace
}  // namespace phub::transport
