#include "phub/client/ps_client.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "absl/strings/str_cat.h"
#include "phub/client/join_job.h"
#include "phub/client/ps_client_impl.h"
#include "phub/common/bounded_text.h"
#include "phub/common/membership.h"
#include "phub/transport/control_channel.h"
#include "spdlog/spdlog.h"

// PsClient's set-up: the handshake (join_job.h), one connection per server core (the transport
// and its memory: ps_client_memory.cc), the control connection's heartbeats; the public calls.
// Leaving the job (BYE, Goodbye): ps_client_leave.cc.

namespace phub::client {

namespace asio = boost::asio;

namespace {
// phubd sends a worker only WEIGHTS (into the weight buffers, landing zones): anything else
// is header-sized. Pushes may come from undeclared gradient memory, which a transport may
// have to copy: room for several chunks in flight per core.
transport::ConnectionSizing ClientSizing(std::uint64_t chunk_bytes) {
  transport::ConnectionSizing sizing;
  sizing.max_send_bytes = chunk_bytes;  // pushes and INIT: at most one chunk
  sizing.max_unplaced_bytes = 1024;
  sizing.send_copies = 16;
  return sizing;
}
}  // namespace

Status PsClient::Impl::Handshake(std::vector<keys::TensorSpec> tensors) {
  PHUB_RETURN_IF_ERROR(CheckDeviceMemory());
  if (options_.per_iteration_values && !options_.optimizer) {
    return absl::InvalidArgumentError(
        "per_iteration_values needs PsClientOptions::optimizer: the values are its kind's");
  }
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
  PHUB_ASSIGN_OR_RETURN(JoinedJob job, JoinJob(loop_.context(), options_, membership_, role_,
                                               std::move(tensors), control_));
  table_ = std::move(job.table);
  membership_.rank = job.rank;  // an elastic job's slot, phubd's choice
  {
    std::lock_guard lock(mu_);
    joining_ = job.joining;
    if (job.membership) KeepMembership(*job.membership);
  }
  weights_from_server_ = job.weights_from_server;
  session_ = job.session;
  resumed_ = job.resumed;
  resume_iteration_ = job.resumed ? job.resume_iteration : 0;
  resume_values_ = job.resume_values;
  values_iteration_ = pushed_iteration_ = resume_iteration_;
  liveness_timeout_ms_ = job.liveness_timeout_ms;

  // Every tensor awaits its first weights (iteration 0, or where the job resumes), which phubd
  // sends once all workers attached (resumed: once this one attached).
  tensors_.assign(table_->tensors().size(),
                  TensorState{resume_iteration_, resume_iteration_, 0});
  landed_.assign(table_->chunks().size(), resume_iteration_);
  for (std::uint32_t t = 0; t < tensors_.size(); ++t) {
    tensors_[t].pending = static_cast<std::uint32_t>(table_->chunks_of_tensor(t).size());
    // A joiner learns the iteration of its first weights from its first Membership: nothing
    // may land before (OnMembership sets it).
    if (job.joining) tensors_[t].expect_iteration = UINT64_MAX;
  }
  if (job.joining) landed_.assign(table_->chunks().size(), UINT64_MAX);

  if (compact_pushes()) {
    // Staging for the compact wire, sized once per tensor (WireBytes per element, rounded up
    // to whole floats by AlignedBuffer).
    const std::size_t eb = kernels::WireBytes(options_.wire.format);
    for (const keys::TensorSpec& t : table_->tensors()) {
      const std::size_t floats = (t.elements * eb + sizeof(float) - 1) / sizeof(float);
      push_wire_.emplace_back(floats);
      if (options_.wire.error_feedback) push_residual_.emplace_back(t.elements);
      if (compact_weights()) weights_wire_.emplace_back(floats);
    }
  }
  PHUB_RETURN_IF_ERROR(OpenTransport(job.transport, job.cores.size()));
  for (std::uint32_t core = 0; core < job.cores.size(); ++core) {
    const CoreAddress& address = job.cores[core];
    const std::size_t nic = address.nic % nic_address_.size();
    transport::DialRequest request{address.host, address.port,
                                   WithinDeadline(options_, options_.connect_timeout_ms),
                                   WireHeader{Op::kAttach, membership_.rank, core, session_, 0},
                                   ClientSizing(table_->chunk_bytes()), nic_address_[nic]};
    auto connection = transports_[loop_of_core(core)][transport_of_nic_[nic]]->Dial(request, this);
    if (!connection.ok()) {
      return Status(connection.status().code(),
                    absl::StrCat("attaching to phubd core ", core, " at ", address.host, ":",
                                 address.port, ": ", connection.status().message()));
    }
    (*connection)->set_tag(core);  // ResolveSlot checks a chunk came from its owner
    senders_.push_back(transport::SendScheduler::Create(*connection, options_.send_window_bytes));
    connections_.push_back(*std::move(connection));
  }
  RunOnEachLoop([this](std::size_t k) {
    for (std::uint32_t core = 0; core < connections_.size(); ++core) {
      if (loop_of_core(core) == k) connections_[core]->Start();
    }
  });
  loop_.Run([this] {
    phubd_heard_ = std::chrono::steady_clock::now();
    WatchControl();
    ArmHeartbeat();
    started_ = true;
  });
  spdlog::debug("rank {}: attached to {} server cores, {} chunks, {} I/O threads",
                membership_.rank, connections_.size(), table_->chunks().size(), loop_count());
  return absl::OkStatus();
}

StatusOr<std::vector<transport::LandingZone>> PsClient::Impl::LandingZones(
    const Connection&, const WireHeader*) {
  std::vector<transport::LandingZone> zones;
  for (const keys::Chunk& chunk : table_->chunks()) {
    // With compact weights: the first whole (INIT), the later ones as changes.
    const Op first = WeightsOp(resume_iteration_);
    zones.push_back(
        {first, membership_.rank, chunk.id, resume_iteration_, WeightsLanding(chunk, first)});
    if (first != Op::kWeights) {
      zones.push_back({Op::kWeights, membership_.rank, chunk.id, resume_iteration_ + 1,
                       WeightsLanding(chunk, Op::kWeights)});
    }
  }
  return zones;
}
void PsClient::Impl::WatchControl() {
  transport::AsyncReadControlMessage(control_, [this](StatusOr<proto::ControlMessage> m) {
    if (closing_) return;
    if (!m.ok()) {
      return RecordError(absl::UnavailableError(
          absl::StrCat("lost the control connection to phubd: ", m.status().message())));
    }
    phubd_heard_ = std::chrono::steady_clock::now();
    if (m->has_error()) {
      // A stalled job cannot be rejoined: Aborted, so that no one reconnects to it. Anything
      // else (this worker dropped as silent, phubd stopping) may pass: Unavailable.
      const std::string text = absl::StrCat("phubd: ", m->error().message(), "; ", m->error().fix());
      RecordError(m->error().code() == proto::Error::JOB_STALLED ? absl::AbortedError(text)
                                                                 : absl::UnavailableError(text));
    }
    if (m->has_notice()) {
      spdlog::warn("rank {}: phubd: {}", membership_.rank, Bounded(m->notice().text(), 400));
    }
    if (m->has_state_piece() || m->has_state_end()) OnStateMessage(*m);
    if (m->has_membership()) OnMembership(m->membership());
    WatchControl();
  });
}

void PsClient::Impl::SendControl(const proto::ControlMessage& message,
                                 std::function<void()> done) {
  control_outbox_.emplace_back(transport::FrameControlMessage(message), std::move(done));
  if (!control_writing_) WriteControlQueued();
}

void PsClient::Impl::WriteControlQueued() {
  if (control_outbox_.empty() || !control_.is_open()) {
    control_writing_ = false;
    for (auto& [frame, done] : control_outbox_) {
      if (done) done();
    }
    control_outbox_.clear();
    return;
  }
  control_writing_ = true;
  auto frame = control_outbox_.front().first;
  asio::async_write(control_, asio::buffer(*frame),
                    [this, frame](const boost::system::error_code& ec, std::size_t) {
                      auto done = std::move(control_outbox_.front().second);
                      control_outbox_.pop_front();
                      if (done) done();
                      if (ec) {  // the read side reports phubd's end
                        boost::system::error_code ignored;
                        control_.close(ignored);
                      }
                      WriteControlQueued();
                    });
}

void PsClient::Impl::ArmHeartbeat() {
  if (liveness_timeout_ms_ <= 0 || closing_) return;
  if (!heartbeat_timer_) heartbeat_timer_ = std::make_unique<asio::steady_timer>(loop_.context());
  heartbeat_timer_->expires_after(std::chrono::milliseconds(std::max(1, liveness_timeout_ms_ / 4)));
  heartbeat_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || closing_) return;
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - phubd_heard_);
    if (silent.count() > liveness_timeout_ms_) {
      // phubd stopped, hung or the link is cut: fail every wait now rather than hang.
      return RecordError(absl::UnavailableError(absl::StrCat(
          "nothing heard from phubd for ", silent.count(), " ms (its --liveness-timeout-ms is ",
          liveness_timeout_ms_, "): phubd is stopped, hung, or the link is cut")));
    }
    proto::ControlMessage heartbeat;
    std::uint64_t done = 0;
    {
      std::lock_guard lock(mu_);
      for (const auto& t : tensors_) done = std::max(done, t.iteration);
    }
    heartbeat.mutable_heartbeat()->set_iteration(done);
    SendControl(heartbeat);
    ArmHeartbeat();
  });
}
void PsClient::Impl::RunOnEachLoop(const std::function<void(std::size_t)>& fn) {
  for (std::size_t k = 0; k < loop_count(); ++k) data_loop(k).Run([&fn, k] { fn(k); });
}

void PsClient::Impl::ReleaseLoop(std::size_t k) {
  for (std::uint32_t core = 0; core < connections_.size(); ++core) {
    if (loop_of_core(core) != k) continue;
    if (core < senders_.size()) senders_[core].reset();
    connections_[core].reset();
  }
  if (k < transports_.size()) transports_[k].clear();
}

PsClient::PsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PsClient::~PsClient() = default;

StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(const PsClientOptions& options,
                                                      Membership membership,
                                                      std::vector<keys::TensorSpec> tensors,
                                                      std::vector<std::span<float>> weights) {
  return detail::ConnectInRacks(options, membership, {}, std::move(tensors), std::move(weights));
}

StatusOr<std::unique_ptr<PsClient>> detail::ConnectInRacks(const PsClientOptions& options,
                                                           Membership membership, RackRole role,
                                                           std::vector<keys::TensorSpec> tensors,
                                                           std::vector<std::span<float>> weights) {
  PHUB_RETURN_IF_ERROR(CheckMembership(membership));
  auto impl = std::make_unique<PsClient::Impl>(options, membership, role, std::move(weights));
  PHUB_RETURN_IF_ERROR(impl->Handshake(std::move(tensors)));
  return std::make_unique<PsClient>(std::move(impl));
}

Status PsClient::DeclareGradients(const std::vector<std::span<const float>>& grads) {
  return impl_->DeclareGradients(grads);
}
Status PsClient::Init() { return impl_->Init(); }
Status PsClient::Push(std::uint32_t t, std::span<const float> g) { return impl_->Push(t, g); }
Status PsClient::Wait(std::uint32_t t) { return impl_->Wait(t); }
Status PsClient::StepWith(const kernels::StepValues& values) { return impl_->StepWith(values); }
StatusOr<OptimizerState> PsClient::FetchOptimizerState() { return impl_->FetchOptimizerState(); }
Status PsClient::RestoreOptimizerState(const OptimizerState& state) {
  return impl_->RestoreOptimizerState(state);
}
Status PsClient::WaitAll() { return impl_->WaitAll(); }
Status PsClient::Close() { return impl_->Close(); }
Status PsClient::Abandon() { return impl_->Close(/*goodbye=*/false); }
const keys::KeyTable& PsClient::key_table() const { return impl_->table(); }
bool PsClient::weights_from_server() const { return impl_->weights_from_server(); }
bool PsClient::resumed() const { return impl_->resumed(); }
std::uint32_t PsClient::rank() const { return impl_->rank(); }
std::uint64_t PsClient::resume_iteration() const { return impl_->resume_iteration(); }
std::optional<kernels::StepValues> PsClient::resume_values() const {
  return impl_->resume_values();
}
std::uint64_t PsClient::iteration(std::uint32_t t) const { return impl_->iteration(t); }
IterationMembers PsClient::MembersOf(std::uint64_t iteration) const {
  return impl_->MembersOf(iteration);
}
Status PsClient::RequestLeave() { return impl_->RequestLeave(); }
bool PsClient::elastic() const { return impl_->elastic(); }

}  // namespace phub::client