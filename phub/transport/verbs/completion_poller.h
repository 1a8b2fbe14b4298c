// One completion queue per event loop (a server core, a client, a ring rank), shared by every
// queue pair of that loop: the core polls its own CQ and nobody else's. It is woken through a
// completion channel whose file descriptor the loop's io_context watches, so an idle core
// sleeps instead of spinning (cores are shared with other processes on small boxes; on a
// dedicated PS box busy polling would shave microseconds, see docs/design.md). Each completion
// goes to the sink (connection) of the QP it belongs to.
//
// Threading: everything runs on the loop's thread except Attach/Detach, which may be called
// from any thread (a dialing client attaches before its loop sees the QP).
#pragma once

#include <infiniband/verbs.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "phub/transport/verbs/queue_pair.h"

namespace phub::transport::verbs {

class CompletionPoller : public std::enable_shared_from_this<CompletionPoller> {
 public:
  class Sink {
   public:
    virtual ~Sink() = default;
    virtual void OnCompletion(const ibv_wc& completion) = 0;
    // The CQ or its channel failed: no completion will come again. The sink must close (its
    // peer learns through the side channel) rather than wait for ever.
    virtual void OnCompletionQueueFailed(const Status& why) = 0;
  };

  // `depth` entries (capped to the device's max_cqe); every attached QP reserves its send +
  // receive depth out of it, so the CQ can never overflow. `completion_vector`: which of the
  // device's interrupt vectors signals it (taken modulo completion_vectors()).
  static StatusOr<std::shared_ptr<CompletionPoller>> Create(const VerbsDevice& device,
                                                            boost::asio::io_context& context,
                                                            int depth = 16384,
                                                            int completion_vector = 0);
  ~CompletionPoller();
  CompletionPoller(const CompletionPoller&) = delete;
  CompletionPoller& operator=(const CompletionPoller&) = delete;

  CompletionQueue& cq() { return *cq_; }

  // Routes completions of QP `qpn` to `sink` (held weakly: a sink that is gone is skipped).
  // ResourceExhausted when `entries` more would overflow the CQ.
  Status Attach(std::uint32_t qpn, std::weak_ptr<Sink> sink, int entries);
  void Detach(std::uint32_t qpn);

  // Handles every completion there is now (also what a readable channel triggers).
  void PollNow();

 private:
  CompletionPoller(boost::asio::io_context& context, std::string device)
      : descriptor_(context), device_(std::move(device)) {}
  void Arm();
  void OnReadable(const boost::system::error_code& ec);
  // Logs once, refuses later Attach calls and closes every attached connection.
  void Fail(const Status& why);

  ibv_comp_channel* channel_ = nullptr;
  std::unique_ptr<CompletionQueue> cq_;
  boost::asio::posix::stream_descriptor descriptor_;  // a dup of channel_->fd
  std::string device_;
  int depth_ = 0;

  std::mutex mu_;
  struct Route {
    std::weak_ptr<Sink> sink;
    int entries = 0;
  };
  std::unordered_map<std::uint32_t, Route> routes_;  // guarded by mu_
  int reserved_ = 0;                                 // guarded by mu_
  Status failed_;                                    // guarded by mu_; set once by Fail
};

}  // namespace phub::transport::verbs
