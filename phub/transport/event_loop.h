// One thread running one asio::io_context, optionally pinned to a physical core. A server
// core's shard, listener and connections all live on one EventLoop: that is what lets a shard
// own its data without locks. Other threads talk to it only through Post/Run.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <string>
#include <thread>

namespace phub::transport {

// context.run() until it stops, surviving a throwing handler (logged as critical, `name` in the
// line): no exception leaves a loop's thread. Every EventLoop runs so; phubd's control thread too.
void RunSurvivingExceptions(boost::asio::io_context& context, const std::string& name);

class EventLoop {
 public:
  // pin_core < 0: not pinned. `name` appears in logs.
  EventLoop(std::string name, int pin_core);
  ~EventLoop();  // stops the loop and joins the thread; pending handlers are dropped
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  boost::asio::io_context& context() { return context_; }
  const std::string& name() const { return name_; }
  bool on_loop_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

  // Runs `fn` on the loop thread, soon; returns at once.
  void Post(std::function<void()> fn);
  // Runs `fn` on the loop thread and waits for it to finish (runs inline if already there).
  // An exception from `fn` is logged and swallowed there (the caller is still woken): `fn`
  // reports expected failures through what it captures, as a Status.
  void Run(const std::function<void()>& fn);

 private:
  std::string name_;
  boost::asio::io_context context_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace phub::transport
