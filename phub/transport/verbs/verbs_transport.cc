#include "phub/transport/verbs/verbs_transport.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/transport/socket_listener.h"
#include "phub/transport/verbs/verbs_connection.h"
#include "spdlog/spdlog.h"

namespace phub::transport::verbs {

namespace {

namespace asio = boost::asio;

VerbsLimits LimitsFor(const ConnectionSizing& sizing, int setup_timeout_ms) {
  VerbsLimits limits;
  limits.max_send_payload_bytes = sizing.max_send_bytes;
  limits.staged_payload_bytes = sizing.max_unplaced_bytes;
  limits.staged_slots = sizing.unplaced_in_flight;
  limits.send_buffers = sizing.send_copies;
  limits.setup_timeout_ms = setup_timeout_ms;
  return limits;
}

// Accepts side channels and runs each one's set-up; owns the connections still in it.
class VerbsAcceptor final : public Acceptor {
 public:
  VerbsAcceptor(std::shared_ptr<VerbsLoop> loop, AcceptHooks hooks)
      : loop_(std::move(loop)),
        hooks_(std::make_shared<AcceptHooks>(std::move(hooks))),
        setting_up_(std::make_shared<SettingUp>()) {}
  ~VerbsAcceptor() override {
    Stop();
    CloseSettingUp(absl::CancelledError("the listener is going away"));
  }

  Status Start(asio::io_context& context, const std::string& address, std::uint16_t port,
               const SocketTuning& tuning) {
    PHUB_ASSIGN_OR_RETURN(listener_, SocketListener::Bind(context, address, port, tuning));
    listener_->Start([this](asio::ip::tcp::socket socket) { OnAccept(std::move(socket)); });
    return absl::OkStatus();
  }

  std::uint16_t port() const override { return listener_->port(); }
  void Stop() override {
    if (listener_) listener_->Stop();
  }
  void CloseSettingUp(const Status& why) override {
    SettingUp setting_up = std::move(*setting_up_);
    setting_up_->clear();
    for (auto& weak : setting_up) {
      if (auto c = weak.lock()) c->Close(why);
    }
  }

 private:
  void OnAccept(asio::ip::tcp::socket socket) {
    std::erase_if(*setting_up_, [](const auto& c) { return c.expired(); });
    std::optional<ConnectionSizing> sizing = hooks_->admit(setting_up_->size());
    if (!sizing) return;  // the socket closes as it goes out of scope
    // The hooks and the list, not `this`: a set-up may end after the acceptor (with an error,
    // then).
    setting_up_->push_back(VerbsConnection::Accept(
        std::move(socket), *loop_, hooks_->handler_now,
        LimitsFor(*sizing, hooks_->setup_timeout_ms),
        [hooks = hooks_, setting_up = setting_up_](StatusOr<std::shared_ptr<VerbsConnection>> c) {
          if (!c.ok()) {
            spdlog::warn("verbs connection set-up failed: {}", c.status().message());
            return;
          }
          // Ready: the owner's from here on, no longer counted as setting up nor closed by
          // CloseSettingUp or the acceptor's end.
          std::erase_if(*setting_up, [&](const auto& weak) { return weak.lock() == *c; });
          hooks->ready(*std::move(c));
        }));
  }

  std::shared_ptr<VerbsLoop> loop_;
  std::shared_ptr<AcceptHooks> hooks_;
  std::unique_ptr<SocketListener> listener_;
  // Accepted and not yet ready (or failed and not yet gone): shared with the set-ups' callbacks,
  // which take a connection off once it is ready.
  using SettingUp = std::vector<std::weak_ptr<VerbsConnection>>;
  std::shared_ptr<SettingUp> setting_up_;
};

class VerbsTransport final : public Transport {
 public:
  VerbsTransport(EventLoop& loop, VerbsLoop verbs, SocketTuning tuning)
      : loop_(loop), verbs_(std::make_shared<VerbsLoop>(std::move(verbs))), tuning_(tuning) {}

  StatusOr<std::shared_ptr<Connection>> Dial(const DialRequest& request,
                                             ConnectionHandler* handler) override {
    PHUB_ASSIGN_OR_RETURN(auto socket, ConnectWithRetry(loop_.context(), request.host,
                                                        request.port, request.timeout_ms,
                                                        tuning_, request.local_address));
    auto connection = VerbsConnection::Dial(std::move(socket), *verbs_, handler,
                                            LimitsFor(request.sizing, request.timeout_ms),
                                            request.attach);
    if (!connection.ok()) {
      return Status(connection.status().code(),
                    absl::StrCat("verbs connection to ", request.host, ":", request.port, ": ",
                                 connection.status().message()));
    }
    return std::shared_ptr<Connection>(*std::move(connection));
  }

  StatusOr<std::unique_ptr<Acceptor>> Listen(const std::string& address, std::uint16_t port,
                                             AcceptHooks hooks) override {
    // The acceptor shares the loop's registry holder, so ForgetRegistered reaches its next
    // connections too.
    auto acceptor = std::make_unique<VerbsAcceptor>(verbs_, std::move(hooks));
    PHUB_RETURN_IF_ERROR(acceptor->Start(loop_.context(), address, port, tuning_));
    return std::unique_ptr<Acceptor>(std::move(acceptor));
  }

  Status Register(std::span<std::byte> bytes) override { return verbs_->registry->Register(bytes); }
  Status RegisterDeviceMemory(const DeviceMemory& memory) override {
    return verbs_->registry->RegisterDevice(memory);
  }
  void Unregister(std::span<std::byte> bytes) override { verbs_->registry->Forget(bytes); }
  void ForgetRegistered() override {
    // Connections made so far keep the old registry (their regions stay until they close).
    verbs_->registry = std::make_shared<MemoryRegistry>(verbs_->device);
  }
  std::string Describe() const override {
    return absl::StrCat("verbs on ", verbs_->device->Describe());
  }

 private:
  EventLoop& loop_;
  std::shared_ptr<VerbsLoop> verbs_;
  SocketTuning tuning_;
};

class VerbsTransportDevice final : public Device {
 public:
  VerbsTransportDevice(std::shared_ptr<const VerbsDevice> device, SocketTuning tuning)
      : device_(std::move(device)), tuning_(tuning) {}

  StatusOr<std::unique_ptr<Transport>> Bind(EventLoop& loop, int queue) override {
    PHUB_ASSIGN_OR_RETURN(VerbsLoop verbs, OpenVerbsLoop(device_, loop.context(), queue));
    return std::unique_ptr<Transport>(new VerbsTransport(loop, std::move(verbs), tuning_));
  }
  std::string Describe() const override { return absl::StrCat("verbs on ", device_->Describe()); }

 private:
  std::shared_ptr<const VerbsDevice> device_;
  SocketTuning tuning_;
};

}  // namespace

StatusOr<std::shared_ptr<Device>> OpenVerbsDevice(const DeviceOptions& options,
                                                  const SocketTuning& tuning) {
  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<VerbsDevice> device, VerbsDevice::Open(options));
  return std::shared_ptr<Device>(
      std::make_shared<VerbsTransportDevice>(std::move(device), tuning));
}

}  // namespace phub::transport::verbs
