#include "phub/server/racks/uplink.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/client/detail/rack_role.h"
#include "phub/client/ps_client.h"
#include "phub/common/aligned_buffer.h"
#include "phub/server/shard/copy_count.h"
#include "spdlog/spdlog.h"

namespace phub::server {

struct Uplink::State : std::enable_shared_from_this<Uplink::State> {
  UplinkConfig config;
  PostToCore post;
  Fail fail;
  std::uint32_t racks = 0;
  std::vector<std::vector<keys::TensorSpec>> tensors;  // by home
  std::vector<std::vector<std::uint32_t>> chunks_of;   // by home: chunk ids, tensor order
  std::vector<std::uint32_t> home, index_in_home;      // by chunk
  std::vector<keys::CoreIndex> core_of;                // by chunk
  // By chunk: the rack's sum and the home's weights as they travel, each the chunk's elements
  // and, last, the counts of copies and members the sum holds (copy_count.h; in `landed`, the
  // home's unstepped count slots, ignored).
  std::vector<AlignedBuffer> partial, landed;
  std::vector<std::uint32_t> elements;  // by chunk: the rack's chunk, without the count
  // By chunk, rack 0 only: rank 0's initial weights as its shard copied them (Initialized).
  // Not straight into `landed`: a home that resumed from a checkpoint sends its own weights
  // there meanwhile, on its client's thread. Connect moves them once every chunk is in.
  std::vector<std::vector<float>> initial;
  std::atomic<bool> ready{false};

  std::mutex mu;
  std::condition_variable changed;
  bool stopped = false;
  bool failed = false;
  std::size_t initialized = 0;
  // By home. Declared after the buffers: destroyed (closed) before them.
  std::vector<std::unique_ptr<client::PsClient>> clients;
  std::vector<std::deque<std::uint32_t>> waiting;  // by home: chunks pushed, in push order

  std::string HomeName(std::uint32_t h) const {
    const topology::Rack& rack = config.topology->racks()[h];
    return absl::StrCat("the PBox of rack '", rack.name, "' (", rack.pbox.host, ":",
                        rack.pbox.port, ")");
  }
  void FailLocked(const std::string& why) {
    if (stopped || failed) return;
    failed = true;
    spdlog::error("job '{}': racks of racks: {}", config.job, why);
    fail(why);
  }
  void Failed(const std::string& why) {
    std::lock_guard lock(mu);
    FailLocked(why);
  }
  void Connect();
  void Wait(std::uint32_t home);
};

std::vector<keys::TensorSpec> Uplink::HomeTensors(const keys::KeyTable& table, std::uint32_t home,
                                                  std::uint32_t racks) {
  std::vector<keys::TensorSpec> tensors;
  for (const keys::Chunk& chunk : table.chunks()) {
    if (HomeOf(chunk.id, racks) != home) continue;
    tensors.push_back({absl::StrCat(table.tensors()[chunk.tensor].name, "@", chunk.offset),
                       std::uint64_t{chunk.elements} + kCountElements});
  }
  return tensors;
}

Uplink::Uplink(UplinkConfig config, const keys::KeyTable& table, PostToCore post, Fail fail)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.config = std::move(config);
  s.post = std::move(post);
  s.fail = std::move(fail);
  s.racks = static_cast<std::uint32_t>(s.config.topology->racks().size());
  s.tensors.resize(s.racks);
  s.chunks_of.resize(s.racks);
  s.clients.resize(s.racks);
  s.waiting.resize(s.racks);
  const std::size_t chunks = table.chunks().size();
  s.home.resize(chunks);
  s.index_in_home.resize(chunks);
  s.core_of.assign(table.owners().begin(), table.owners().end());
  for (std::uint32_t h = 0; h < s.racks; ++h) s.tensors[h] = HomeTensors(table, h, s.racks);
  for (const keys::Chunk& chunk : table.chunks()) {
    const std::uint32_t h = HomeOf(chunk.id, s.racks);
    s.home[chunk.id] = h;
    s.index_in_home[chunk.id] = static_cast<std::uint32_t>(s.chunks_of[h].size());
    s.chunks_of[h].push_back(chunk.id);
    s.partial.emplace_back(std::size_t{chunk.elements} + kCountElements);
    s.landed.emplace_back(std::size_t{chunk.elements} + kCountElements);
    s.elements.push_back(chunk.elements);
  }
  if (s.config.rack == 0) s.initial.resize(chunks);
}

Uplink::~Uplink() { Stop(); }

std::span<float> Uplink::Partial(std::uint32_t chunk) {
  return state_->partial[chunk].span().first(state_->elements[chunk]);
}

std::span<const float> Uplink::Landed(std::uint32_t chunk) {
  return std::as_const(state_->landed[chunk]).span().first(state_->elements[chunk]);
}

void Uplink::Start() {
  // Detached: a home that does not answer must not hold up whoever ends the job; the thread
  // keeps the state (and the buffers its links use) alive until it is done.
  std::thread([state = state_] { state->Connect(); }).detach();
}

void Uplink::State::Connect() {
  const topology::Topology& topology = *config.topology;
  for (std::uint32_t h = 0; h < racks; ++h) {
    {
      std::lock_guard lock(mu);
      if (stopped || failed) return;
    }
    client::PsClientOptions options;
    options.host = topology.racks()[h].pbox.host;
    options.port = topology.racks()[h].pbox.port;
    options.job_token = config.token;
    options.job = config.job;
    options.optimizer = config.optimizer;
    options.lr_scaling = config.lr_scaling;  // the homes compare every rack's
    options.wire = config.wire;
    options.rdma = config.rdma;
    options.connect_timeout_ms = config.connect_timeout_ms;
    std::vector<std::span<float>> weights;
    std::vector<std::span<const float>> sums;
    for (std::uint32_t chunk : chunks_of[h]) {
      weights.push_back(landed[chunk].span());
      sums.push_back(std::as_const(partial[chunk]).span());
    }
    auto connected = client::detail::ConnectInRacks(
        options, {.rank = config.rack, .world_size = racks},
        {.racks = racks,
         .rack = config.rack,
         .rack_workers = config.rack_workers,
         .rack_start = config.rack_start},
        tensors[h],
        weights);
    if (!connected.ok()) {
      return Failed(absl::StrCat("cannot join the job's chunks on ", HomeName(h), ": ",
                                 connected.status().message()));
    }
    if (Status s = (*connected)->DeclareGradients(sums); !s.ok()) {
      return Failed(absl::StrCat(HomeName(h), ": ", s.message()));
    }
    bool closing;
    {
      std::lock_guard lock(mu);
      closing = stopped;
      if (!closing) clients[h] = *std::move(connected);
    }
    // Stop closed the others (it never sees this one): closed here, on the Uplink's thread,
    // never where the state's last reference might go.
    if (closing) {
      (void)(*connected)->Close();  // leaving: nothing to report
      return;
    }
  }
  spdlog::info("job '{}': rack {} joined the job's chunks on all {} PBoxes", config.job,
               config.rack, racks);
  if (config.rack == 0) {
    // The job starts from the weights rank 0 of rack 0 sent this PBox.
    std::unique_lock lock(mu);
    if (!changed.wait_for(lock, std::chrono::milliseconds(config.connect_timeout_ms),
                          [&] { return stopped || initialized == home.size(); })) {
      return FailLocked(absl::StrCat("rank 0 of rack 0 sent the initial weights of ",
                                     initialized, " of ", home.size(), " chunks within ",
                                     config.connect_timeout_ms,
                                     " ms (--form-timeout-ms): every rack waits for them"));
    }
    if (stopped) return;
    // Every Initialized happened before (under mu); a home that will not take rank 0's weights
    // (it has its own, or resumed from a checkpoint) is writing its own into `landed`: leave
    // those chunks alone.
    for (std::uint32_t h = 0; h < racks; ++h) {
      if (clients[h]->weights_from_server() || clients[h]->resumed()) continue;
      for (std::uint32_t chunk : chunks_of[h]) {
        std::copy(initial[chunk].begin(), initial[chunk].end(), landed[chunk].data());
      }
    }
    initial.clear();
    initial.shrink_to_fit();
  }
  for (std::uint32_t h = 0; h < racks; ++h) {
    if (Status s = clients[h]->Init(); !s.ok()) {
      return Failed(absl::StrCat("initial weights from ", HomeName(h), ": ", s.message()));
    }
  }
  ready = true;
  std::lock_guard lock(mu);
  if (stopped) return;
  for (keys::CoreIndex core : std::set<keys::CoreIndex>(core_of.begin(), core_of.end())) {
    post(core, [](Shard& shard) { shard.OnRelayReady(); });
  }
  for (std::uint32_t h = 0; h < racks; ++h) {
    std::thread([state = shared_from_this(), h] { state->Wait(h); }).detach();
  }
}

void Uplink::State::Wait(std::uint32_t h) {
  for (;;) {
    std::uint32_t chunk;
    {
      std::unique_lock lock(mu);
      changed.wait(lock, [&] { return stopped || failed || !waiting[h].empty(); });
      if (stopped || failed) return;
      chunk = waiting[h].front();
      waiting[h].pop_front();
    }
    // Pushes of one home are answered in the order they went (the home's cores each keep it,
    // and a chunk's answer comes after its push): waiting in that order holds nothing up long.
    const Status s = clients[h]->Wait(index_in_home[chunk]);
    std::lock_guard lock(mu);
    if (!s.ok()) return FailLocked(absl::StrCat(HomeName(h), ": ", s.message()));
    if (stopped) return;
    post(core_of[chunk], [chunk](Shard& shard) { shard.OnRelayed(chunk); });
  }
}

void Uplink::Forward(keys::CoreIndex, std::uint32_t chunk, RackCount count) {
  State& s = *state_;
  if (!s.ready) {
    return s.Failed(absl::StrCat("chunk ", chunk, " of rack ", s.config.rack,
                                 " was pushed by every worker before the job's weights were sent "
                                 "(a worker pushed before it had weights): restart the job"));
  }
  const std::uint32_t h = s.home[chunk];
  // Exact on the wire: CheckRackCopies bounded the rack's workers by the format's integers.
  const std::span<float> counts = s.partial[chunk].span().last(kCountElements);
  counts[0] = static_cast<float>(count.copies);
  counts[1] = static_cast<float>(count.members);
  if (Status status = s.clients[h]->Push(s.index_in_home[chunk], s.partial[chunk].span());
      !status.ok()) {
    return s.Failed(absl::StrCat(s.HomeName(h), ": ", status.message()));
  }
  std::lock_guard lock(s.mu);
  s.waiting[h].push_back(chunk);
  s.changed.notify_all();
}

void Uplink::Initialized(keys::CoreIndex, std::uint32_t chunk, std::span<const float> weights) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  // Only rack 0's weights start the job (Connect); elsewhere the homes send them. Once Connect
  // has moved them (`initial` cleared) a late INIT changes nothing.
  if (chunk < s.initial.size()) s.initial[chunk].assign(weights.begin(), weights.end());
  ++s.initialized;
  s.changed.notify_all();
}

void Uplink::Stop() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    if (s.stopped) return;
    s.stopped = true;
    s.changed.notify_all();
  }
  // Closing says BYE and Goodbye to each home (up to seconds for one that does not read): on a
  // thread of its own, which keeps the buffers alive until the links are closed.
  std::thread([state = state_] {
    std::vector<client::PsClient*> clients;
    {
      std::lock_guard lock(state->mu);
      for (auto& client : state->clients) clients.push_back(client.get());
    }
    // One still connecting when Stop came is closed by Connect itself (it sees `stopped`).
    for (client::PsClient* client : clients) {
      if (client) (void)client->Close();  // stopping: nothing to report
    }
  }).detach();
}

}  // namespace phub::server
