#include "phub/client/ps_client.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "phub/common/version.h"
#include "phub/transport/tcp/control_channel.h"
#include "phub/transport/tcp/event_loop.h"
#include "phub/transport/tcp/socket_options.h"
#include "phub/transport/tcp/tcp_connection.h"
#include "phub/transport/verbs/verbs_connection.h"
#include "spdlog/spdlog.h"

namespace phub::client {

namespace asio = boost::asio;
using transport::Connection;
using transport::Op;
using transport::WireHeader;
using transport::tcp::TcpConnection;
using transport::verbs::VerbsConnection;

namespace {
// phubd sends a worker only WEIGHTS (into the weight buffers, landing zones): staged messages
// are header-sized. Pushes come from unregistered gradient memory, so they go by copy through
// send buffers: enough of them to keep several chunks in flight per core.
transport::verbs::VerbsLimits ClientLimits(std::uint64_t chunk_bytes) {
  transport::verbs::VerbsLimits limits;
  limits.staged_payload_bytes = 1024;
  limits.send_buffers = 16;
  limits.max_send_payload_bytes = chunk_bytes;  // pushes and INIT: at most one chunk
  return limits;
}
}  // namespace

// All network I/O runs on one event-loop thread; the caller's threads only post work to it and
// wait on `cv_` for tensors to complete.
class PsClient::Impl final : public transport::ConnectionHandler {
 public:
  Impl(PsClientOptions options, std::vector<std::span<float>> weights)
      : options_(std::move(options)),
        loop_(absl::StrCat("client ", options_.rank), /*pin_core=*/-1),
        control_(loop_.context()),
        weights_(std::move(weights)) {}

  ~Impl() override {
    (void)Close();
    // Connections and the verbs loop (its CQ) are owned by the loop thread's handlers too.
    loop_.Run([this] {
      connections_.clear();
      verbs_.reset();
    });
  }

  Status Handshake(std::vector<keys::TensorSpec> tensors);
  Status DeclareGradients(const std::vector<std::span<const float>>& grads);
  Status Init();
  Status Push(std::uint32_t tensor, std::span<const float> grads);
  Status Wait(std::uint32_t tensor);
  Status WaitAll();
  Status Close();

  const keys::KeyTable& table() const { return *table_; }
  bool weights_from_server() const { return weights_from_server_; }
  std::uint32_t rank() const { return options_.rank; }
  std::uint64_t iteration(std::uint32_t t) const {
    std::lock_guard lock(mu_);
    return tensors_[t].iteration;
  }

  // ConnectionHandler, on the loop thread.
  StatusOr<std::span<std::byte>> ResolveSlot(Connection& connection,
                                             const WireHeader& header) override;
  Status OnReceived(Connection& connection, const WireHeader& header) override;
  void OnClosed(Connection& connection, const Status& why) override;
  StatusOr<std::vector<transport::LandingZone>> LandingZones(const Connection& connection,
                                                            const WireHeader* attach) override;

 private:
  struct TensorState {
    std::uint64_t iteration = 0;         // completed pushes
    std::uint64_t expect_iteration = 0;  // iteration of the weights in flight
    std::uint32_t pending = 0;           // chunks still to land
  };

  void RecordError(const Status& status);
  transport::tcp::SocketTuning tuning() const {
    return {options_.tcp_no_delay, options_.socket_buffer_bytes};
  }
  void WatchControl();
  void SendChunks(Op op, std::uint32_t tensor, std::span<const float> data,
                  std::uint64_t iteration);

  PsClientOptions options_;
  transport::tcp::EventLoop loop_;
  asio::ip::tcp::socket control_;
  std::optional<keys::KeyTable> table_;  // set by Handshake
  std::vector<std::span<float>> weights_;
  Status OpenVerbs();
  StatusOr<std::shared_ptr<Connection>> Attach(const proto::CoreEndpoint& endpoint);

  std::optional<transport::verbs::VerbsLoop> verbs_;       // when phubd runs verbs
  std::vector<std::shared_ptr<Connection>> connections_;  // by server core
  bool weights_from_server_ = false;
  std::uint64_t session_ = 0;
  std::atomic<bool> closing_{false};
  bool closed_ = false;
  bool started_ = false;  // the data connections were started (Handshake completed)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TensorState> tensors_;  // guarded by mu_
  std::vector<std::uint64_t> landed_; // guarded by mu_; per chunk: weights received so far
  Status error_;                      // guarded by mu_; first error wins
};

Status PsClient::Impl::Handshake(std::vector<keys::TensorSpec> tensors) {
  if (weights_.size() != tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("got ", weights_.size(), " weight buffers for ",
                                                   tensors.size(), " tensors"));
  }
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (weights_[t].size() != tensors[t].elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight buffer of tensor ", t, " ('", tensors[t].name, "') has ", weights_[t].size(),
          " floats; the tensor has ", tensors[t].elements));
    }
  }
  PHUB_ASSIGN_OR_RETURN(control_, transport::tcp::ConnectWithRetry(loop_.context(), options_.host,
                                                                   options_.port,
                                                                   options_.connect_timeout_ms,
                                                                   tuning()));
  proto::ControlMessage hello_message;
  proto::Hello& hello = *hello_message.mutable_hello();
  hello.set_protocol_version(kProtocolVersion);
  hello.set_job_token(options_.job_token);
  hello.set_rank(options_.rank);
  hello.set_world_size(options_.world_size);
  for (const auto& t : tensors) {
    proto::TensorSpec& spec = *hello.add_tensors();
    spec.set_name(t.name);
    spec.set_elements(t.elements);
  }
  PHUB_RETURN_IF_ERROR(transport::tcp::WriteControlMessage(control_, hello_message));
  spdlog::debug("rank {}: Hello sent, waiting for the other workers", options_.rank);
  PHUB_ASSIGN_OR_RETURN(proto::ControlMessage reply, transport::tcp::ReadControlMessage(control_));
  if (reply.has_error()) {
    return absl::InvalidArgumentError(absl::StrCat("phubd refused rank ", options_.rank, ": ",
                                                   reply.error().message(), "; fix: ",
                                                   reply.error().fix()));
  }
  if (!reply.has_welcome()) {
    return absl::InvalidArgumentError("phubd answered the Hello with neither Welcome nor Error");
  }
  const proto::Welcome& welcome = reply.welcome();
  std::vector<keys::CoreIndex> owners(welcome.chunk_owner().begin(), welcome.chunk_owner().end());
  PHUB_ASSIGN_OR_RETURN(table_, keys::KeyTable::WithPlacement(
                                    std::move(tensors), welcome.chunk_bytes(),
                                    static_cast<std::uint32_t>(welcome.cores_size()),
                                    std::move(owners)));
  weights_from_server_ = welcome.weights_from_server();
  session_ = welcome.session();

  // Every tensor awaits its iteration-0 weights, which phubd sends once all workers attached.
  tensors_.assign(table_->tensors().size(), TensorState{});
  landed_.assign(table_->chunks().size(), 0);
  for (std::uint32_t t = 0; t < tensors_.size(); ++t) {
    tensors_[t].pending = static_cast<std::uint32_t>(table_->chunks_of_tensor(t).size());
  }

  if (welcome.transport() == "verbs") PHUB_RETURN_IF_ERROR(OpenVerbs());
  for (const proto::CoreEndpoint& endpoint : welcome.cores()) {
    if (endpoint.core() != connections_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "phubd's Welcome lists core ", endpoint.core(), " in place ", connections_.size(),
          ": the cores must come in order"));
    }
    PHUB_ASSIGN_OR_RETURN(auto connection, Attach(endpoint));
    connection->set_tag(endpoint.core());  // ResolveSlot checks a chunk came from its owner
    connections_.push_back(std::move(connection));
  }
  loop_.Run([this] {
    for (auto& c : connections_) c->Start();
    WatchControl();
    started_ = true;
  });
  spdlog::debug("rank {}: attached to {} server cores, {} chunks", options_.rank,
                connections_.size(), table_->chunks().size());
  return absl::OkStatus();
}

Status PsClient::Impl::OpenVerbs() {
  auto device = transport::verbs::VerbsDevice::Open(options_.rdma);
  if (!device.ok()) {
    return Status(device.status().code(),
                  absl::StrCat("phubd runs --transport verbs, but this worker cannot open its RDMA "
                               "device: ", device.status().message()));
  }
  std::shared_ptr<const transport::verbs::VerbsDevice> shared = std::move(*device);
  Status status;
  loop_.Run([&] {
    auto verbs = transport::verbs::OpenVerbsLoop(shared, loop_.context());
    if (!verbs.ok()) {
      status = verbs.status();
      return;
    }
    verbs_ = std::move(*verbs);
    // The weight buffers are where phubd writes fresh weights: registered once, here.
    for (std::span<float> w : weights_) {
      if (w.empty()) continue;
      status = verbs_->registry->Register(std::as_writable_bytes(w));
      if (!status.ok()) return;
    }
  });
  spdlog::debug("rank {}: data plane: verbs on {}", options_.rank, shared->Describe());
  return status;
}

StatusOr<std::shared_ptr<Connection>> PsClient::Impl::Attach(const proto::CoreEndpoint& endpoint) {
  PHUB_ASSIGN_OR_RETURN(auto socket, transport::tcp::ConnectWithRetry(
                                         loop_.context(), endpoint.host(),
                                         static_cast<std::uint16_t>(endpoint.port()),
                                         options_.connect_timeout_ms, tuning()));
  const WireHeader attach_header{Op::kAttach, options_.rank, endpoint.core(), session_, 0};
  if (verbs_) {  // the ATTACH travels in the verbs set-up
    auto connection =
        VerbsConnection::Dial(std::move(socket), *verbs_, this,
                              ClientLimits(table_->chunk_bytes()), attach_header);
    if (!connection.ok()) {
      return Status(connection.status().code(),
                    absl::StrCat("verbs connection to phubd core ", endpoint.core(), " at ",
                                 endpoint.host(), ":", endpoint.port(), ": ",
                                 connection.status().message()));
    }
    return std::shared_ptr<Connection>(*std::move(connection));
  }
  auto attach = transport::EncodeWireHeader(attach_header);
  boost::system::error_code ec;
  asio::write(socket, asio::buffer(attach), ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("attaching to phubd core ", endpoint.core(), " at ",
                                               endpoint.host(), ":", endpoint.port(), ": ",
                                               ec.message()));
  }
  return std::shared_ptr<Connection>(TcpConnection::Create(std::move(socket), this));
}

StatusOr<std::vector<transport::LandingZone>> PsClient::Impl::LandingZones(
    const Connection&, const WireHeader*) {
  std::vector<transport::LandingZone> zones;
  for (const keys::Chunk& chunk : table_->chunks()) {
    zones.push_back({Op::kWeights, options_.rank, chunk.id, 0,
                     std::as_writable_bytes(weights_[chunk.tensor].subspan(chunk.offset,
                                                                           chunk.elements))});
  }
  return zones;
}

void PsClient::Impl::WatchControl() {
  transport::tcp::AsyncReadControlMessage(control_, [this](StatusOr<proto::ControlMessage> m) {
    if (closing_) return;
    if (!m.ok()) {
      return RecordError(absl::UnavailableError(
          absl::StrCat("lost the control connection to phubd: ", m.status().message())));
    }
    if (m->has_error()) {
      RecordError(absl::UnavailableError(
          absl::StrCat("phubd: ", m->error().message(), "; ", m->error().fix())));
    }
    WatchControl();
  });
}

void PsClient::Impl::RecordError(const Status& status) {
  {
    std::lock_guard lock(mu_);
    if (error_.ok()) error_ = status;
  }
  spdlog::error("rank {}: {}", options_.rank, status.message());
  cv_.notify_all();
}

void PsClient::Impl::SendChunks(Op op, std::uint32_t tensor, std::span<const float> data,
                                std::uint64_t iteration) {
  // Runs on the loop thread.
  for (const keys::Chunk& chunk : table_->chunks_of_tensor(tensor)) {
    auto bytes = std::as_bytes(data.subspan(chunk.offset, chunk.elements));
    WireHeader header{op, options_.rank, chunk.id, iteration,
                      static_cast<std::uint32_t>(bytes.size())};
    connections_[table_->owner(chunk.id)]->Send(header, bytes, [this](const Status& s) {
      if (!s.ok() && !closing_) RecordError(s);
    });
  }
}

Status PsClient::Impl::DeclareGradients(const std::vector<std::span<const float>>& grads) {
  if (grads.size() != weights_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DeclareGradients: ", grads.size(),
                                                   " buffers for ", weights_.size(), " tensors"));
  }
  for (std::size_t t = 0; t < grads.size(); ++t) {
    if (grads[t].size() != weights_[t].size()) {
      return absl::InvalidArgumentError(absl::StrCat("DeclareGradients: tensor ", t, "'s buffer has ",
                                                     grads[t].size(), " floats; it has ",
                                                     weights_[t].size()));
    }
  }
  if (!verbs_) return absl::OkStatus();
  Status status;
  loop_.Run([&] {  // the registry is the loop's
    for (std::span<const float> g : grads) {
      if (g.empty()) continue;
      // Registered for the NIC to read; no rkey of it is ever published.
      std::span<float> writable(const_cast<float*>(g.data()), g.size());
      status = verbs_->registry->Register(std::as_writable_bytes(writable));
      if (!status.ok()) return;
    }
  });
  return status;
}

Status PsClient::Impl::Init() {
  if (options_.rank == 0 && !weights_from_server_) {
    loop_.Post([this] {
      for (std::uint32_t t = 0; t < tensors_.size(); ++t) SendChunks(Op::kInit, t, weights_[t], 0);
    });
  }
  return WaitAll();
}

Status PsClient::Impl::Push(std::uint32_t tensor, std::span<const float> grads) {
  if (tensor >= weights_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Push of tensor ", tensor, "; the model has ",
                                                   weights_.size()));
  }
  if (grads.size() != weights_[tensor].size()) {
    return absl::InvalidArgumentError(absl::StrCat("Push of tensor ", tensor, " with ",
                                                   grads.size(), " floats; it has ",
                                                   weights_[tensor].size()));
  }
  std::uint64_t iteration;
  {
    std::lock_guard lock(mu_);
    if (!error_.ok()) return error_;
    TensorState& state = tensors_[tensor];
    if (state.pending > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("Push of tensor ", tensor, " while its previous push or Init is in flight: "
                       "call Wait(", tensor, ") first"));
    }
    iteration = state.iteration + 1;
    state.expect_iteration = iteration;
    state.pending = static_cast<std::uint32_t>(table_->chunks_of_tensor(tensor).size());
    if (state.pending == 0) state.iteration = iteration;  // an empty tensor has nothing to move
  }
  loop_.Post([this, tensor, grads, iteration] { SendChunks(Op::kPush, tensor, grads, iteration); });
  return absl::OkStatus();
}

Status PsClient::Impl::Wait(std::uint32_t tensor) {
  if (tensor >= tensors_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Wait for tensor ", tensor, "; the model has ",
                                                   tensors_.size()));
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return tensors_[tensor].pending == 0 || !error_.ok(); });
  return error_;
}

Status PsClient::Impl::WaitAll() {
  for (std::uint32_t t = 0; t < tensors_.size(); ++t) PHUB_RETURN_IF_ERROR(Wait(t));
  return absl::OkStatus();
}

StatusOr<std::span<std::byte>> PsClient::Impl::ResolveSlot(Connection& connection,
                                                           const WireHeader& header) {
  // The one validation point of every message phubd sends: OnReceived trusts what passes.
  if (header.op != Op::kWeights) {
    return absl::InvalidArgumentError(
        absl::StrCat("phubd sent ", OpName(header.op), "; a worker only receives WEIGHTS"));
  }
  if (header.worker != options_.rank) {
    return absl::InvalidArgumentError(absl::StrCat("WEIGHTS addressed to worker ", header.worker,
                                                   " reached rank ", options_.rank));
  }
  if (header.chunk >= table_->chunks().size()) {
    return absl::InvalidArgumentError(absl::StrCat("WEIGHTS for chunk ", header.chunk,
                                                   " of ", table_->chunks().size()));
  }
  if (table_->owner(header.chunk) != connection.tag()) {
    return absl::InvalidArgumentError(absl::StrCat("WEIGHTS of chunk ", header.chunk,
                                                   " from core ", connection.tag(),
                                                   "; the chunk belongs to core ",
                                                   table_->owner(header.chunk)));
  }
  const keys::Chunk& chunk = table_->chunks()[header.chunk];
  if (header.payload_bytes != chunk.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("WEIGHTS of chunk ", header.chunk, " carry ",
                                                   header.payload_bytes, " bytes, expected ",
                                                   chunk.bytes()));
  }
  {
    std::lock_guard lock(mu_);
    const TensorState& state = tensors_[chunk.tensor];
    // landed_[chunk] is the iteration of the next weights this chunk may receive: once per
    // iteration, and only for the push in flight.
    if (state.pending == 0 || header.iteration != state.expect_iteration ||
        landed_[header.chunk] != header.iteration) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected WEIGHTS for chunk ", header.chunk, " of iteration ", header.iteration,
          " (tensor ", chunk.tensor, " awaits ",
          state.pending ? absl::StrCat("iteration ", state.expect_iteration) : "nothing",
          "; the chunk's next is ", landed_[header.chunk], ")"));
    }
  }
  return std::as_writable_bytes(weights_[chunk.tensor].subspan(chunk.offset, chunk.elements));
}

Status PsClient::Impl::OnReceived(Connection& connection, const WireHeader& header) {
  const keys::Chunk& chunk = table_->chunks()[header.chunk];  // checked by ResolveSlot
  bool done = false;
  {
    std::lock_guard lock(mu_);
    ++landed_[header.chunk];
    TensorState& state = tensors_[chunk.tensor];
    if (--state.pending == 0) {
      state.iteration = state.expect_iteration;
      done = true;
    }
  }
  if (done) cv_.notify_all();
  return absl::OkStatus();
}

void PsClient::Impl::OnClosed(Connection& connection, const Status& why) {
  if (closing_) return;
  RecordError(absl::UnavailableError(
      absl::StrCat("lost the data connection to phubd (", connection.peer(), "): ", why.message())));
}

Status PsClient::Impl::Close() {
  if (closed_) return absl::OkStatus();
  closed_ = true;
  closing_ = true;
  std::uint64_t iterations = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& t : tensors_) iterations = std::max(iterations, t.iteration);
  }
  if (!started_) {  // a failed Handshake: nothing to say goodbye on
    loop_.Run([&] {
      for (auto& c : connections_) c->Close(absl::CancelledError("the handshake failed"));
    });
    return absl::OkStatus();
  }
  // BYE on every data connection, then close it once the BYE is out.
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::size_t remaining = connections_.size();
  loop_.Run([&] {
    for (auto& c : connections_) {
      c->Send(WireHeader{Op::kBye, options_.rank, 0, 0, 0}, {}, [&, c](const Status&) {
        c->Close(absl::OkStatus());
        std::lock_guard lock(done_mu);
        --remaining;
        done_cv.notify_all();
      });
    }
  });
  {
    std::unique_lock lock(done_mu);
    done_cv.wait(lock, [&] { return remaining == 0; });
  }
  Status status;
  loop_.Run([&] {
    if (control_.is_open()) {
      proto::ControlMessage goodbye;
      goodbye.mutable_goodbye()->set_iterations(iterations);
      status = transport::tcp::WriteControlMessage(control_, goodbye);
      boost::system::error_code ignored;
      control_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
      control_.close(ignored);
    }
  });
  return status;
}

PsClient::PsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PsClient::~PsClient() = default;

StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(const PsClientOptions& options,
                                                      std::vector<keys::TensorSpec> tensors,
                                                      std::vector<std::span<float>> weights) {
  if (options.world_size == 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank,
                                                   " is not in 0..world_size-1 (world size ",
                                                   options.world_size, ")"));
  }
  auto impl = std::make_unique<Impl>(options, std::move(weights));
  PHUB_RETURN_IF_ERROR(impl->Handshake(std::move(tensors)));
  return std::unique_ptr<PsClient>(new PsClient(std::move(impl)));
}

Status PsClient::DeclareGradients(const std::vector<std::span<const float>>& grads) {
  return impl_->DeclareGradients(grads);
}
Status PsClient::Init() { return impl_->Init(); }
Status PsClient::Push(std::uint32_t t, std::span<const float> g) { return impl_->Push(t, g); }
Status PsClient::Wait(std::uint32_t t) { return impl_->Wait(t); }
Status PsClient::WaitAll() { return impl_->WaitAll(); }
Status PsClient::Close() { return impl_->Close(); }
const keys::KeyTable& PsClient::key_table() const { return impl_->table(); }
bool PsClient::weights_from_server() const { return impl_->weights_from_server(); }
std::uint32_t PsClient::rank() const { return impl_->rank(); }
std::uint64_t PsClient::iteration(std::uint32_t t) const { return impl_->iteration(t); }

}  // namespace phub::client
