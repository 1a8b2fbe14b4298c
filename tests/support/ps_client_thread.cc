#include "tests/support/ps_client_thread.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <utility>

#include "spdlog/spdlog.h"

namespace phub::testing {

struct PsClientThread::State {
  client::PsClientOptions options;
  Membership membership;
  std::vector<keys::TensorSpec> model;
  std::vector<std::vector<float>> weights;
  std::list<std::vector<float>> held;  // a list: what Hold returned never moves

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::packaged_task<Status(State&)>> tasks;  // guarded by mu
  bool stop = false;                                     // guarded by mu
  std::promise<void> finished;

  std::unique_ptr<client::PsClient> client;  // the client's thread only
};

PsClientThread::PsClientThread(client::PsClientOptions options, Membership membership,
                               std::vector<keys::TensorSpec> model,
                               std::vector<std::vector<float>> weights,
                               std::function<void()> unblock)
    : state_(std::make_shared<State>()), unblock_(std::move(unblock)) {
  state_->options = std::move(options);
  state_->membership = membership;
  state_->model = std::move(model);
  state_->weights = std::move(weights);
  finished_ = state_->finished.get_future().share();
  spdlog::default_logger_raw();  // spdlog's registry exists before the client thread logs
  thread_ = std::thread([state = state_] { Loop(*state); });
}

PsClientThread::~PsClientThread() {
  if (unblock_) unblock_();
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (finished_.wait_for(Millis(5000)) == std::future_status::ready) {
    thread_.join();
    return;
  }
  ADD_FAILURE() << "PsClient still blocked 5 s after its peer closed every socket";
  thread_.detach();
}

void PsClientThread::Loop(State& state) {
  while (true) {
    std::packaged_task<Status(State&)> task;
    {
      std::unique_lock lock(state.mu);
      state.cv.wait(lock, [&] { return state.stop || !state.tasks.empty(); });
      if (state.tasks.empty()) break;  // stop, and every queued call has run
      task = std::move(state.tasks.front());
      state.tasks.pop_front();
    }
    task(state);
  }
  state.client.reset();  // on this thread: its destructor may block on the peer
  state.finished.set_value();
}

PsClientThread::Call PsClientThread::Queue(std::function<Status(State&)> task) {
  std::packaged_task<Status(State&)> packaged(std::move(task));
  Call call = packaged.get_future().share();
  {
    std::lock_guard lock(state_->mu);
    state_->tasks.push_back(std::move(packaged));
  }
  state_->cv.notify_all();
  return call;
}

PsClientThread::Call PsClientThread::Connect() {
  return Queue([](State& state) {
    std::vector<std::span<float>> spans;
    for (std::vector<float>& w : state.weights) spans.emplace_back(w);
    auto client = client::PsClient::Connect(state.options, state.membership, state.model,
                                            std::move(spans));
    if (!client.ok()) return client.status();
    state.client = *std::move(client);
    return Status();
  });
}

PsClientThread::Call PsClientThread::Run(std::function<Status(client::PsClient&)> call) {
  return Queue([call = std::move(call)](State& state) {
    if (!state.client)
      return absl::FailedPreconditionError("no client: Connect failed or Destroy ran");
    return call(*state.client);
  });
}

PsClientThread::Call PsClientThread::Destroy() {
  return Queue([](State& state) {
    if (!state.client) return Status();
    Status closed = state.client->Close();
    state.client.reset();
    return closed;
  });
}

const std::vector<std::vector<float>>& PsClientThread::weights() const { return state_->weights; }

std::span<const float> PsClientThread::Hold(std::vector<float> values) {
  // Only the test's thread adds to the list; the client's thread reads what it was given.
  std::lock_guard lock(state_->mu);
  return state_->held.emplace_back(std::move(values));
}

}  // namespace phub::testing
