// Racks of racks (docs/design.md "Racks of racks"): a rack's PBox's link to every rack's PBox,
// for one job whose workers span several racks. The job's chunks are spread over the racks'
// PBoxes (chunk c's home is the PBox of rack c mod R). For each chunk, once this PBox's shard has
// summed its rack's copies (Forward), the Uplink pushes the sum to the chunk's home, which
// sums the R racks' sums in rack order, runs the optimizer over the mean (its divisor: the
// workers' copies the racks' sums hold that iteration, each sum carrying that count and the
// rack's members of the iteration as two elements more: shard/copy_count.h) and sends the new weights back to every rack's PBox; the
// Uplink lands them in buffers of its own and tells the shard, which copies them in and sends
// them to its rack.
// Chunk by chunk, so the three hops overlap.
//
// On each home, the racks' sums form a job of their own (the rack job's name, Hello field
// rack_workers): the Uplink is an ordinary PsClient of every PBox, this one's included, with
// one tensor per chunk homed there, checked like any worker (token, Hello); so a home PBox
// checkpoints, meters and shares its part like any job. A flat job (one rack) has no Uplink.
//
// Start-up: Start connects to every home in rack order (each home's part forms once every
// rack's PBox has joined), then rack 0's PBox sends the initial weights its rank 0 sent it
// (Initialized), every rack's PBox receives them, and the shards are told (OnRelayReady).
// Failures (a home lost or silent for its liveness timeout, a refused Hello, a push before the
// weights) go to `fail` once, never as a hang. Stop (the job ends) closes the links without
// waiting; after it returns nothing more is posted to a core or to `fail`, and the buffers live
// until the links are closed. Blocking calls run on the Uplink's own threads, never a core's or
// the control plane's.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "phub/kernels/lr_scaling.h"
#include "phub/kernels/optimizer_config.h"
#include "phub/kernels/wire_options.h"
#include "phub/keys/key_table.h"
#include "phub/server/shard/chunk_relay.h"
#include "phub/server/shard/shard.h"
#include "phub/topology/topology.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::server {

struct UplinkConfig {
  std::string job;    // the job's name
  std::string token;  // the job's token: the homes check it as they check workers'
  std::shared_ptr<const topology::Topology> topology;
  std::uint32_t rack = 0;          // this PBox's rack
  std::uint32_t rack_workers = 0;  // the rack job's world size
  // The members the rack's part starts with (its world size if fixed): the homes scale the lr
  // by every rack's members over the sum of these (--lr-scaling, copy_count.h).
  std::uint32_t rack_start = 0;
  kernels::LrScaling lr_scaling = kernels::LrScaling::kFixed;  // the job's workers'
  kernels::OptimizerConfig optimizer;  // the job's (the homes run it)
  kernels::WireOptions wire{.weights = false};  // the job's workers': the relayed sums go so too
  transport::verbs::DeviceOptions rdma;
  int connect_timeout_ms = 30000;
};

class Uplink final : public ChunkRelay {
 public:
  // Runs `fn` on the shard of core `core` (ServerCore::Post).
  using PostToCore = std::function<void(keys::CoreIndex core, std::function<void(Shard&)> fn)>;
  // The job cannot go on: why (called once, from an Uplink thread).
  using Fail = std::function<void(std::string why)>;

  // The home of chunk `chunk` among `racks` PBoxes.
  static std::uint32_t HomeOf(std::uint32_t chunk, std::uint32_t racks) { return chunk % racks; }
  // The tensors of home `home`'s part of a job with key table `table`: one per chunk homed
  // there, in chunk order, named "<tensor>@<offset>", of the chunk's elements and its counts
  // (copy_count.h: kCountElements more).
  static std::vector<keys::TensorSpec> HomeTensors(const keys::KeyTable& table,
                                                   std::uint32_t home, std::uint32_t racks);

  Uplink(UplinkConfig config, const keys::KeyTable& table, PostToCore post, Fail fail);
  ~Uplink() override;  // Stop()s

  // Connects (on the Uplink's thread) once the job's shards are installed.
  void Start();
  void Stop();

  std::span<float> Partial(std::uint32_t chunk) override;
  std::span<const float> Landed(std::uint32_t chunk) override;
  void Forward(keys::CoreIndex core, std::uint32_t chunk, RackCount count) override;
  void Initialized(keys::CoreIndex core, std::uint32_t chunk,
                   std::span<const float> weights) override;

  struct State;  // shared with the Uplink's threads, which may outlive it briefly

 private:
  std::shared_ptr<State> state_;
};

}  // namespace phub::server
