#include "phub/transport/event_loop.h"

#include <boost/asio/post.hpp>
#include <future>

#include "phub/common/cpu_pinning.h"
#include "spdlog/spdlog.h"

namespace phub::transport {

EventLoop::EventLoop(std::string name, int pin_core)
    : name_(std::move(name)), context_(1), work_(boost::asio::make_work_guard(context_)) {
  thread_ = std::thread([this, pin_core] {
    if (pin_core >= 0) {
      if (Status s = PinThisThreadToCore(pin_core); !s.ok()) {
        spdlog::warn("{}: not pinned: {}", name_, s.message());
      } else {
        spdlog::debug("{}: pinned to core {}", name_, pin_core % CountPhysicalCores());
      }
    }
    RunSurvivingExceptions(context_, name_);
  });
}

EventLoop::~EventLoop() {
  work_.reset();
  context_.stop();
  if (thread_.joinable()) thread_.join();
}

void RunSurvivingExceptions(boost::asio::io_context& context, const std::string& name) {
  // Handlers return errors as Status; an exception reaching here is a bug or a failed
  // allocation the handler did not foresee. It must not end the thread (or the process, via
  // std::terminate): log it and keep serving the loop's other connections.
  for (;;) {
    try {
      context.run();
      return;
    } catch (const std::exception& e) {
      spdlog::critical("{}: a handler threw ({}); the loop goes on", name, e.what());
    } catch (...) {
      spdlog::critical("{}: a handler threw a non-standard exception; the loop goes on", name);
    }
  }
}

void EventLoop::Post(std::function<void()> fn) { boost::asio::post(context_, std::move(fn)); }

void EventLoop::Run(const std::function<void()>& fn) {
  if (on_loop_thread()) {
    fn();
    return;
  }
  std::promise<void> done;
  boost::asio::post(context_, [&] {
    // The caller waits below: whatever fn does, it must be woken (never a silent hang).
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::critical("{}: a task threw ({}); it is abandoned", name_, e.what());
    } catch (...) {
      spdlog::critical("{}: a task threw a non-standard exception; it is abandoned", name_);
    }
    done.set_value();
  });
  done.get_future().wait();
}

}  // namespace phub::transport
