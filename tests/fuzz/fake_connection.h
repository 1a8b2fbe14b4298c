// An in-memory transport::Connection for the shard fuzzer: it keeps the contract a real
// transport keeps with its handler (connection.h, tcp_connection.cc) and checks the handler's
// side of it, aborting on a breach:
//  - sends queue and complete only when the harness says (CompleteSends), in order, like
//    TcpConnection::OnWritten; a send on a closed connection fails at once;
//  - a shard sends only WEIGHTS, to the rank the connection attached as, with a payload as
//    long as its header says;
//  - a queued payload must stay unmodified until its send completes (checked against a copy);
//  - Close fails the queued sends, then calls OnClosed exactly once; nothing follows it.
// Single-threaded, like a connection on its event loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "phub/transport/connection.h"

namespace phub::fuzz {

// PHUB_FUZZ_VERBOSE=1 prints every close and its reason (to follow a reproducer).
inline bool Verbose() {
  static const bool verbose = std::getenv("PHUB_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "shard_fuzzer: %s\n", what.c_str());
  std::abort();
}

class FakeConnection final : public transport::Connection {
 public:
  FakeConnection(transport::ConnectionHandler* handler, std::string name)
      : handler_(handler), name_(std::move(name)) {}

  void Start() override { started_ = true; }

  void Send(const transport::WireHeader& header, std::span<const std::byte> payload,
            SendDone done) override {
    if (header.payload_bytes != payload.size()) {
      Fail("Send with a header of " + std::to_string(header.payload_bytes) +
           " payload bytes and a payload of " + std::to_string(payload.size()));
    }
    // WEIGHTS; or, with compact weights, INIT: a worker's first weights, whole.
    const bool weights = header.op == transport::Op::kWeights || header.op == transport::Op::kInit;
    if (!weights || tag() < 0 || header.worker != static_cast<std::uint64_t>(tag())) {
      Fail("a shard sent " + transport::OpName(header.op) + " for worker " +
           std::to_string(header.worker) + " on the connection of rank " + std::to_string(tag()));
    }
    if (closed_) {
      if (done) done(absl::UnavailableError("connection is closed"));
      return;
    }
    sends_.push_back(Pending{header, payload, {payload.begin(), payload.end()}, std::move(done)});
    ++sent_;
  }

  // Completes up to `n` queued sends, oldest first, as a write finishing would. Returns how
  // many completed.
  std::size_t CompleteSends(std::size_t n) {
    std::size_t completed = 0;
    while (completed < n && !closed_ && !sends_.empty()) {
      Pending send = std::move(sends_.front());
      sends_.pop_front();
      if (!send.payload.empty() &&
          std::memcmp(send.payload.data(), send.copy.data(), send.payload.size()) != 0) {
        Fail("a payload changed while its send was queued (" + transport::OpName(send.header.op) +
             " of chunk " + std::to_string(send.header.chunk) + ")");
      }
      ++completed;
      if (send.done) send.done(absl::OkStatus());
    }
    return completed;
  }

  void Close(const Status& why) override {
    if (closed_) return;
    closed_ = true;
    if (Verbose()) {
      std::fprintf(stderr, "close %s (%zu sends queued): %s\n", name_.c_str(), sends_.size(),
                   why.ToString().c_str());
    }
    std::deque<Pending> failed;
    failed.swap(sends_);
    const Status send_error = why.ok() ? absl::CancelledError("closed locally") : why;
    for (Pending& send : failed) {
      if (send.done) send.done(send_error);
    }
    handler_->OnClosed(*this, why);
  }

  bool closed() const override { return closed_; }
  std::string peer() const override { return name_; }

  bool started() const { return started_; }
  std::size_t queued_sends() const { return sends_.size(); }
  std::size_t sent() const { return sent_; }

 private:
  struct Pending {
    transport::WireHeader header;
    std::span<const std::byte> payload;
    std::vector<std::byte> copy;
    SendDone done;
  };

  transport::ConnectionHandler* handler_;
  std::string name_;
  std::deque<Pending> sends_;
  std::size_t sent_ = 0;
  bool started_ = false;
  bool closed_ = false;
};

}  // namespace phub::fuzz
