// The ring's links, set up apart from the algorithm (ring_allreduce.cc): this rank binds its
// transport (--transport) to the ring's event loop, listens on any port of listen_host and
// publishes it through the rendezvous, then dials rank+1 with an ATTACH that names both ends.
// Rank-1's connection arrives through the acceptor; the handler's ResolveSlot checks its
// ATTACH (the transport knows nothing of ranks).
#pragma once

#include <functional>
#include <memory>

#include "phub/common/status.h"
#include "phub/ring/ring_allreduce.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/transport.h"

namespace phub::ring {

// Created by OpenRingLinks; created and destroyed on the loop's thread.
struct RingLinks {
  std::unique_ptr<transport::Transport> transport;
  std::unique_ptr<transport::Acceptor> acceptor;
  std::shared_ptr<transport::Connection> next;  // to rank+1, started, tagged with its rank
};

// Fills `links` (owned by the caller, who destroys it on the loop's thread, also after an
// error). `handler` takes every message of both links; `adopt` runs on the loop for every
// accepted connection, which it must Start(). Blocks until rank+1 is dialed (or the timeout).
// REQUIRES: world_size > 1, rank < world_size, piece_bytes a positive multiple of 4.
Status OpenRingLinks(const RingOptions& options, Membership membership,
                     transport::EventLoop& loop,
                     transport::ConnectionHandler* handler,
                     std::function<void(std::shared_ptr<transport::Connection>)> adopt,
                     RingLinks& links);

}  // namespace phub::ring
