#include "phub/transport/verbs/completion_poller.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "phub/transport/verbs/verbs_error.h"
#include "spdlog/spdlog.h"

namespace phub::transport::verbs {

StatusOr<std::shared_ptr<CompletionPoller>> CompletionPoller::Create(
    const VerbsDevice& device, boost::asio::io_context& context, int depth,
    int completion_vector) {
  std::shared_ptr<CompletionPoller> poller(new CompletionPoller(context, device.name()));
  poller->channel_ = ibv_create_comp_channel(device.context());
  if (poller->channel_ == nullptr) {
    return VerbsError("ibv_create_comp_channel", device.name(), errno);
  }
  // Non-blocking, so that draining the channel's events never blocks the loop.
  const int flags = fcntl(poller->channel_->fd, F_GETFL);
  if (flags < 0 || fcntl(poller->channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return VerbsError("fcntl(O_NONBLOCK) on the completion channel", device.name(), errno);
  }
  poller->depth_ = device.max_cqe() > 0 ? std::min(depth, device.max_cqe()) : depth;
  PHUB_ASSIGN_OR_RETURN(poller->cq_,
                        CompletionQueue::Create(device, poller->depth_, poller->channel_,
                                                completion_vector % device.completion_vectors()));
  if (int err = ibv_req_notify_cq(poller->cq_->get(), 0); err != 0) {
    return VerbsError("ibv_req_notify_cq", device.name(), err);
  }
  // The descriptor owns a dup, so closing it never closes the channel's own fd.
  const int fd = dup(poller->channel_->fd);
  if (fd < 0) return VerbsError("dup(completion channel fd)", device.name(), errno);
  poller->descriptor_.assign(fd);
  poller->Arm();
  return poller;
}

CompletionPoller::~CompletionPoller() {
  boost::system::error_code ignored;
  descriptor_.close(ignored);
  if (cq_) {
    // Every event taken from the channel was acknowledged in OnReadable; the CQ can go.
    cq_.reset();
  }
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
}

Status CompletionPoller::Attach(std::uint32_t qpn, std::weak_ptr<Sink> sink, int entries) {
  std::lock_guard lock(mu_);
  if (!failed_.ok()) return failed_;
  if (reserved_ + entries > depth_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "completion queue of ", device_, " is full: ", routes_.size(), " queue pairs hold ",
        reserved_, " of its ", depth_, " entries and one more needs ", entries,
        ": fewer workers per core (more --cores) or smaller verbs queue depths"));
  }
  reserved_ += entries;
  routes_[qpn] = Route{std::move(sink), entries};
  return absl::OkStatus();
}

void CompletionPoller::Detach(std::uint32_t qpn) {
  std::lock_guard lock(mu_);
  auto it = routes_.find(qpn);
  if (it == routes_.end()) return;
  reserved_ -= it->second.entries;
  routes_.erase(it);
}

void CompletionPoller::Arm() {
  // Weakly: a wait that completed just before the poller went must not touch it.
  descriptor_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                         [weak = weak_from_this()](const boost::system::error_code& ec) {
                           if (auto self = weak.lock()) self->OnReadable(ec);
                         });
}

void CompletionPoller::OnReadable(const boost::system::error_code& ec) {
  if (ec == boost::asio::error::operation_aborted) return;  // the poller is going away
  if (ec) {
    return Fail(absl::UnavailableError(
        absl::StrCat("completion channel of ", device_, ": ", ec.message())));
  }
  unsigned events = 0;
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(channel_, &cq, &context) == 0) ++events;
  if (events > 0) ibv_ack_cq_events(cq_->get(), events);
  // Re-arm before polling: a completion that lands after the poll still raises an event.
  if (int err = ibv_req_notify_cq(cq_->get(), 0); err != 0) {
    return Fail(VerbsError("ibv_req_notify_cq", device_, err));
  }
  PollNow();
  Arm();
}

void CompletionPoller::PollNow() {
  std::array<ibv_wc, 32> batch;
  for (;;) {
    StatusOr<int> n = cq_->Poll(batch);
    if (!n.ok()) return Fail(n.status());
    for (int i = 0; i < *n; ++i) {
      std::shared_ptr<Sink> sink;
      {
        std::lock_guard lock(mu_);
        auto it = routes_.find(batch[i].qp_num);
        if (it != routes_.end()) sink = it->second.sink.lock();
      }
      // Completions of a closed connection (flushed work requests) have nobody to go to.
      if (sink) sink->OnCompletion(batch[i]);
    }
    if (*n < static_cast<int>(batch.size())) return;
  }
}

void CompletionPoller::Fail(const Status& why) {
  std::vector<std::shared_ptr<Sink>> sinks;
  {
    std::lock_guard lock(mu_);
    if (!failed_.ok()) return;
    failed_ = why;
    for (auto& [qpn, route] : routes_) {
      if (auto sink = route.sink.lock()) sinks.push_back(std::move(sink));
    }
  }
  spdlog::error("{}: the completion queue failed; closing its {} connections", why.message(),
                sinks.size());
  // Outside the lock: a closing connection detaches itself.
  for (auto& sink : sinks) sink->OnCompletionQueueFailed(why);
}

}  // namespace phub::transport::verbs
