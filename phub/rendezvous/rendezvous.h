// How the ranks of a ring or an NCCL communicator find each other before they have any
// connection: a small key-value store every rank reaches. A rank publishes what the others
// need (the ring: its "host port"; NCCL: rank 0's unique id) and looks up what it needs; a
// lookup waits, up to a deadline, for a key that is not there yet.
//
// Two stores, picked by the address (address.h): a directory every rank shares (file_store.h:
// a temp dir on one box, a shared filesystem on a cluster) and tcp://HOST:PORT[/JOB]
// (tcp_store.h: rank 0 serves the store, every rank connects; no shared filesystem needed).
//
// Keys are 1..kMaxKeyBytes of [A-Za-z0-9._-] not starting with '.' (frame.h: CheckKey); values
// are at most kMaxValueBytes. A Store is used by one thread at a time (each rank opens its
// own); the ranks of one process (tests) each open one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "phub/common/status.h"

namespace phub::rendezvous {

class Store {
 public:
  virtual ~Store() = default;

  // Makes `value` visible to every rank under `key`, replacing an earlier value. Blocks until
  // the store has it (TCP: the server acknowledged it). InvalidArgument for a bad key or a value
  // over kMaxValueBytes; Unavailable if the store cannot be reached.
  virtual Status Publish(const std::string& key, const std::string& value) = 0;

  // Waits up to timeout_ms for `key` and returns its value. DeadlineExceeded names the key and
  // the store's address; Unavailable if the store went away while waiting. May be retried.
  virtual StatusOr<std::string> Lookup(const std::string& key, int timeout_ms) = 0;

  // Withdraws `key` (no error if it is not there): later lookups wait again. NCCL's rank 0 does
  // it once every rank has joined, so that a reused directory does not hand the next job a
  // stale id.
  virtual Status Remove(const std::string& key) = 0;

  // This rank will make no more calls. TCP: tells the server; rank 0 then waits until every
  // rank has finished (or the server's lifetime passed, tcp_store.h) and stops the server;
  // DeadlineExceeded names the ranks that never finished. File: nothing to do. Destroying a
  // store without Finish ends it at once (TCP's rank 0: the server stops; waiting ranks see
  // Unavailable).
  virtual Status Finish() = 0;

  // The address, for messages: the directory, or tcp://HOST:PORT[/JOB].
  virtual const std::string& address() const = 0;
};

struct StoreOptions {
  std::string address;  // address.h: a directory, or tcp://HOST:PORT[/JOB]
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  // TCP: how long a rank keeps trying to reach rank 0's server (rank 0 may start later), each
  // request's deadline, and on rank 0 what bounds its server's life (tcp_store.h: the server
  // waits timeout_ms + min(timeout_ms, 10 s) at most for every rank to finish). Unused by the
  // file store.
  int timeout_ms = 30000;
};

// Opens the store `options.address` names: parses the address (InvalidArgument with the
// accepted forms), and for TCP binds rank 0's server (Unavailable if the port is taken) and
// connects and says Hello (every rank, rank 0 too). Blocks up to timeout_ms.
StatusOr<std::unique_ptr<Store>> OpenStore(const StoreOptions& options);

}  // namespace phub::rendezvous
