#include "phub/server/shard/shard.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace phub::server {

using transport::Connection;
using transport::Op;
using transport::WireHeader;

namespace {

std::span<std::byte> AsBytes(float* data, std::size_t elements) {
  return {reinterpret_cast<std::byte*>(data), elements * sizeof(float)};
}

}  // namespace

Shard::Shard(std::shared_ptr<const JobSpec> job, keys::CoreIndex core, EventSink sink,
             const CoreMetrics* metrics, FairSendQueue* fair)
    : job_(std::move(job)), core_(core), sink_(std::move(sink)), metrics_(metrics), fair_(fair) {
  const keys::KeyTable& table = job_->table;
  const std::uint32_t world = job_->world_size;
  const int state_arrays = kernels::StateArrays(job_->optimizer.kind);

  // Where each tensor starts in the flattened model, for weights loaded from a file.
  std::vector<std::uint64_t> tensor_start(table.tensors().size() + 1, 0);
  for (std::size_t t = 0; t < table.tensors().size(); ++t) {
    tensor_start[t + 1] = tensor_start[t] + table.tensors()[t].elements;
  }

  local_index_.assign(table.chunks().size(), -1);
  const auto& mine = table.chunks_on_core(core_);
  chunks_.resize(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const keys::Chunk& chunk = table.chunks()[mine[i]];
    ChunkState& state = chunks_[i];
    state.chunk = &chunk;
    state.slots = MakeSlots(world, chunk.elements, job_->wire);
    if (job_->wire_weights) {
      state.change = MakeWireBuffer(chunk.elements, job_->wire);
      state.view = AlignedBuffer(chunk.elements);
      if (job_->keep_previous) state.view_previous = AlignedBuffer(chunk.elements);
    }
    state.weights = AlignedBuffer(chunk.elements);
    for (int s = 0; s < state_arrays; ++s) state.state.emplace_back(chunk.elements);
    state.pushed.assign(world, 0);
    state.replay.assign(world, kNone);
    if (job_->keep_previous) state.previous = AlignedBuffer(chunk.elements);
    // Weights that come from another rack: nobody here may INIT them (ResolveSlot).
    if (job_->weights_from_upstream) state.initialized = true;
    if (job_->resume) {
      LoadSnapshot(state, job_->resume->chunks[chunk.id]);
    } else if (!job_->initial_weights.empty()) {
      std::memcpy(state.weights.data(),
                  job_->initial_weights.data() + tensor_start[chunk.tensor] + chunk.offset,
                  chunk.bytes());
      state.initialized = true;
    }
    local_index_[chunk.id] = static_cast<std::int32_t>(i);
  }
  workers_.resize(world);
  senders_.resize(world);
  said_bye_.assign(world, 0);
  seen_.assign(world, 0);
  forgotten_.assign(world, 0);
  push_kind_.assign(world, PushKind::kCount);
  resume_at_.assign(world, job_->resume ? job_->resume_iteration : kNoResume);
  replay_through_.assign(world, job_->resume ? job_->resume_iteration + 1 : 0);
  start_at_.assign(world, job_->resume ? job_->resume_iteration : 0);

  inputs_.resize(world);
  state_ptrs_.resize(state_arrays);
  if (metrics_) metrics_->chunks->Set(static_cast<double>(chunks_.size()));
  spdlog::debug("job '{}' core {}: shard holds {} chunks, {} bytes of weights", job_->name,
                core_, chunks_.size(), table.bytes_on_core(core_));
}

Shard::~Shard() {
  CloseAll(absl::OkStatus());
  if (metrics_) metrics_->chunks->Set(0);
}

void Shard::CountReceived(std::uint64_t bytes, bool push) {
  stats_.bytes_in += bytes;
  if (!metrics_) return;
  metrics_->received_bytes->Add(bytes);
  if (!push) return;
  metrics_->pushes->Add();
  if (!round_began_) round_began_ = std::chrono::steady_clock::now();
}

void Shard::CountSent(std::uint64_t bytes) {
  stats_.bytes_out += bytes;
  if (metrics_) metrics_->sent_bytes->Add(bytes);
}

void Shard::CountAggregation(std::chrono::steady_clock::time_point began) {
  ++stats_.aggregations;
  if (!metrics_) return;
  const auto now = std::chrono::steady_clock::now();
  metrics_->aggregations->Add();
  metrics_->aggregation_seconds->Observe(std::chrono::duration<double>(now - began).count());
  if (++round_aggregations_ < chunks_.size()) return;
  // As many aggregations as chunks: every chunk moved one iteration (chunks run at most one
  // iteration apart: a worker pushes iteration t+1 after it has all weights of t).
  if (round_began_) {
    metrics_->round_seconds->Observe(std::chrono::duration<double>(now - *round_began_).count());
  }
  round_began_ = now;
  round_aggregations_ = 0;
}

std::vector<std::span<std::byte>> Shard::Buffers() {
  std::vector<std::span<std::byte>> buffers;
  for (ChunkState& state : chunks_) {
    buffers.push_back(AsBytes(state.slots.data(), state.slots.size()));
    buffers.push_back(AsBytes(state.weights.data(), state.weights.size()));
    for (AlignedBuffer* b : {&state.previous, &state.view, &state.view_previous, &state.change}) {
      if (b->size() != 0) buffers.push_back(AsBytes(b->data(), b->size()));
    }
  }
  return buffers;
}

StatusOr<std::vector<transport::LandingZone>> Shard::LandingZones(const Connection&,
                                                                  const WireHeader* attach) {
  if (attach == nullptr) {
    return absl::InvalidArgumentError("a data connection must say who it is (ATTACH) first");
  }
  PHUB_RETURN_IF_ERROR(CheckAttach(*attach));
  const std::uint32_t rank = attach->worker;
  std::vector<transport::LandingZone> zones;
  for (ChunkState& state : chunks_) {
    const std::uint32_t elements = state.chunk->elements;
    // A worker that resumes pushes every chunk from the iteration after its resume point.
    const std::uint64_t next_push =
        resume_at_[rank] != kNoResume ? resume_at_[rank] + 1 : state.iteration + 1;
    zones.push_back({Op::kPush, rank, state.chunk->id, next_push,
                     SlotOf(state.slots, rank, elements, job_->wire)});
    if (rank == 0 && !state.initialized) {
      zones.push_back({Op::kInit, 0, state.chunk->id, 0, AsBytes(state.weights.data(), elements)});
    }
  }
  return zones;
}

void Shard::Adopt(std::shared_ptr<Connection> connection) {
  unattached_.push_back(connection);
  connection->Start();
}

Status Shard::AdoptAttached(std::shared_ptr<Connection> connection, const WireHeader& attach) {
  unattached_.push_back(connection);
  return Attach(*connection, attach);
}

void Shard::CloseAll(const Status& why) {
  closing_ = true;
  // Close() calls back into OnClosed, which edits these lists: work on copies.
  auto unattached = unattached_;
  auto workers = workers_;
  for (auto& c : unattached) c->Close(why);
  for (auto& c : workers) {
    if (c) c->Close(why);
  }
}

StatusOr<Shard::ChunkState*> Shard::FindChunk(const WireHeader& header) {
  if (header.chunk >= local_index_.size() || local_index_[header.chunk] < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(header.op), " for chunk ", header.chunk, " which core ", core_,
        " does not own (the job has ", local_index_.size(),
        " chunks): the worker's key table disagrees with phubd's"));
  }
  ChunkState& state = chunks_[local_index_[header.chunk]];
  // Pushes travel in the job's wire format; INIT (rank 0's initial weights) in float32.
  const std::uint64_t expected =
      header.op == Op::kPush
          ? std::uint64_t{state.chunk->elements} * kernels::WireBytes(job_->wire)
          : state.chunk->bytes();
  if (header.payload_bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(header.op), " of chunk ", header.chunk, " carries ", header.payload_bytes,
        " bytes; the chunk has ", expected,
        header.op == Op::kPush && job_->wire != kernels::WireFormat::kFp32
            ? absl::StrCat(" (", state.chunk->elements, " elements in the job's ",
                           kernels::WireFormatName(job_->wire), ")")
            : std::string()));
  }
  return &state;
}

StatusOr<std::span<std::byte>> Shard::ResolveSlot(Connection& connection,
                                                  const WireHeader& header) {
  // The one validation point of every message a worker sends this core: OnReceived trusts
  // what passes here.
  if (connection.tag() < 0) {
    PHUB_RETURN_IF_ERROR(CheckAttach(header));
    return std::span<std::byte>{};
  }
  const auto rank = static_cast<std::uint32_t>(connection.tag());
  if (said_bye_[rank]) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(header.op), " from rank ", rank, " after its BYE: the connection closes next"));
  }
  if (header.worker != rank) {
    return absl::InvalidArgumentError(absl::StrCat(OpName(header.op), " names worker ",
                                                   header.worker, " on the connection of rank ",
                                                   rank));
  }
  switch (header.op) {
    case Op::kPush: {
      PHUB_ASSIGN_OR_RETURN(ChunkState * state, FindChunk(header));
      if (!state->initialized) {
        return absl::FailedPreconditionError(absl::StrCat(
            "PUSH of chunk ", header.chunk, " before its initial weights arrived from rank 0"));
      }
      push_kind_[rank] = PushKind::kCount;
      if (header.iteration != state->iteration + 1 || state->pushed[rank]) {
        // A worker back from a failure replays the iteration in flight: a copy that already
        // counts is dropped. It lands in the worker's slot all the same (over verbs it is
        // written there before this runs): either that slot is free until its next push, or
        // it holds the same bits (the replay computes them again from the same weights and data).
        if (std::optional<PushKind> replay = ReplayOf(rank, header, *state)) {
          push_kind_[rank] = *replay;
          return SlotOf(state->slots, rank, state->chunk->elements, job_->wire);
        }
      }
      if (header.iteration != state->iteration + 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PUSH of chunk ", header.chunk, " for iteration ", header.iteration,
            "; the chunk expects iteration ", state->iteration + 1));
      }
      if (state->pushed[rank]) {
        return absl::InvalidArgumentError(absl::StrCat("second PUSH of chunk ", header.chunk,
                                                       " in iteration ", header.iteration));
      }
      return SlotOf(state->slots, rank, state->chunk->elements, job_->wire);
    }
    case Op::kInit: {
      if (rank != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("INIT from rank ", rank, ": only rank 0 sends initial weights"));
      }
      PHUB_ASSIGN_OR_RETURN(ChunkState * state, FindChunk(header));
      if (header.iteration != 0) {
        return absl::InvalidArgumentError(absl::StrCat("INIT of chunk ", header.chunk,
                                                       " for iteration ", header.iteration,
                                                       "; initial weights are iteration 0"));
      }
      if (state->initialized) {
        return absl::InvalidArgumentError(absl::StrCat(
            "INIT of chunk ", header.chunk,
            " which already has weights (sent before, or loaded by phubd from a file)"));
      }
      return AsBytes(state->weights.data(), state->chunk->elements);
    }
    case Op::kBye:
      if (header.payload_bytes != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("BYE from rank ", rank, " carries ", header.payload_bytes, " bytes"));
      }
      return std::span<std::byte>{};
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected ", OpName(header.op), " from rank ", rank,
          header.op == Op::kAttach ? " (already attached)" : ""));
  }
}

Status Shard::CheckAttach(const WireHeader& header) const {
  if (header.op != Op::kAttach) {
    return absl::InvalidArgumentError(
        absl::StrCat("first message must be ATTACH, got ", OpName(header.op)));
  }
  if (header.payload_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ATTACH carries ", header.payload_bytes, " bytes; it has no payload"));
  }
  if (header.chunk != core_) {
    return absl::InvalidArgumentError(absl::StrCat("ATTACH for core ", header.chunk,
                                                   " reached core ", core_));
  }
  if (header.iteration != job_->session) {
    return absl::PermissionDeniedError(
        "ATTACH with a session that is not the running job's: connect through the handshake");
  }
  if (header.worker >= job_->world_size) {
    return absl::InvalidArgumentError(absl::StrCat("ATTACH from rank ", header.worker,
                                                   " in a job of ", job_->world_size));
  }
  if (workers_[header.worker]) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", header.worker, " is already attached to core ", core_));
  }
  if (seen_[header.worker] && resume_at_[header.worker] == kNoResume) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", header.worker, " attaches to core ", core_,
        " again without rejoining: a worker that lost its connection says Hello again"));
  }
  return absl::OkStatus();
}

Status Shard::Attach(Connection& connection, const WireHeader& header) {
  PHUB_RETURN_IF_ERROR(CheckAttach(header));
  auto it = std::find_if(unattached_.begin(), unattached_.end(),
                         [&](const auto& c) { return c.get() == &connection; });
  if (it == unattached_.end()) return absl::InternalError("ATTACH on a connection never adopted");
  workers_[header.worker] = *it;
  senders_[header.worker] = transport::SendScheduler::Create(*it, job_->send_window_bytes);
  unattached_.erase(it);
  connection.set_tag(header.worker);
  seen_[header.worker] = 1;
  ++attached_;
  if (resume_at_[header.worker] != kNoResume) SendResumeWeights(header.worker);
  spdlog::debug("job '{}' core {}: rank {} attached from {} ({}/{})", job_->name, core_,
                header.worker, connection.peer(), attached_, job_->world_size);
  if (all_attached()) {
    sink_(ShardEvent{.kind = ShardEvent::Kind::kAllAttached, .core = core_});
    for (ChunkState& state : chunks_) {
      if (Announceable(state)) Broadcast(state);
    }
  }
  return absl::OkStatus();
}

Status Shard::OnReceived(Connection& connection, const WireHeader& header) {
  // ResolveSlot accepted this message just before: no check is repeated here.
  if (connection.tag() < 0) return Attach(connection, header);
  const auto rank = static_cast<std::uint32_t>(connection.tag());
  switch (header.op) {
    case Op::kPush: {
      ChunkState& state = chunks_[local_index_[header.chunk]];
      CountReceived(header.payload_bytes, /*push=*/true);
      state.replay[rank] = kNone;  // its replay of this chunk, if it owed one, is in
      if (push_kind_[rank] == PushKind::kReplayDone) {
        SendTo(rank, state, state.weights, state.iteration);
        return absl::OkStatus();
      }
      if (push_kind_[rank] == PushKind::kReplayCounted) {
        // The chunk may have completed the iteration while this copy was arriving: its
        // broadcast skipped this worker (held for its replay), so the answer goes now.
        if (state.iteration == header.iteration) {
          SendTo(rank, state, state.weights, state.iteration);
        }
        return absl::OkStatus();
      }
      state.pushed[rank] = 1;
      ++state.arrived;
      MaybeAggregate(state);
      CheckCompletable(state);
      return absl::OkStatus();
    }
    case Op::kInit: {
      ChunkState& state = chunks_[local_index_[header.chunk]];
      state.initialized = true;
      CountReceived(header.payload_bytes, /*push=*/false);
      if (job_->relay) job_->relay->Initialized(core_, state.chunk->id, state.weights.span());
      if (Announceable(state)) Broadcast(state);
      return absl::OkStatus();
    }
    case Op::kBye:
      said_bye_[rank] = 1;
      for (const ChunkState& state : chunks_) CheckCompletable(state);
      return absl::OkStatus();
    default:
      return absl::InternalError(absl::StrCat(OpName(header.op), " from rank ", rank,
                                              " passed ResolveSlot"));
  }
}

bool Shard::Announceable(const ChunkState& state) const {
  return state.initialized && !state.announced && all_attached() &&
         (!job_->relay || state.relay_ready);
}

void Shard::MaybeAggregate(ChunkState& state) {
  if (state.arrived < job_->world_size || state.pending_sends > 0) return;
  const auto began = std::chrono::steady_clock::now();
  const std::uint32_t elements = state.chunk->elements;
  for (std::size_t s = 0; s < state_ptrs_.size(); ++s) state_ptrs_[s] = state.state[s].data();
  if (job_->relay) {
    // The rack's sum (kAverage over one copy) goes on to the chunk's home PBox; the chunk
    // waits for its weights as it waits for a send (OnRelayed).
    AggregateSlots(job_->wire, state.slots, job_->world_size, elements,
                   std::as_const(state.weights).span(), job_->relay->Partial(state.chunk->id),
                   state_ptrs_, job_->optimizer, state.iteration + 1, inputs_);
    state.arrived = 0;
    std::fill(state.pushed.begin(), state.pushed.end(), 0);
    CountAggregation(began);
    ++state.pending_sends;
    job_->relay->Forward(core_, state.chunk->id);
    return;
  }
  if (state.previous.size() != 0) {
    // Kept for a rejoin: the new weights go to the other buffer and the two trade places, so
    // keeping the previous weights costs no copy (no send of either is queued: see above).
    AggregateSlots(job_->wire, state.slots, job_->world_size, elements,
                   std::as_const(state.weights).span(), state.previous.span(), state_ptrs_,
                   job_->optimizer, state.iteration + 1, inputs_);
    std::swap(state.weights, state.previous);
  } else {
    AggregateSlots(job_->wire, state.slots, job_->world_size, elements, {},
                   state.weights.span(), state_ptrs_, job_->optimizer, state.iteration + 1,
                   inputs_);
  }
  ++state.iteration;
  if (job_->wire_weights) UpdateView(state, /*swapped=*/state.previous.size() != 0);
  state.arrived = 0;
  std::fill(state.pushed.begin(), state.pushed.end(), 0);
  CountAggregation(began);
  if (job_->checkpoint_every > 0 && state.iteration % job_->checkpoint_every == 0) {
    CopyForCheckpoint(state);
  }
  Broadcast(state);
}

void Shard::OnRelayReady() {
  for (ChunkState& state : chunks_) {
    // Nothing is sent from the weights before this: the chunk was not announced.
    const std::span<const float> landed = job_->relay->Landed(state.chunk->id);
    std::copy(landed.begin(), landed.end(), state.weights.data());
    state.relay_ready = true;
    state.initialized = true;
    if (Announceable(state)) Broadcast(state);
  }
}

void Shard::OnRelayed(std::uint32_t chunk) {
  if (chunk >= local_index_.size() || local_index_[chunk] < 0) return;
  ChunkState& state = chunks_[local_index_[chunk]];
  // No send of the weights is queued: the chunk aggregated (MaybeAggregate waits for them).
  const std::span<const float> landed = job_->relay->Landed(chunk);
  std::copy(landed.begin(), landed.end(), state.weights.data());
  --state.pending_sends;
  ++state.iteration;
  if (job_->wire_weights) UpdateView(state, /*swapped=*/false);
  Broadcast(state);
}

void Shard::CheckCompletable(const ChunkState& state) {
  if (reported_left_early_ || state.arrived == 0) return;
  for (std::uint32_t w = 0; w < job_->world_size; ++w) {
    if (!said_bye_[w] || state.pushed[w]) continue;
    reported_left_early_ = true;
    const std::string reason = absl::StrCat(
        "rank ", w, " left (BYE) but chunk ", state.chunk->id, " of iteration ",
        state.iteration + 1, " has pushes from other workers and needs rank ", w, "'s too");
    spdlog::warn("job '{}' core {}: {}", job_->name, core_, reason);
    sink_(ShardEvent{
        .kind = ShardEvent::Kind::kLeftEarly, .core = core_, .rank = w, .reason = reason});
    return;
  }
}

void Shard::Broadcast(ChunkState& state) {
  state.announced = true;
  // Without pacing the queue never holds a unit: send at once, as a job alone always did.
  if (fair_ == nullptr || fair_->pacing().bytes_per_s <= 0) return SendToAll(state, nullptr);
  // The unit of fairness: one chunk to every worker (what it costs the core's NIC).
  const std::size_t cost = std::size_t{state.chunk->bytes()} * job_->world_size;
  // The chunk waits for its turn as it waits for its sends: it does not aggregate meanwhile
  // (so `state` stays as it is; a job's end drops its turns with its flow).
  ++state.pending_sends;
  const bool queued = fair_->Submit(job_->session, cost, [this, &state, cost] {
    --state.pending_sends;
    FairSendQueue* fair = fair_;
    const std::uint64_t flow = job_->session;
    SendToAll(state, [fair, flow, cost] { fair->Done(flow, cost); });
    MaybeAggregate(state);  // nothing was sent (every worker gone): the chunk must not wait
  });
  if (!queued) --state.pending_sends;  // the core stops sending for this job (phubd stops)
}

void Shard::SendToAll(ChunkState& state, std::function<void()> sent) {
  if (!sent) {
    for (std::uint32_t w = 0; w < job_->world_size; ++w) {
      SendTo(w, state, state.weights, state.iteration);
    }
    return;
  }
  // `sent` runs once every send has completed (the count starts at 1 so that sends completing
  // at once cannot run it before the loop is done).
  auto left = std::make_shared<std::uint32_t>(1);
  auto one_done = [left, sent = std::move(sent)] {
    if (--*left == 0 && sent) sent();
  };
  for (std::uint32_t w = 0; w < job_->world_size; ++w) {
    ++*left;
    if (!SendTo(w, state, state.weights, state.iteration, one_done)) --*left;
  }
  one_done();
}

bool Shard::SendTo(std::uint32_t rank, ChunkState& state, const AlignedBuffer& source,
                   std::uint64_t iteration, std::function<void()> sent) {
  if (!workers_[rank] || workers_[rank]->closed()) return false;
  if (state.replay[rank] == kHeld) return false;  // answered when its replay arrives
  Op op = Op::kWeights;
  const AlignedBuffer* from = &source;
  std::size_t bytes = state.chunk->bytes();
  if (job_->wire_weights) {
    // What the workers hold instead of the master weights: whole for a worker's first weights,
    // else the rounded change that took its view to `iteration` (computed once, when the chunk
    // aggregated: no send of it is queued when it is rewritten, MaybeAggregate waits).
    EnsureView(state);
    if (iteration == start_at_[rank]) {
      op = Op::kInit;
      from = &source == &state.weights ? &state.view : &state.view_previous;
    } else if (&source == &state.weights && iteration == state.change_of) {
      from = &state.change;
      bytes = std::size_t{state.chunk->elements} * kernels::WireBytes(job_->wire);
    } else {
      spdlog::error("job '{}' core {}: rank {} started at iteration {}; chunk {}'s change is of "
                    "{}, not {}",
                    job_->name, core_, rank, start_at_[rank], state.chunk->id, state.change_of, iteration);
      workers_[rank]->Close(absl::InternalError(absl::StrCat(
          "phubd has no change of chunk ", state.chunk->id, " to iteration ", iteration,
          " for rank ", rank, ": rejoin the job")));
      return false;
    }
  }
  auto payload = std::span<const std::byte>(reinterpret_cast<const std::byte*>(from->data()), bytes);
  WireHeader header{op, rank, state.chunk->id, iteration, static_cast<std::uint32_t>(bytes)};
  // The chunk does not aggregate (which rewrites weights, previous, views and the change)
  // while a send is queued.
  ++state.pending_sends;
  senders_[rank]->Send(header, payload,
                       [this, &state, bytes, sent = std::move(sent)](const Status& status) {
                         --state.pending_sends;
                         if (status.ok()) CountSent(bytes);
                         if (sent) sent();
                         MaybeAggregate(state);
                       });
  return true;
}

void Shard::EnsureView(ChunkState& state) {
  if (state.view_ready) return;
  state.view_ready = true;
  const std::uint32_t elements = state.chunk->elements;
  if (state.previous.size() != 0 && state.iteration > 0) {
    // Loaded from a checkpoint with the previous weights: a worker may resume from those, so
    // the view of now is previous plus one rounded change, the one it will be sent.
    std::copy_n(state.previous.data(), elements, state.view_previous.data());
    kernels::ConvertChangeToWire(job_->wire, state.weights.span(), state.view_previous.span(),
                                 state.view.span(), reinterpret_cast<std::byte*>(state.change.data()));
    state.change_of = state.iteration;
  } else {
    std::copy_n(state.weights.data(), elements, state.view.data());
  }
}

void Shard::UpdateView(ChunkState& state, bool swapped) {
  EnsureView(state);
  auto* change = reinterpret_cast<std::byte*>(state.change.data());
  if (swapped) {
    // The view of the iteration before becomes view_previous, as the weights did.
    std::swap(state.view, state.view_previous);
    kernels::ConvertChangeToWire(job_->wire, state.weights.span(), state.view_previous.span(),
                                 state.view.span(), change);
  } else {
    kernels::ConvertChangeToWire(job_->wire, state.weights.span(), state.view.span(),
                                 state.view.span(), change);
  }
  state.change_of = state.iteration;
}

void Shard::OnClosed(Connection& connection, const Status& why) {
  if (connection.tag() < 0) {
    auto it = std::find_if(unattached_.begin(), unattached_.end(),
                           [&](const auto& c) { return c.get() == &connection; });
    if (it != unattached_.end()) unattached_.erase(it);
    if (!closing_) {
      spdlog::warn("job '{}' core {}: dropped connection from {}: {}", job_->name, core_,
                   connection.peer(),
                   why.message());
      sink_(ShardEvent{.kind = ShardEvent::Kind::kBadPeer,
                       .core = core_,
                       .reason = std::string(why.message())});
    }
    return;
  }
  const auto rank = static_cast<std::uint32_t>(connection.tag());
  // The slot in workers_ stays: only ForgetWorker frees it (and it closes the connection it
  // forgets without a report).
  if (closing_ || said_bye_[rank] || workers_[rank].get() != &connection) return;
  spdlog::warn("job '{}' core {}: lost rank {} ({}): {}", job_->name, core_, rank,
               connection.peer(), why.message());
  ShardEvent lost{.kind = ShardEvent::Kind::kWorkerLost,
                  .core = core_,
                  .rank = rank,
                  .reason = std::string(why.message())};
  lost.epoch = forgotten_[rank];
  sink_(std::move(lost));
}

}  // namespace phub::server
