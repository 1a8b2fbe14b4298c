#include "phub/server/control_plane.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "phub/common/version.h"
#include "phub/server/hello_check.h"
#include "phub/server/initial_weights.h"
#include "phub/transport/tcp/control_channel.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;
using transport::tcp::AsyncReadControlMessage;
using transport::tcp::FrameControlMessage;

namespace {

std::vector<keys::TensorSpec> TensorsOf(const proto::Hello& hello) {
  std::vector<keys::TensorSpec> tensors;
  tensors.reserve(hello.tensors_size());
  for (const auto& t : hello.tensors()) tensors.push_back({t.name(), t.elements()});
  return tensors;
}

}  // namespace

ControlPlane::ControlPlane(asio::io_context& context, const ServerOptions& options,
                           std::vector<std::unique_ptr<ServerCore>>& cores,
                           std::function<void()> on_job_end)
    : context_(context), options_(options), cores_(cores), on_job_end_(std::move(on_job_end)) {
  members_.resize(options_.world_size);
}

ControlPlane::~ControlPlane() { *alive_ = false; }

Status ControlPlane::Start() {
  PHUB_ASSIGN_OR_RETURN(listener_, transport::tcp::TcpListener::Bind(
                                       context_, options_.listen_address, options_.port,
                                       options_.tcp));
  listener_->Start([this](asio::ip::tcp::socket socket) { OnAccept(std::move(socket)); });
  return absl::OkStatus();
}

void ControlPlane::Stop() {
  if (listener_) listener_->Stop();
  auto sessions = sessions_;
  for (auto& [id, session] : sessions) {
    boost::system::error_code ignored;
    session->socket.close(ignored);
  }
  if (running_) EndJob();
}

void ControlPlane::OnAccept(asio::ip::tcp::socket socket) {
  auto session = std::make_shared<Session>(std::move(socket));
  session->id = next_session_id_++;
  sessions_[session->id] = session;
  ReadNext(session);
}

void ControlPlane::ReadNext(const SessionPtr& session) {
  AsyncReadControlMessage(session->socket,
                          [this, session, alive = alive_](StatusOr<proto::ControlMessage> m) {
                            if (!*alive) return;
                            if (!m.ok()) return OnSessionClosed(session, m.status());
                            OnMessage(session, std::move(*m));
                          });
}

void ControlPlane::OnMessage(const SessionPtr& session, proto::ControlMessage message) {
  if (message.has_hello() && session->rank < 0) return OnHello(session, message.hello());
  if (message.has_goodbye() && session->in_job) {
    session->said_goodbye = true;
    spdlog::info("rank {} says goodbye after {} iterations", session->rank,
                 message.goodbye().iterations());
    return ReadNext(session);  // wait for it to close
  }
  Refuse(session, MakeError(proto::Error::BAD_REQUEST,
                            "unexpected control message (expected Hello first, then Goodbye)",
                            "connect with PsClient; do not reuse a control connection"));
}

void ControlPlane::OnHello(const SessionPtr& session, const proto::Hello& hello) {
  if (running_) {
    return Refuse(session,
                  MakeError(proto::Error::BAD_REQUEST,
                            absl::StrCat("a job of ", options_.world_size,
                                         " workers is running on this phubd"),
                            "wait until it ends, or start another phubd on another --port"));
  }
  const proto::Hello* first = nullptr;
  std::vector<bool> taken(options_.world_size, false);
  for (std::uint32_t r = 0; r < options_.world_size; ++r) {
    if (members_[r]) {
      taken[r] = true;
      first = &members_[r]->hello;
    }
  }
  if (auto error = CheckHello(hello, options_, first, taken)) {
    boost::system::error_code ec;
    auto peer = session->socket.remote_endpoint(ec);
    spdlog::warn("refusing a worker from {}: {}", ec ? "?" : peer.address().to_string(),
                 error->message());
    return Refuse(session, *error);
  }
  session->rank = hello.rank();
  session->hello = hello;
  members_[hello.rank()] = session;
  ++joined_;
  spdlog::info("rank {} joined ({}/{})", hello.rank(), joined_, options_.world_size);
  ReadNext(session);  // notices a worker that leaves while the job forms
  if (joined_ == options_.world_size) StartJob();
}

void ControlPlane::Send(const SessionPtr& session, const proto::ControlMessage& message,
                        bool close_after) {
  auto framed = FrameControlMessage(message);
  asio::async_write(session->socket, asio::buffer(*framed),
                    [session, framed, close_after](const boost::system::error_code&, std::size_t) {
                      if (close_after) {
                        boost::system::error_code ignored;
                        session->socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
                        session->socket.close(ignored);
                      }
                    });
}

void ControlPlane::Refuse(const SessionPtr& session, const proto::Error& error) {
  proto::ControlMessage message;
  *message.mutable_error() = error;
  sessions_.erase(session->id);
  Send(session, message, /*close_after=*/true);
}

void ControlPlane::FailForming(const proto::Error& error) {
  spdlog::error("cannot start the job: {} ({})", error.message(), error.fix());
  for (auto& member : members_) {
    if (!member) continue;
    member->rank = -1;
    Refuse(member, error);
    member.reset();
  }
  joined_ = 0;
}

void ControlPlane::StartJob() {
  auto table = keys::KeyTable::Build(TensorsOf(members_[0]->hello), options_.chunk_bytes,
                                     static_cast<std::uint32_t>(cores_.size()));
  if (!table.ok()) {
    return FailForming(MakeError(proto::Error::BAD_REQUEST, std::string(table.status().message()),
                                 "fix phubd's --chunk-bytes or the model"));
  }
  std::vector<float> initial_weights;
  if (!options_.initial_weights_path.empty()) {
    auto weights = LoadInitialWeights(options_.initial_weights_path, *table);
    if (!weights.ok()) {
      return FailForming(MakeError(proto::Error::BAD_INITIAL_WEIGHTS,
                                   std::string(weights.status().message()),
                                   "give phubd an --init-weights file made for this model"));
    }
    initial_weights = std::move(*weights);
  }
  auto job = std::make_shared<JobSpec>(JobSpec{
      .table = std::move(*table),
      .world_size = options_.world_size,
      .optimizer = options_.optimizer,
      .session = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32),
      .initial_weights = std::move(initial_weights)});
  std::shared_ptr<const JobSpec> spec = job;
  auto sink = [this, alive = alive_](ShardEvent event) {
    asio::post(context_, [this, alive, event = std::move(event)] {
      if (*alive) OnShardEvent(event);
    });
  };
  for (auto& core : cores_) {
    if (Status s = core->InstallShard(spec, sink); !s.ok()) {
      for (auto& installed : cores_) installed->RemoveShard();
      return FailForming(MakeError(proto::Error::BAD_REQUEST, std::string(s.message()),
                                   "see phubd's log; on verbs check the memlock limit (ulimit -l)"));
    }
  }

  proto::ControlMessage message;
  proto::Welcome& welcome = *message.mutable_welcome();
  welcome.set_protocol_version(kProtocolVersion);
  welcome.set_chunk_bytes(spec->table.chunk_bytes());
  for (auto owner : spec->table.owners()) welcome.add_chunk_owner(owner);
  welcome.set_session(spec->session);
  welcome.set_weights_from_server(!spec->initial_weights.empty());
  welcome.set_optimizer(kernels::Describe(options_.optimizer));
  welcome.set_transport(transport::TransportName(options_.transport));
  running_ = true;
  stalled_ = false;
  live_members_ = options_.world_size;
  ++jobs_started_;
  for (auto& member : members_) {
    member->in_job = true;
    // Workers reach the data ports at the address they reached the control port on.
    boost::system::error_code ec;
    std::string host = member->socket.local_endpoint(ec).address().to_string();
    welcome.clear_cores();
    for (auto& core : cores_) {
      proto::CoreEndpoint& endpoint = *welcome.add_cores();
      endpoint.set_server(0);
      endpoint.set_core(core->index());
      endpoint.set_host(host);
      endpoint.set_port(core->port());
    }
    Send(member, message, /*close_after=*/false);
  }
  spdlog::info("job {} started: {} workers, {} tensors, {} chunks of {} bytes over {} cores, {}",
               jobs_started_, options_.world_size, spec->table.tensors().size(),
               spec->table.chunks().size(), spec->table.chunk_bytes(), cores_.size(),
               welcome.optimizer());
}

void ControlPlane::OnSessionClosed(const SessionPtr& session, const Status& why) {
  sessions_.erase(session->id);
  if (session->rank < 0) return;  // never joined, or already refused
  const auto rank = static_cast<std::uint32_t>(session->rank);
  if (!session->in_job) {
    spdlog::warn("rank {} left before the job started: {}", rank, why.message());
    members_[rank].reset();
    --joined_;
    return;
  }
  if (!session->said_goodbye) {
    Stall(absl::StrCat("rank ", rank, " disconnected without goodbye (", why.message(), ")"));
  }
  members_[rank].reset();
  if (--live_members_ == 0) EndJob();
}

void ControlPlane::OnShardEvent(const ShardEvent& event) {
  if (event.kind != ShardEvent::Kind::kWorkerLost || !running_) return;
  auto& member = members_[event.rank];
  if (member && member->said_goodbye) return;
  Stall(absl::StrCat("core ", event.core, " lost rank ", event.rank, ": ", event.reason));
}

void ControlPlane::Stall(const std::string& reason) {
  if (stalled_) return;
  stalled_ = true;
  spdlog::error("job {} stalled: {}; the other workers are told, phubd keeps running",
                jobs_started_, reason);
  proto::ControlMessage message;
  *message.mutable_error() =
      MakeError(proto::Error::JOB_STALLED, absl::StrCat("job stalled: ", reason),
                "restart the job (all workers); phubd is still up");
  for (auto& member : members_) {
    if (member) Send(member, message, /*close_after=*/false);
  }
}

void ControlPlane::EndJob() {
  ShardStats total;
  for (auto& core : cores_) {
    ShardStats s = core->RemoveShard();
    total.aggregations += s.aggregations;
    total.bytes_in += s.bytes_in;
    total.bytes_out += s.bytes_out;
  }
  spdlog::info("job {} ended{}: {} chunk aggregations, {:.1f} MiB in, {:.1f} MiB out",
               jobs_started_, stalled_ ? " (stalled)" : "", total.aggregations,
               total.bytes_in / 1048576.0, total.bytes_out / 1048576.0);
  running_ = false;
  stalled_ = false;
  joined_ = 0;
  for (auto& member : members_) member.reset();
  if (on_job_end_) on_job_end_();
}

}  // namespace phub::server
