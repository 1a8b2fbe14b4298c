// PsClient: a worker's connection to phubd. This header is the whole public API.
//
//   auto client = PsClient::Connect(options, {rank, world_size}, tensors, weights);
//                                          // handshake, one data connection per server core
//   client->Init();                        // everyone starts from rank 0's (or phubd's) weights
//   for each iteration:
//     for each tensor t as backward produces its gradient:  client->Push(t, grads[t]);
//     for each tensor t before forward reads it:            client->Wait(t);
//   client->Close();
//
// Push is asynchronous and zero-copy: the gradient is sent straight from the caller's buffer
// (on verbs: if the caller declared its gradient buffers, else copied once into a registered
// send buffer), and the fresh weights are received straight into the caller's weight
// buffer for that tensor (on verbs: written there by phubd's NIC; the weight buffers are
// registered at Connect).
// Wait(t) returns once every chunk of t has landed. Buffers: `weights[t]` must stay valid
// until the client is destroyed and must not be read while tensor t is in flight (between
// Push(t) and Wait(t)); `grads` must stay valid and unmodified until Wait(t) returns.
//
// Thread-safety: Push/Wait/Init/Close may be called from any thread, but one tensor is driven
// by one thread at a time. Errors (phubd gone or silent for its --liveness-timeout-ms, a job
// stalled because another worker died and did not rejoin, a refused handshake) come back as a
// Status from the next call: never as an exception, never as a hang. While another worker is
// lost and the job waits for its rejoin, Wait simply waits (phubd's heartbeats keep coming;
// its Notices are logged).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "phub/common/member_schedule.h"
#include "phub/common/membership.h"
#include "phub/kernels/lr_scaling.h"
#include "phub/common/status.h"
#include "phub/kernels/optimizer_config.h"
#include "phub/kernels/wire_options.h"
#include "phub/keys/key_table.h"
#include "phub/transport/send_window.h"
#include "phub/transport/transport.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::client {

// PsClientOptions::io_threads past this count as this many.
inline constexpr std::size_t kMaxIoThreads = 64;

// How to reach phubd and what to ask of it: the same on every worker of a job (who this worker
// is, its rank and world size, comes apart: Connect's `membership`).
struct PsClientOptions {
  std::string host = "127.0.0.1";  // phubd's control address
  std::uint16_t port = 7070;
  std::string job_token;           // must equal phubd's --token-file contents (or the job's)
  // The job this worker belongs to (a phubd may serve several: docs/operations.md "Sharing a
  // PBox"); every worker of the job gives the same. Empty: the job named "default".
  std::string job;
  // What phubd does with the job's gradients, the same on every worker: an optimizer that steps
  // the weights it sends back, or kAverage (summation mode: the "weights" that land are the mean
  // of the workers' gradients). Unset: phubd's --optimizer flags.
  std::optional<kernels::OptimizerConfig> optimizer;
  // A schedule (docs/design.md "Hyper-parameters per iteration"): the job's hyper-parameters
  // may change every iteration. Each worker then calls StepWith before each iteration's first
  // Push, and phubd steps every chunk of that iteration with those values; `optimizer` gives
  // the kind (and the first values, unused once StepWith is called). The same on every worker.
  bool per_iteration_values = false;
  int connect_timeout_ms = 30000;  // keep retrying a refused connection this long
  // phubd must answer the Hello within this, and, while the job forms (it waits for every
  // worker before the Welcome), keep saying it is there at least this often: it acknowledges
  // the Hello at once and sends a Heartbeat every quarter of it (the Hello asks for them). A
  // phubd that is stopped (SIGSTOP), hung or overloaded says nothing: Connect fails with
  // Unavailable naming its address after this long. A phubd older than this field is silent
  // until the job forms: raise this above the forming time for one (phub-worker
  // --hello-answer-timeout-ms).
  int hello_answer_timeout_ms = 10000;
  // When set, the whole Connect (connecting, the wait for the Welcome, the data connections)
  // ends by then: a caller that retries within an overall limit (phub-worker's
  // --reconnect-timeout-ms) caps each attempt by what is left of it. Unavailable when it passes.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  bool tcp_no_delay = true;        // TCP_NODELAY (off only to measure what it is worth)
  int socket_buffer_bytes = 0;     // fixed SO_SNDBUF/SO_RCVBUF; 0 = Linux autotuning
  // Threads for the data connections on TCP (docs/design.md "A worker's I/O threads"): server
  // core c's connection is served by thread c % io_threads, the first of them the thread that
  // also serves the control connection. On loopback or a fast NIC one thread copying every
  // byte both ways through the kernel bounds a fat worker (a GPU's 100 MB a step); more
  // spread it over cores. At most phubd's cores; verbs uses one (the NIC moves the bytes).
  int io_threads = 1;  // at most kMaxIoThreads are used
  // Priority scheduling of each data connection's pushes (first layers first): payload bytes
  // in flight per connection; 0 = send in the order pushed.
  std::size_t send_window_bytes = transport::kDefaultSendWindowBytes;
  // The format pushes (and, by default, the weights) travel in: kernels::WireOptions.
  kernels::WireOptions wire;
  // The RDMA device when phubd runs --transport verbs (the client follows phubd's choice);
  // `rdma.device` may list one per NIC of `nics`, comma-separated.
  transport::verbs::DeviceOptions rdma;
  // GPUDirect RDMA (docs/design.md "GPUDirect"): when set, the weight buffers and the
  // gradients given to DeclareGradients are a GPU's memory, and this exports a range of it for
  // the NIC (a dma-buf, CopyEngine::ExportDmaBuf); the data plane registers them as device
  // memory and never touches them with the CPU. Connect fails with FailedPrecondition, naming
  // --gpudirect off, where that cannot be: a compact wire (its conversions run on the CPU),
  // phubd on TCP, an RDMA device or driver without dma-buf support.
  std::function<StatusOr<transport::DeviceMemory>(std::span<std::byte>)> device_memory;
  // An elastic job (docs/design.md "Elastic jobs"): the job runs with min_workers to
  // Connect's membership.world_size workers, starting once ranks 0..start_workers-1 (0:
  // min_workers) have connected. Connect then joins a running job of that name too (Init
  // returns once its first weights, of the iteration before it joins, are in: resume_iteration()).
  // This worker's rank is the one it asked for if free, else the lowest free one (rank()); each
  // iteration's members and this worker's place among them come from MembersOf. The same on
  // every worker. 0: a job of world_size workers, fixed.
  std::uint32_t min_workers = 0;
  std::uint32_t start_workers = 0;
  // Elastic jobs: the optimizer's lr (or each iteration's StepValues lr) is the lr at
  // start_workers members, and phubd scales it with each iteration's member count
  // (kernels::ScaledLr). The same on every worker.
  kernels::LrScaling lr_scaling = kernels::LrScaling::kFixed;
  // This worker's NICs (--nics: interfaces or addresses; empty: the kernel's choice): the
  // connection to a phubd core serving phubd's NIC k leaves from NIC k % nics.size(), so a
  // worker with as many NICs as the PBox uses each one for the cores of "its" PBox NIC.
  std::vector<std::string> nics;
};

// The optimizer's state phubd holds for the job (docs/protocol.md "The optimizer's state"):
// kernels::StateArrays(kind) arrays (momentum's velocity; Adam's m, then s), each by tensor,
// each tensor's elements in order; and the optimizer's steps so far (Adam's t).
struct OptimizerState {
  std::uint64_t steps = 0;
  std::vector<std::vector<std::vector<float>>> arrays;  // [array][tensor][element]
};

class PsClient {
 public:
  // Connects as rank `membership.rank` of `membership.world_size`, sends the Hello and waits
  // for the Welcome (phubd answers once all world_size workers have joined), then opens one
  // data connection per server core.
  // `weights[t]` is tensor t's weight buffer (tensors[t].elements floats).
  // Errors: InvalidArgument for bad arguments or a refused Hello (the message carries phubd's
  // reason and fix), Unavailable when phubd cannot be reached.
  static StatusOr<std::unique_ptr<PsClient>> Connect(const PsClientOptions& options,
                                                     Membership membership,
                                                     std::vector<keys::TensorSpec> tensors,
                                                     std::vector<std::span<float>> weights);
  ~PsClient();  // Close()s if not closed

  // Optional: the buffers Push(t, ...) will always send from (one per tensor, its size, valid
  // until the client is destroyed). On verbs they are registered with the NIC once and pushes
  // go out without a copy; on TCP nothing changes. Call before the first Push.
  Status DeclareGradients(const std::vector<std::span<const float>>& grads);

  // Rank 0 sends its weights as the initial weights (unless phubd loaded them from a file);
  // every rank then waits until the initial weights have landed in its buffers. Blocks.
  // In a resumed job (resume_iteration() below) nobody sends: the weights of the iteration to
  // resume at land instead.
  Status Init();

  // Starts pushing tensor t's gradient. Does not block. REQUIRES: Init() returned OK and the
  // previous Push(t) was waited for.
  Status Push(std::uint32_t tensor, std::span<const float> grads);
  // PsClientOptions::per_iteration_values: the values phubd steps this worker's next iteration
  // with (the iteration its next Push starts). Every rank must give the same values for an
  // iteration (else phubd stalls the job, naming each rank's values); a Push of an iteration
  // without them fails with FailedPrecondition. Does not block. InvalidArgument for values the
  // job's optimizer refuses (kernels::ValidateStepValues), FailedPrecondition without
  // per_iteration_values or when called twice for one iteration. In an elastic job only the
  // members of the iteration give its values (the others' are refused and their connection
  // closed): a joiner calls it after Init, for its first iteration, resume_iteration() + 1.
  Status StepWith(const kernels::StepValues& values);
  // Blocks until the weights that answer the last Push(t) (or Init) are in weights[t].
  Status Wait(std::uint32_t tensor);
  Status WaitAll();

  // The optimizer's state, from phubd (blocks; at most PsClient's state timeout, 120 s). Ask
  // between an iteration's last Wait and the next Push: every chunk has then stepped the same
  // iterations (else FailedPrecondition saying so). FailedPrecondition in summation mode.
  StatusOr<OptimizerState> FetchOptimizerState();
  // Starts the job's optimizer from `state`, on every rank, after Init and before the first
  // Push: rank 0 sends its arrays (shaped as FetchOptimizerState's, for the job's optimizer),
  // every rank gives `state.steps` (the same). Blocks until phubd has restored it on every core
  // (or refused: FailedPrecondition naming why, nothing restored, the job goes on as it was).
  // The job then steps as if `state.steps` steps came before its first: Adam's bias correction
  // goes on from there.
  Status RestoreOptimizerState(const OptimizerState& state);

  // Elastic jobs: who the members of `iteration` are and this worker's place among them (its
  // index and their count shard that iteration's data; member_iterations_before is the job's
  // batches so far). Known for every iteration this worker may begin: phubd tells every member
  // a change before any chunk completes the iteration before it, so once this worker has pushed
  // iteration - 1, this waits until weights of iteration - 1 (any chunk's) have landed. In a fixed job: rank, world
  // size, (iteration - 1) x world size. `member` false: this worker left before `iteration`
  // (RequestLeave) and must not push it: WaitAll, then Close.
  IterationMembers MembersOf(std::uint64_t iteration) const;
  // Elastic jobs: asks phubd to let this worker leave at the next iteration boundary (a
  // scheduler's SIGTERM). Does not block; MembersOf says from which iteration it is no longer
  // a member. FailedPrecondition in a fixed job.
  Status RequestLeave();
  bool elastic() const;

  // Leaves the job cleanly (BYE on every data connection, Goodbye on the control connection)
  // and closes. Queued pushes go out ahead of the BYE, not lost to the close (Finish).
  // Bounded: a phubd taking no BYE within its --liveness-timeout-ms (stopped, hung) has them
  // closed, with a warning; the Goodbye gets 5 s more. Idempotent. Then Init, Push, Wait and
  // WaitAll return FailedPrecondition, a Wait already blocked on another thread included:
  // weights still in flight never arrive.
  Status Close();
  // Closes without leaving the job: no BYE, no Goodbye, so phubd takes this worker as lost
  // (a crash), as it would a killed process. For a worker that is stopped (torchrun's SIGTERM
  // at a restart) rather than done: in an elastic job a Goodbye from every member ends the job,
  // a loss of every member holds it for the restarted ones (--rejoin-timeout-ms); in a fixed job
  // the rank may rejoin. Idempotent, and Close() after it does nothing.
  Status Abandon();

  const keys::KeyTable& key_table() const;
  bool weights_from_server() const;
  // phubd resumed the job (or this worker's rank) from where it was: Init sends nothing, it
  // receives the weights of resume_iteration().
  bool resumed() const;
  std::uint32_t rank() const;
  // Recovery (docs/design.md "Recovery"): 0 in a fresh job. In a job this worker rejoins, or
  // that phubd resumed from a checkpoint, the iteration Init's weights are of: the caller's
  // next Push is iteration resume_iteration() + 1, and its data must be that iteration's.
  std::uint64_t resume_iteration() const;
  // PsClientOptions::per_iteration_values: the values phubd stepped iteration
  // resume_iteration() with, in a job this worker rejoined or that phubd resumed (a schedule
  // carries on from them); nullopt in a fresh job or where phubd does not know them.
  std::optional<kernels::StepValues> resume_values() const;
  // Number of completed pushes of tensor t.
  std::uint64_t iteration(std::uint32_t tensor) const;

  // Defined in ps_client_impl.h only: nobody outside phub/client can make one, so this
  // constructor is for Connect and detail::ConnectInRacks (detail/rack_role.h).
  class Impl;
  explicit PsClient(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace phub::client
