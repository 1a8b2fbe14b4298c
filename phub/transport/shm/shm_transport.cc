#include "phub/transport/shm/shm_transport.h"

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "phub/common/log_limiter.h"
#include "phub/transport/shm/shm_connection.h"
#include "phub/transport/shm/shm_setup.h"
#include "spdlog/spdlog.h"

namespace phub::transport::shm {

namespace {

namespace asio = boost::asio;
using Local = asio::local::stream_protocol;

// After accept() fails (out of descriptors or memory), before the next try.
constexpr std::chrono::milliseconds kAcceptBackoff{200};
// Port 0: names tried at random in the ephemeral range before giving up.
constexpr int kPortTries = 64;

std::string PeerName(int socket_fd) { return absl::StrCat("local:", PeerPid(socket_fd)); }

class ShmAcceptor final : public Acceptor {
 public:
  ShmAcceptor(asio::io_context& context, std::uint16_t port, AcceptHooks hooks)
      : context_(context), acceptor_(context), backoff_(context), port_(port),
        hooks_(std::move(hooks)) {}
  ~ShmAcceptor() override { Stop(); }

  Status Bind() {
    boost::system::error_code ec;
    acceptor_.open(Local(), ec);
    if (!ec) acceptor_.bind(Local::endpoint(AbstractName(port_)), ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      return absl::UnavailableError(absl::StrCat("listening on ", ShownName(port_), ": ",
                                                 ec.message(),
                                                 ec == asio::error::address_in_use
                                                     ? " (another phubd on this host uses the port)"
                                                     : ""));
    }
    return absl::OkStatus();
  }

  void Start() { AcceptNext(); }

  std::uint16_t port() const override { return port_; }
  void CloseSettingUp(const Status&) override {}  // set up at once, on accept: none waits
  void Stop() override {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    backoff_.cancel();
  }

 private:
  void AcceptNext() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, Local::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        if (auto suppressed = log_.Allow()) {
          spdlog::warn("{}: accept failed: {}; trying again in {} ms{}", ShownName(port_),
                       ec.message(), kAcceptBackoff.count(), LogLimiter::Note(*suppressed));
        }
        backoff_.expires_after(kAcceptBackoff);
        backoff_.async_wait([this](const boost::system::error_code& e) {
          if (!e) AcceptNext();
        });
        return;
      }
      Adopt(std::move(socket));
      AcceptNext();
    });
  }

  // A refused socket closes as it goes out of scope; the dialer hears it as no hello.
  void Adopt(Local::socket socket) {
    if (!hooks_.admit(/*setting_up=*/0)) return;
    ConnectionHandler* handler = hooks_.handler_now();
    if (handler == nullptr) return;
    StatusOr<Endpoint> endpoint = OfferEndpoint(socket.native_handle(), kDefaultRingBytes);
    if (!endpoint.ok()) {
      if (auto suppressed = log_.Allow()) {
        spdlog::warn("{}: could not set a connection up: {}{}", ShownName(port_),
                     endpoint.status().message(), LogLimiter::Note(*suppressed));
      }
      return;
    }
    std::string peer = PeerName(socket.native_handle());
    hooks_.ready(ShmConnection::Create(context_, Side::kAcceptor,
                                       *std::move(endpoint), UniqueFd(socket.release()), handler,
                                       std::move(peer)));
  }

  asio::io_context& context_;
  Local::acceptor acceptor_;
  asio::steady_timer backoff_;
  std::uint16_t port_;
  AcceptHooks hooks_;
  LogLimiter log_;
};

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(EventLoop& loop) : loop_(loop) {}

  StatusOr<std::shared_ptr<Connection>> Dial(const DialRequest& request,
                                             ConnectionHandler* handler) override {
    PHUB_RETURN_IF_ERROR(CheckHostIsThisOne(request.host));
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(request.timeout_ms);
    PHUB_ASSIGN_OR_RETURN(UniqueFd socket, ConnectUntil(request.port, deadline));
    PHUB_ASSIGN_OR_RETURN(Endpoint endpoint,
                          TakeEndpoint(socket.get(), deadline, ShownName(request.port)));
    std::string peer = PeerName(socket.get());
    auto connection = ShmConnection::Create(loop_.context(), Side::kDialer, std::move(endpoint),
                                            std::move(socket), handler, std::move(peer));
    connection->WriteFirst(request.attach);
    return std::shared_ptr<Connection>(std::move(connection));
  }

  StatusOr<std::unique_ptr<Acceptor>> Listen(const std::string& /*address*/, std::uint16_t port,
                                             AcceptHooks hooks) override {
    if (port != 0) {
      auto acceptor = std::make_unique<ShmAcceptor>(loop_.context(), port, std::move(hooks));
      PHUB_RETURN_IF_ERROR(acceptor->Bind());
      acceptor->Start();
      return std::unique_ptr<Acceptor>(std::move(acceptor));
    }
    // Any free name: as the kernel picks a free TCP port, from the ephemeral range.
    std::minstd_rand pick(std::random_device{}());
    std::uniform_int_distribution<int> ports(32768, 60999);
    Status last;
    for (int attempt = 0; attempt < kPortTries; ++attempt) {
      auto acceptor = std::make_unique<ShmAcceptor>(
          loop_.context(), static_cast<std::uint16_t>(ports(pick)), hooks);
      last = acceptor->Bind();
      if (!last.ok()) continue;
      acceptor->Start();
      return std::unique_ptr<Acceptor>(std::move(acceptor));
    }
    return last;
  }

  Status Register(std::span<std::byte>) override { return absl::OkStatus(); }
  void ForgetRegistered() override {}
  void Unregister(std::span<std::byte>) override {}
  std::string Describe() const override { return "shm"; }

 private:
  EventLoop& loop_;
};

class ShmDevice final : public Device {
 public:
  StatusOr<std::unique_ptr<Transport>> Bind(EventLoop& loop, int /*queue*/) override {
    return std::unique_ptr<Transport>(new ShmTransport(loop));
  }
  std::string Describe() const override { return "shm"; }
};

}  // namespace

std::shared_ptr<Device> OpenShmDevice() { return std::make_shared<ShmDevice>(); }

}  // namespace phub::transport::shm
