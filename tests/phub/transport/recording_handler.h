// Transport-neutral test support for Connections: a recording ConnectionHandler, a collector of
// SendDone results, deterministic payloads. Used by the TCP fixture (tcp/loopback_pair.h) and
// the conformance suite that runs on every transport (connection_conformance_test.cc). Every
// wait has a generous timeout that only keeps a broken build from hanging (generous enough for
// soft-RoCE in an emulated guest); nothing here measures time.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "phub/transport/connection.h"

namespace phub::transport {

// Only to turn a hang into a failure.
inline constexpr auto kTimeout = std::chrono::seconds(60);

inline ::testing::AssertionResult MessageHas(const Status& status, const std::string& part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" lacks \"" << part << "\"";
}

// Deterministic bytes that differ per message and per position.
inline std::vector<std::byte> Pattern(std::size_t size, std::uint32_t seed) {
  std::vector<std::byte> out(size);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    out[i] = static_cast<std::byte>(x >> 24);
  }
  return out;
}

// A real ConnectionHandler that records what the connection tells it. By default each payload
// goes into a fresh buffer owned by the handler; a test may install its own resolver, a check
// run by OnReceived, and landing zones instead. Callbacks run on the connection's loop thread;
// the setters are for before the connection starts, the accessors for the test thread.
class RecordingHandler final : public ConnectionHandler {
 public:
  struct Message {
    WireHeader header;
    std::span<std::byte> slot;  // where the payload landed; empty for payload_bytes == 0
  };
  using Resolver = std::function<StatusOr<std::span<std::byte>>(const WireHeader&)>;
  using ReceivedCheck = std::function<Status(const WireHeader&)>;

  void set_resolver(Resolver resolver) { resolver_ = std::move(resolver); }
  // What OnReceived returns for each message (recorded either way); OK without one.
  void set_on_received(ReceivedCheck check) { on_received_ = std::move(check); }
  // What LandingZones publishes (asked by transports that write in place: verbs).
  void set_landing_zones(std::vector<LandingZone> zones) { zones_ = std::move(zones); }

  StatusOr<std::span<std::byte>> ResolveSlot(Connection&, const WireHeader& header) override {
    std::lock_guard lock(mu_);
    ++resolve_calls_;
    if (resolver_) {
      StatusOr<std::span<std::byte>> slot = resolver_(header);
      if (slot.ok()) pending_slot_ = *slot;
      return slot;
    }
    owned_.push_back(std::make_unique<std::vector<std::byte>>(header.payload_bytes));
    pending_slot_ = std::span<std::byte>(*owned_.back());
    return pending_slot_;
  }

  Status OnReceived(Connection&, const WireHeader& header) override {
    std::lock_guard lock(mu_);
    messages_.push_back(
        Message{header, header.payload_bytes > 0 ? pending_slot_ : std::span<std::byte>()});
    pending_slot_ = {};
    cv_.notify_all();
    return on_received_ ? on_received_(header) : absl::OkStatus();
  }

  void OnClosed(Connection& connection, const Status& why) override {
    std::lock_guard lock(mu_);
    ++closed_count_;
    why_ = why;
    closed_flag_seen_ = connection.closed();
    cv_.notify_all();
  }

  StatusOr<std::vector<LandingZone>> LandingZones(const Connection&, const WireHeader*) override {
    return zones_;
  }

  // True once n messages are in; false on timeout or once the connection closed short of n
  // (OnClosed is the last callback: no message can follow it).
  bool WaitForMessages(std::size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, kTimeout, [&] { return messages_.size() >= n || closed_count_ > 0; });
    return messages_.size() >= n;
  }
  bool WaitForClosed() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kTimeout, [&] { return closed_count_ > 0; });
  }

  std::vector<Message> messages() const {
    std::lock_guard lock(mu_);
    return messages_;
  }
  int resolve_calls() const {
    std::lock_guard lock(mu_);
    return resolve_calls_;
  }
  int closed_count() const {
    std::lock_guard lock(mu_);
    return closed_count_;
  }
  Status why() const {
    std::lock_guard lock(mu_);
    return why_;
  }
  bool closed_flag_seen() const {
    std::lock_guard lock(mu_);
    return closed_flag_seen_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Resolver resolver_;
  ReceivedCheck on_received_;
  std::vector<LandingZone> zones_;
  std::deque<std::unique_ptr<std::vector<std::byte>>> owned_;
  std::span<std::byte> pending_slot_;
  std::vector<Message> messages_;
  int resolve_calls_ = 0;
  int closed_count_ = 0;
  Status why_;
  bool closed_flag_seen_ = false;
};

// Collects the statuses SendDone callbacks report, from any thread.
class SendResults {
 public:
  Connection::SendDone Callback() {
    return [this](const Status& status) {
      std::lock_guard lock(mu_);
      statuses_.push_back(status);
      cv_.notify_all();
    };
  }
  bool WaitFor(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kTimeout, [&] { return statuses_.size() >= n; });
  }
  std::vector<Status> statuses() const {
    std::lock_guard lock(mu_);
    return statuses_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Status> statuses_;
};

}  // namespace phub::transport
