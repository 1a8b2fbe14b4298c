// PsClient's implementation, shared by its two halves: ps_client.cc (joining the job, the
// transport and its connections, leaving) and ps_client_data_path.cc (pushes, the weights
// that answer them, errors). Not part of the public API (ps_client.h).
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "phub/client/detail/rack_role.h"
#include "phub/client/ps_client.h"
#include "phub/common/aligned_buffer.h"
#include "phub/common/first_error.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/send_scheduler.h"
#include "phub/transport/transport.h"
#include "phub/transport/transport_kind.h"
#include "proto/phub.pb.h"

namespace phub::client {

using transport::Connection;
using transport::Op;
using transport::WireHeader;

// The optimizer's state being fetched or restored by a PsClient (one at a time;
// ps_client_state.cc): pieces by [array][chunk] as they land, and phubd's StateEnd once it came.
// (At namespace scope: clang cannot default-construct a nested class with member initializers
// inside std::optional.)
struct StateExchange {
  bool fetching = false;
  std::vector<std::vector<std::vector<float>>> pieces;  // [array][chunk]
  // Where the last piece ended: (chunk, array, offset), whether any came, whether that array
  // is unfinished (mid), and the arrays per chunk once the second chunk began (0: not yet).
  std::uint32_t chunk = 0, array = 0, offset = 0, arrays = 0;
  bool any = false, mid = false;
  bool ended = false;
  std::uint64_t steps = 0;
  std::string error;
};

// All network I/O runs on one event-loop thread; the caller's threads only post work to it and
// wait on `cv_` for tensors to complete.
class PsClient::Impl final : public transport::ConnectionHandler {
 public:
  Impl(PsClientOptions options, Membership membership, detail::RackRole role,
       std::vector<std::span<float>> weights)
      : options_(std::move(options)),
        membership_(membership),
        role_(role),
        loop_(absl::StrCat("client ", membership_.rank), /*pin_core=*/-1),
        control_(loop_.context()),
        weights_(std::move(weights)),
        error_(mu_, cv_) {}

  ~Impl() override {
    (void)Close();
    // Connections and the transports (verbs: its CQ) are their loop thread's.
    for (std::size_t k = io_loops_.size(); k > 0; --k) {
      io_loops_[k - 1]->Run([this, k] { ReleaseLoop(k); });
    }
    loop_.Run([this] {
      ReleaseLoop(0);
      senders_.clear();
      connections_.clear();
      transports_.clear();
      heartbeat_timer_.reset();
    });
  }

  Status Handshake(std::vector<keys::TensorSpec> tensors);
  Status DeclareGradients(const std::vector<std::span<const float>>& grads);
  Status Init();
  Status Push(std::uint32_t tensor, std::span<const float> grads);
  Status StepWith(const kernels::StepValues& values);
  StatusOr<OptimizerState> FetchOptimizerState();
  Status RestoreOptimizerState(const OptimizerState& state);
  Status Wait(std::uint32_t tensor);
  Status WaitAll();
  Status Close(bool goodbye = true);  // Abandon: goodbye false
  // Elastic jobs (ps_client_membership.cc).
  IterationMembers MembersOf(std::uint64_t iteration) const;
  Status RequestLeave();
  bool elastic() const { return options_.min_workers > 0; }

  const keys::KeyTable& table() const { return *table_; }
  bool weights_from_server() const { return weights_from_server_; }
  std::uint32_t rank() const { return membership_.rank; }
  bool resumed() const { return resumed_; }
  // A joiner's is set by its first Membership on the loop thread (ps_client_membership.cc).
  std::uint64_t resume_iteration() const {
    std::lock_guard lock(mu_);
    return resume_iteration_;
  }
  std::optional<kernels::StepValues> resume_values() const { return resume_values_; }
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
  // The data plane's event loops: 0 is loop_ (the control connection's too), k > 0
  // io_loops_[k - 1] (PsClientOptions::io_threads). Server core c's connection is loop c % n's.
  std::size_t loop_count() const { return 1 + io_loops_.size(); }
  transport::EventLoop& data_loop(std::size_t k) { return k == 0 ? loop_ : *io_loops_[k - 1]; }
  std::size_t loop_of_core(std::uint32_t core) const { return core % loop_count(); }
  // Runs fn(k) on every data loop k, waiting for each.
  void RunOnEachLoop(const std::function<void(std::size_t)>& fn);
  // On loop k's thread: drops its connections, their senders and its transports.
  void ReleaseLoop(std::size_t k);
  // Posts each loop the sends of `tensor`'s chunks whose core it serves (SendChunks).
  void PostChunks(Op op, std::uint32_t tensor, std::span<const std::byte> data,
                  std::size_t element_bytes, std::uint64_t iteration);
  // Binds phubd's transport on the data loops (io_threads of them on TCP, at most `cores`).
  Status OpenTransport(transport::TransportKind kind, std::size_t cores);
  // With options_.device_memory, what cannot carry device memory is refused before connecting
  // (a compact wire: its conversions run on the CPU).
  Status CheckDeviceMemory() const;
  // Registers `region` of the caller's memory with `transport`: as device memory with
  // options_.device_memory (GPUDirect), else as host memory. On the loop's thread.
  Status RegisterWith(transport::Transport& transport, std::span<std::byte> region);
  void WatchControl();
  // The optimizer's state on the control connection (ps_client_state.cc), on the loop thread:
  // a StatePiece or StateEnd phubd sent, checked against the key table and the exchange in
  // progress (any other is a protocol error). RecordError for what cannot be.
  void OnStateMessage(const proto::ControlMessage& message);
  // A Membership phubd sent (elastic jobs; ps_client_membership.cc), on the loop thread:
  // checked, kept (a joiner's first sets the iteration its weights are of), acknowledged.
  // RecordError for one that cannot be.
  void OnMembership(const proto::Membership& membership);
  // The Welcome's (or the first) Membership into schedule_; REQUIRES mu_ held.
  void KeepMembership(const proto::Membership& membership);
  // Waits (the caller's thread) for the exchange in progress to end; its StateEnd's error, or
  // the client's, or DeadlineExceeded.
  Status AwaitStateEnd(std::unique_lock<std::mutex>& lock);
  // Control connection writes (Heartbeats, the Goodbye): queued, one asynchronous write at a
  // time. `done` runs once the frame is out (or failed).
  void SendControl(const proto::ControlMessage& message, std::function<void()> done = {});
  void WriteControlQueued();
  // Every liveness/4: a Heartbeat out, and phubd's silence checked (ps_client.cc).
  void ArmHeartbeat();
  // Sends the chunks of `tensor` that loop `k` serves from `data` (the whole tensor,
  // `element_bytes` an element). On loop k's thread.
  void SendChunks(Op op, std::uint32_t tensor, std::span<const std::byte> data,
                  std::size_t element_bytes, std::uint64_t iteration, std::size_t k);
  // The compact wire (PsClientOptions::wire): pushes, and maybe weights, in bf16/fp16.
  bool compact_pushes() const { return options_.wire.compact(); }
  bool compact_weights() const { return compact_pushes() && options_.wire.weights; }
  // Where chunk `chunk`'s weights sent as `op` land: the weight buffer itself (WEIGHTS in
  // float32; with compact weights, the whole first weights, INIT), or the compact staging of a
  // change (WEIGHTS with compact weights). docs/design.md "The compact wire".
  std::span<std::byte> WeightsLanding(const keys::Chunk& chunk, Op op);
  // The op the weights of `iteration` come as: with compact weights the first (the resume
  // point) come whole as INIT and later ones as changes; else always WEIGHTS.
  Op WeightsOp(std::uint64_t iteration) const {
    return compact_weights() && iteration == resume_iteration_ ? Op::kInit : Op::kWeights;
  }

  const PsClientOptions options_;
  Membership membership_;  // its rank may be phubd's choice in an elastic job (Handshake)
  const detail::RackRole role_;  // racks of racks; {} in a flat job
  transport::EventLoop loop_;
  boost::asio::ip::tcp::socket control_;
  std::optional<keys::KeyTable> table_;  // set by Handshake
  std::vector<std::span<float>> weights_;
  // By tensor, with a compact wire: the pushed gradient converted (sent from here), and the
  // weights' changes as they arrive (added into weights_ on arrival). Fixed after Handshake.
  std::vector<AlignedBuffer> push_wire_, weights_wire_;
  // By tensor, with a compact wire and error feedback: what rounding left out of its pushes so
  // far (float32, zero at first), added to its next push. Only the caller's thread touches it.
  std::vector<AlignedBuffer> push_residual_;

  // The data loops past loop_ (io_threads - 1 on TCP, made by OpenTransport).
  std::vector<std::unique_ptr<transport::EventLoop>> io_loops_;
  // phubd's choice, by data loop (each bound to it): one per RDMA device of this worker's NICs
  // (TCP: one), and by NIC which of them it uses and the address it dials from (empty: the
  // kernel's choice).
  std::vector<std::vector<std::unique_ptr<transport::Transport>>> transports_;  // [loop][device]
  std::vector<std::size_t> transport_of_nic_;
  std::vector<std::string> nic_address_;
  std::vector<std::shared_ptr<Connection>> connections_;  // by server core, each on its loop
  // By server core, beside connections_: every message goes out through these, pushes first
  // layers first (PsClientOptions::send_window_bytes). Each is its connection's loop's.
  std::vector<std::shared_ptr<transport::SendScheduler>> senders_;
  bool weights_from_server_ = false;
  bool resumed_ = false;                 // the Welcome's: no INIT, weights of resume_iteration_
  // Written on the loop thread (Handshake before it starts, a joiner's first Membership under
  // mu_); read there, and elsewhere under mu_ (resume_iteration()).
  std::uint64_t resume_iteration_ = 0;
  std::optional<kernels::StepValues> resume_values_;  // the Welcome's (per_iteration_values)
  int liveness_timeout_ms_ = 0;          // phubd's; 0: no heartbeats
  // On the loop thread: the control connection's writes, and when phubd was last heard.
  std::deque<std::pair<std::shared_ptr<std::string>, std::function<void()>>> control_outbox_;
  bool control_writing_ = false;
  std::chrono::steady_clock::time_point phubd_heard_{};
  std::unique_ptr<boost::asio::steady_timer> heartbeat_timer_;
  std::uint64_t session_ = 0;
  std::atomic<bool> closing_{false};
  bool closed_ = false;
  bool started_ = false;  // the data connections were started (Handshake completed)

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // mutable: MembersOf (const) waits on it
  std::vector<TensorState> tensors_;  // guarded by mu_
  std::vector<std::uint64_t> landed_; // guarded by mu_; per chunk: weights received so far
  // per_iteration_values, guarded by mu_: the last iteration StepWith gave values for, and the
  // last iteration a Push started (a Push of an iteration past values_iteration_ is refused).
  std::uint64_t values_iteration_ = 0;
  std::uint64_t pushed_iteration_ = 0;
  std::optional<StateExchange> state_exchange_;  // guarded by mu_
  // Elastic jobs, guarded by mu_: every iteration's members as phubd announced them, and
  // whether this worker still awaits its first Membership (it joined a running job).
  MemberSchedule schedule_;
  bool joining_ = false;
  // The latest iteration whose weights of any chunk have landed (guarded by mu_): once one
  // has, every change from the iteration after it on is known here (MembersOf waits for it).
  std::uint64_t weights_seen_ = 0;
  FirstError error_;                  // status() guarded by mu_
};

}  // namespace phub::client
