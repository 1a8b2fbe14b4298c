#include "phub/transport/tcp/tcp_transport.h"

#include <boost/asio/write.hpp>

#include "absl/strings/str_cat.h"
#include "phub/transport/socket_listener.h"
#include "phub/transport/tcp/tcp_connection.h"

namespace phub::transport::tcp {

namespace {

namespace asio = boost::asio;

class TcpAcceptor final : public Acceptor {
 public:
  explicit TcpAcceptor(std::unique_ptr<SocketListener> listener)
      : listener_(std::move(listener)) {}
  ~TcpAcceptor() override { listener_->Stop(); }

  std::uint16_t port() const override { return listener_->port(); }
  void CloseSettingUp(const Status&) override {}  // accepted TCP connections are ready at once
  void Stop() override { listener_->Stop(); }

 private:
  std::unique_ptr<SocketListener> listener_;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(EventLoop& loop, SocketTuning tuning) : loop_(loop), tuning_(tuning) {}

  StatusOr<std::shared_ptr<Connection>> Dial(const DialRequest& request,
                                             ConnectionHandler* handler) override {
    PHUB_ASSIGN_OR_RETURN(auto socket, ConnectWithRetry(loop_.context(), request.host,
                                                        request.port, request.timeout_ms,
                                                        tuning_, request.local_address));
    // The ATTACH goes first, before the connection is the loop's: nothing else can interleave.
    auto attach = EncodeWireHeader(request.attach);
    boost::system::error_code ec;
    asio::write(socket, asio::buffer(attach), ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("sending the ATTACH to ", request.host, ":",
                                                 request.port, ": ", ec.message()));
    }
    return std::shared_ptr<Connection>(TcpConnection::Create(std::move(socket), handler));
  }

  StatusOr<std::unique_ptr<Acceptor>> Listen(const std::string& address, std::uint16_t port,
                                             AcceptHooks hooks) override {
    PHUB_ASSIGN_OR_RETURN(auto listener,
                          SocketListener::Bind(loop_.context(), address, port, tuning_));
    listener->Start([hooks = std::move(hooks)](asio::ip::tcp::socket socket) {
      // Refused sockets close as they go out of scope.
      if (!hooks.admit(/*setting_up=*/0)) return;
      ConnectionHandler* handler = hooks.handler_now();
      if (handler == nullptr) return;
      hooks.ready(TcpConnection::Create(std::move(socket), handler));
    });
    return std::unique_ptr<Acceptor>(new TcpAcceptor(std::move(listener)));
  }

  Status Register(std::span<std::byte>) override { return absl::OkStatus(); }
  void ForgetRegistered() override {}
  void Unregister(std::span<std::byte>) override {}
  std::string Describe() const override { return "tcp"; }

 private:
  EventLoop& loop_;
  SocketTuning tuning_;
};

class TcpDevice final : public Device {
 public:
  explicit TcpDevice(SocketTuning tuning) : tuning_(tuning) {}
  StatusOr<std::unique_ptr<Transport>> Bind(EventLoop& loop, int /*queue*/) override {
    return std::unique_ptr<Transport>(new TcpTransport(loop, tuning_));
  }
  std::string Describe() const override { return "tcp"; }

 private:
  SocketTuning tuning_;
};

}  // namespace

std::shared_ptr<Device> OpenTcpDevice(const SocketTuning& tuning) {
  return std::make_shared<TcpDevice>(tuning);
}

}  // namespace phub::transport::tcp
