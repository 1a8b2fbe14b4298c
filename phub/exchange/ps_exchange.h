// The parameter server behind the GradientExchange API: one phubd (a dedicated PS box), or
// several phubd that each own a share of the model (colocated: one on every worker host,
// ps-lite/BytePS style). With several, the model's chunks are spread over the servers by
// keys::SpreadOverServers, each server sees its share as its own tensor table, and this class
// runs one PsClient per server, pushing each slice of a tensor to its owner.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "phub/client/detail/rack_role.h"
#include "phub/client/ps_client.h"
#include "phub/exchange/gradient_exchange.h"
#include "phub/common/endpoint.h"
#include "phub/common/membership.h"
#include "phub/keys/server_placement.h"
#include "phub/topology/topology.h"

namespace phub::exchange {

// A server's "HOST:PORT" (phub/common/endpoint.h).
using PsEndpoint = phub::Endpoint;
using phub::ParseEndpoint;

struct PsExchangeOptions {
  // Job token, timeouts, wire and TCP tuning; its host/port are not used.
  client::PsClientOptions client;
  // Every server of the job, in the same order on every worker. One = a dedicated PS.
  std::vector<PsEndpoint> servers;
  // Granularity of the split over several servers (ignored with one): chunk-aligned with
  // phubd's default --chunk-bytes, so no server chunk straddles two slices.
  std::uint64_t partition_bytes = 1 << 20;
};

// Who a PS client is where it connects: its rank among the server's workers, and in racks of
// racks its rack (a flat job: RackRole{}).
struct PsSeat {
  Membership membership;
  client::detail::RackRole role;
};

// Racks of racks (docs/operations.md "Racks of racks"): the worker at `placement` joins its
// rack's PBox (the one server: options.servers) as its rank in the rack; with several racks
// its Hello names them. Its rank and world size as a data-parallel worker stay the job's
// (placement.rank): only the PS connection uses the seat returned.
PsSeat JoinRackPbox(const topology::Placement& placement, PsExchangeOptions& options);

class PsExchange final : public GradientExchange, public ElasticMembership {
 public:
  // Connects to every server in order, as `seat` (each answers once all workers have joined
  // it).
  // InvalidArgument: no servers, a server that would own nothing (more servers than the
  // model has partitions), or a refused handshake; Unavailable: a server cannot be reached.
  static StatusOr<std::unique_ptr<PsExchange>> Connect(const PsExchangeOptions& options,
                                                       PsSeat seat,
                                                       std::vector<keys::TensorSpec> tensors,
                                                       std::vector<std::span<float>> weights);
  ~PsExchange() override;

  Status DeclareGradients(const std::vector<std::span<const float>>& grads) override;
  Status Init() override;
  // options.client.per_iteration_values: StepWith(values) on every server's client (each
  // steps its share of the iteration with them). Without it, FailedPrecondition naming the
  // option: phubd steps this job with fixed values.
  Status BeginIteration(const kernels::StepValues& values) override;
  Status Push(std::uint32_t tensor, std::span<const float> grads) override;
  Status Wait(std::uint32_t tensor) override;
  Status WaitAll() override;
  Status Close() override;
  std::string name() const override { return clients_.size() == 1 ? "ps" : "ps-colocated"; }
  std::uint64_t start_iteration() const override;
  // options.client.min_workers (one server only): the client's membership.
  ElasticMembership* elastic() override;
  IterationMembers MembersOf(std::uint64_t iteration) const override;
  Status RequestLeave() override;

  std::size_t num_servers() const { return clients_.size(); }
  // Server k's client, for what only a PS has (its optimizer's state). Its tensors are the
  // caller's with one server; with several, each holds slices (pieces_).
  client::PsClient& client(std::size_t server) { return *clients_[server]; }

 private:
  // Where one slice of a caller tensor lives: server, the server-side tensor index, the range.
  struct Piece {
    std::uint32_t server;
    std::uint32_t server_tensor;
    std::uint64_t offset;
    std::uint64_t elements;
  };
  PsExchange() = default;

  std::vector<std::unique_ptr<client::PsClient>> clients_;
  std::vector<std::vector<Piece>> pieces_;  // by caller tensor
  std::vector<std::uint64_t> elements_;     // by caller tensor
  bool per_iteration_values_ = false;       // options.client's
};

}  // namespace phub::exchange
