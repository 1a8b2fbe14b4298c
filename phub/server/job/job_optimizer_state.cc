// The optimizer's state is the user's (docs/protocol.md "The optimizer's state"): a member asks
// for it and gets every chunk's state arrays in pieces (ServerOptimizer.state_dict()), or every
// member asks phubd to start the job's optimizer from a state rank 0 sends
// (ServerOptimizer.load_state_dict()). Everything a peer sends here is checked here, against
// the job's key table: nothing is allocated beyond the job's own state size.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/job.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace {

// Elements per StatePiece: 256 KiB of floats, far under any control frame limit.
constexpr std::uint32_t kPieceFloats = 65536;
// A session with more frames than this still to write is sending a state already.
constexpr std::size_t kBusyOutbox = 8;

proto::ControlMessage StateEnd(std::uint64_t steps, const std::string& error) {
  proto::ControlMessage message;
  message.mutable_state_end()->set_steps(steps);
  if (!error.empty()) message.mutable_state_end()->set_error(error);
  return message;
}

}  // namespace

void Job::OnStateRequest(const SessionPtr& session) {
  const auto refuse = [&](const std::string& why) {
    spdlog::warn("{}: rank {} asked for the optimizer's state: {}", log_name_, session->rank, why);
    Send(session, StateEnd(0, why));
  };
  if (spec_->optimizer.kind == kernels::OptimizerKind::kAverage || spec_->relay) {
    return refuse("phubd runs no optimizer for this job (summation mode, or a rack's part): "
                  "there is no state to give");
  }
  if (stalled_) return refuse("the job is stalled");
  if (session->outbox.size() > kBusyOutbox) {
    return refuse("the state asked for before is still being sent: ask once at a time");
  }
  std::vector<ChunkSnapshot> chunks(spec_->table.chunks().size());
  for (auto& core : host_.cores) {
    core->RunOnShard(spec_->session, [&](Shard& shard) {
      for (ChunkSnapshot& chunk : shard.SnapshotNow()) chunks[chunk.chunk] = std::move(chunk);
    });
  }
  const auto [low, high] = std::minmax_element(
      chunks.begin(), chunks.end(),
      [](const ChunkSnapshot& a, const ChunkSnapshot& b) { return a.iteration < b.iteration; });
  if (low->iteration != high->iteration) {
    return refuse(absl::StrCat("its chunks are at iterations ", low->iteration, " to ",
                               high->iteration, ": ask between step() and the next backward, "
                               "when every chunk has stepped the same iterations"));
  }
  const int arrays = kernels::StateArrays(spec_->optimizer.kind);
  for (const ChunkSnapshot& chunk : chunks) {
    for (int a = 0; a < arrays; ++a) {
      const std::vector<float>& values = chunk.state[a];
      for (std::size_t at = 0; at < values.size(); at += kPieceFloats) {
        const std::size_t n = std::min<std::size_t>(kPieceFloats, values.size() - at);
        proto::ControlMessage message;
        proto::StatePiece& piece = *message.mutable_state_piece();
        piece.set_chunk(chunk.chunk);
        piece.set_array(static_cast<std::uint32_t>(a));
        piece.set_offset(static_cast<std::uint32_t>(at));
        piece.set_floats(values.data() + at, n * sizeof(float));
        Send(session, message);
      }
    }
  }
  spdlog::info("{}: rank {} has the optimizer's state after {} steps", log_name_, session->rank,
               low->iteration);
  Send(session, StateEnd(low->iteration, ""));
}

void Job::OnStatePiece(const SessionPtr& session, const proto::StatePiece& piece) {
  const auto refuse = [&](const std::string& why) {
    spdlog::warn("{}: rank {}: {}", log_name_, session->rank, why);
    Refuse(session, MakeError(proto::Error::BAD_REQUEST, why,
                              "restore the optimizer's state with PsClient (rank 0 sends it)"));
  };
  if (session->rank != 0) {
    return refuse(absl::StrCat("a piece of optimizer state from rank ", session->rank,
                               ": only rank 0 sends the state to restore"));
  }
  const int arrays = kernels::StateArrays(spec_->optimizer.kind);
  const auto& table_chunks = spec_->table.chunks();
  if (!restore_) {
    restore_.emplace();
    restore_->chunks.resize(table_chunks.size());
    restore_->asked.resize(world_size_);
  }
  OptimizerStateRestore& r = *restore_;
  if (r.next_chunk >= table_chunks.size() || arrays == 0) {
    return refuse("a piece of optimizer state past the job's last chunk (or for an optimizer "
                  "without state)");
  }
  const std::uint32_t elements = table_chunks[r.next_chunk].elements;
  const std::size_t floats = piece.floats().size() / sizeof(float);
  if (piece.chunk() != r.next_chunk || piece.array() != r.next_array ||
      piece.offset() != r.next_offset || piece.floats().size() % sizeof(float) != 0 ||
      floats == 0 || floats > kPieceFloats || floats > elements - r.next_offset) {
    return refuse(absl::StrCat(
        "optimizer state piece (chunk ", piece.chunk(), ", array ", piece.array(), ", offset ",
        piece.offset(), ", ", piece.floats().size(), " bytes) where chunk ", r.next_chunk,
        ", array ", r.next_array, ", offset ", r.next_offset, " was expected (chunk of ",
        elements, " floats, pieces of 1 to ", kPieceFloats, " floats, in order)"));
  }
  std::vector<std::vector<float>>& state = r.chunks[r.next_chunk].state;
  if (state.empty()) state.assign(arrays, std::vector<float>(elements));
  std::memcpy(state[r.next_array].data() + r.next_offset, piece.floats().data(),
              floats * sizeof(float));
  r.next_offset += static_cast<std::uint32_t>(floats);
  if (r.next_offset == elements) {
    r.next_offset = 0;
    if (++r.next_array == static_cast<std::uint32_t>(arrays)) {
      r.next_array = 0;
      ++r.next_chunk;
    }
  }
}

void Job::OnStateRestore(const SessionPtr& session, const proto::StateRestore& message) {
  if (spec_->optimizer.kind == kernels::OptimizerKind::kAverage || spec_->relay) {
    return Send(session, StateEnd(0, "phubd runs no optimizer for this job (summation mode, or a "
                                "rack's part): there is no state to restore"));
  }
  if (!restore_) {
    restore_.emplace();
    restore_->chunks.resize(spec_->table.chunks().size());
    restore_->asked.resize(world_size_);
  }
  OptimizerStateRestore& r = *restore_;
  const auto rank = static_cast<std::uint32_t>(session->rank);
  if (r.asked[rank]) {
    return Refuse(session, MakeError(proto::Error::BAD_REQUEST,
                                     absl::StrCat("rank ", rank, " asked twice to restore the "
                                                  "optimizer's state"),
                                     "ask once, before the first push"));
  }
  if (r.asking > 0 && message.steps() != r.steps) {
    r.asked[rank] = session;  // answered with the others
    const std::string why = absl::StrCat("rank ", rank, " restores the optimizer's state after ",
                                         message.steps(), " steps, another rank after ", r.steps,
                                         ": every rank loads the same checkpoint");
    return AnswerRestore(0, why);
  }
  r.steps = message.steps();
  r.asked[rank] = session;
  if (++r.asking == 1) {
    const int timeout_ms = deadlines().form_timeout_ms;
    restore_timer_.expires_after(std::chrono::milliseconds(timeout_ms));
    restore_timer_.async_wait([this, alive = alive_, timeout_ms](
                                  const boost::system::error_code& ec) {
      if (ec || !*alive || !restore_) return;
      std::string missing;
      for (std::uint32_t k = 0; k < restore_->asked.size(); ++k) {
        if (!restore_->asked[k]) absl::StrAppend(&missing, missing.empty() ? "" : ", ", k);
      }
      AnswerRestore(0, absl::StrCat("rank(s) ", missing, " did not ask to restore the "
                                    "optimizer's state within ", timeout_ms,
                                    " ms (--form-timeout-ms): every rank restores it"));
    });
  }
  if (rank == 0 && kernels::StateArrays(spec_->optimizer.kind) > 0 &&
      r.next_chunk != spec_->table.chunks().size()) {
    // Its pieces came before this, on the same connection: some are missing.
    return AnswerRestore(0, absl::StrCat("rank 0 asked to restore the optimizer's state with ",
                                         r.next_chunk, " of its ", spec_->table.chunks().size(),
                                         " chunks sent"));
  }
  if (r.asking == world_size_) FinishRestore();
}

void Job::FinishRestore() {
  OptimizerStateRestore& r = *restore_;
  std::uint32_t applied = 0;
  Status failed;
  for (auto& core : host_.cores) {
    if (spec_->table.chunks_on_core(core->index()).empty()) continue;
    Status s = absl::InternalError("the core's shard is gone");
    core->RunOnShard(spec_->session,
                     [&](Shard& shard) { s = shard.RestoreState(r.steps, r.chunks); });
    if (s.ok()) {
      ++applied;
    } else if (failed.ok()) {
      failed = s;
    }
  }
  if (!failed.ok() && applied > 0) {
    // Some cores took it and others could not (a member pushed meanwhile): no consistent job.
    Stall(absl::StrCat("the optimizer's state was restored on some cores only: ",
                       failed.message()));
    return AnswerRestore(0, "the job stalled while restoring the optimizer's state");
  }
  if (!failed.ok()) return AnswerRestore(0, std::string(failed.message()));
  steps_offset_ = r.steps;
  spdlog::info("{}: the optimizer's state was restored after {} steps", log_name_, r.steps);
  AnswerRestore(r.steps, "");
}

void Job::AnswerRestore(std::uint64_t steps, const std::string& error) {
  if (!restore_) return;
  if (!error.empty()) spdlog::warn("{}: no restore of the optimizer's state: {}", log_name_, error);
  restore_timer_.cancel();
  for (const SessionPtr& member : restore_->asked) {
    if (member) Send(member, StateEnd(steps, error));
  }
  restore_.reset();
}

}  // namespace phub::server
