// PsClient's side of the optimizer's state (docs/protocol.md "The optimizer's state"): fetching
// it from phubd, piece by piece on the control connection, and restoring one. Every piece phubd
// sends is checked here, against the key table and the order pieces come in, before a byte is
// kept: what is allocated is bounded by the job's own state (at most two arrays of the model).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "phub/client/ps_client_impl.h"
#include "phub/kernels/aggregate_and_step.h"
#include "spdlog/spdlog.h"

namespace phub::client {

namespace {

// Elements per StatePiece (phubd's and ours); the most state arrays an optimizer has (Adam's).
constexpr std::uint32_t kPieceFloats = 65536;
constexpr std::uint32_t kMaxArrays = 2;
// A fetch or restore moves the state over the control connection; a phubd that answers
// nothing in this long (while heartbeats keep it "alive") is reported, not waited on.
constexpr std::chrono::seconds kStateTimeout{120};

// Keeps `piece` in `x` if it is the next one phubd may send: the next offset of the array being
// filled, else the next array of the same chunk or the first array of the next chunk (every
// chunk has as many arrays as the first). Returns what is wrong with it, or empty.
std::string TakePiece(const std::vector<keys::Chunk>& chunks,
                      StateExchange& x, const proto::StatePiece& piece) {
  const std::size_t floats = piece.floats().size() / sizeof(float);
  bool in_order;
  if (x.mid) {
    in_order = piece.chunk() == x.chunk && piece.array() == x.array && piece.offset() == x.offset;
  } else if (!x.any) {
    in_order = piece.chunk() == 0 && piece.array() == 0 && piece.offset() == 0;
  } else {
    const bool same_chunk = piece.chunk() == x.chunk && piece.array() == x.array + 1 &&
                            (x.arrays == 0 || piece.array() < x.arrays);
    const bool next_chunk = piece.chunk() == x.chunk + 1 && piece.array() == 0 &&
                            (x.arrays == 0 || x.array + 1 == x.arrays);
    in_order = (same_chunk || next_chunk) && piece.offset() == 0;
    if (in_order && next_chunk && x.arrays == 0) x.arrays = x.array + 1;
  }
  if (!in_order || piece.chunk() >= chunks.size() || piece.array() >= kMaxArrays ||
      piece.floats().size() % sizeof(float) != 0 || floats == 0 || floats > kPieceFloats ||
      piece.offset() + floats > chunks[piece.chunk()].elements) {
    return absl::StrCat("phubd sent an optimizer state piece out of place (chunk ", piece.chunk(),
                        ", array ", piece.array(), ", offset ", piece.offset(), ", ",
                        piece.floats().size(), " bytes)");
  }
  if (x.pieces.size() <= piece.array()) x.pieces.resize(piece.array() + 1);
  std::vector<std::vector<float>>& by_chunk = x.pieces[piece.array()];
  if (by_chunk.size() < chunks.size()) by_chunk.resize(chunks.size());
  std::vector<float>& values = by_chunk[piece.chunk()];
  const std::uint32_t elements = chunks[piece.chunk()].elements;
  if (values.empty()) values.resize(elements);
  std::memcpy(values.data() + piece.offset(), piece.floats().data(), floats * sizeof(float));
  x.any = true;
  x.chunk = piece.chunk();
  x.array = piece.array();
  x.offset = static_cast<std::uint32_t>(piece.offset() + floats);
  x.mid = x.offset < elements;
  return "";
}

// Whether `x` holds every array of every chunk.
bool Whole(const std::vector<keys::Chunk>& chunks, const StateExchange& x) {
  if (!x.any) return true;  // an optimizer without state
  const std::uint32_t arrays = x.arrays != 0 ? x.arrays : x.array + 1;
  return !x.mid && x.chunk + 1 == chunks.size() && x.array + 1 == arrays;
}

}  // namespace

void PsClient::Impl::OnStateMessage(const proto::ControlMessage& m) {
  std::string wrong;
  {
    std::lock_guard lock(mu_);
    if (!state_exchange_ || state_exchange_->ended) {
      wrong = "phubd sent optimizer state nobody asked for";
    } else if (m.has_state_end()) {
      state_exchange_->ended = true;
      state_exchange_->steps = m.state_end().steps();
      state_exchange_->error = m.state_end().error().substr(0, 400);
    } else if (!state_exchange_->fetching) {
      wrong = "phubd sent optimizer state while this worker restores one";
    } else {
      wrong = TakePiece(table_->chunks(), *state_exchange_, m.state_piece());
    }
  }
  if (!wrong.empty()) return RecordError(absl::InternalError(wrong));
  cv_.notify_all();
}

Status PsClient::Impl::AwaitStateEnd(std::unique_lock<std::mutex>& lock) {
  const bool ended = cv_.wait_for(lock, kStateTimeout, [&] {
    return state_exchange_->ended || !error_.status().ok();
  });
  if (!error_.status().ok()) return error_.status();
  if (!ended) {
    return absl::DeadlineExceededError(absl::StrCat(
        "phubd did not finish sending or restoring the optimizer's state within ",
        kStateTimeout.count(), " s"));
  }
  if (!state_exchange_->error.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("phubd: ", state_exchange_->error));
  }
  return absl::OkStatus();
}

StatusOr<OptimizerState> PsClient::Impl::FetchOptimizerState() {
  {
    std::lock_guard lock(mu_);
    if (!error_.status().ok()) return error_.status();
    if (state_exchange_) {
      return absl::FailedPreconditionError("the optimizer's state is already being exchanged");
    }
    state_exchange_.emplace();
    state_exchange_->fetching = true;
  }
  proto::ControlMessage request;
  request.mutable_state_request();
  loop_.Post([this, request] { SendControl(request); });
  std::unique_lock lock(mu_);
  const Status ended = AwaitStateEnd(lock);
  StateExchange x = std::move(*state_exchange_);
  state_exchange_.reset();
  PHUB_RETURN_IF_ERROR(ended);
  const auto& chunks = table_->chunks();
  if (!Whole(chunks, x)) {
    return absl::InternalError(absl::StrCat("phubd ended the optimizer's state after chunk ",
                                            x.chunk, " of ", chunks.size(), ": it is incomplete"));
  }
  if (options_.optimizer &&
      x.pieces.size() != static_cast<std::size_t>(kernels::StateArrays(options_.optimizer->kind))) {
    return absl::InternalError(absl::StrCat("phubd sent ", x.pieces.size(),
                                            " state arrays; the job's optimizer has ",
                                            kernels::StateArrays(options_.optimizer->kind)));
  }
  OptimizerState state;
  state.steps = x.steps;
  state.arrays.resize(x.pieces.size());
  for (std::size_t a = 0; a < x.pieces.size(); ++a) {
    for (const keys::TensorSpec& t : table_->tensors()) {
      state.arrays[a].emplace_back(t.elements);
    }
    for (const keys::Chunk& chunk : chunks) {
      std::copy(x.pieces[a][chunk.id].begin(), x.pieces[a][chunk.id].end(),
                state.arrays[a][chunk.tensor].begin() + chunk.offset);
    }
  }
  return state;
}

Status PsClient::Impl::RestoreOptimizerState(const OptimizerState& state) {
  const auto& tensors = table_->tensors();
  {
    std::lock_guard lock(mu_);
    if (pushed_iteration_ != resume_iteration_) {
      return absl::FailedPreconditionError(
          "RestoreOptimizerState after a Push: restore it after Init, before the first Push");
    }
  }
  if (membership_.rank == 0) {
    if (state.arrays.size() > kMaxArrays ||
        (options_.optimizer && state.arrays.size() != static_cast<std::size_t>(
                                                         kernels::StateArrays(options_.optimizer->kind)))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the state has ", state.arrays.size(), " arrays; the job's optimizer keeps ",
          options_.optimizer ? kernels::StateArrays(options_.optimizer->kind) : -1));
    }
    for (std::size_t a = 0; a < state.arrays.size(); ++a) {
      if (state.arrays[a].size() != tensors.size()) {
        return absl::InvalidArgumentError(absl::StrCat("state array ", a, " has ",
                                                       state.arrays[a].size(),
                                                       " tensors; the model has ", tensors.size()));
      }
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        if (state.arrays[a][t].size() != tensors[t].elements) {
          return absl::InvalidArgumentError(absl::StrCat(
              "state array ", a, " of tensor ", t, " ('", tensors[t].name, "') has ",
              state.arrays[a][t].size(), " floats; the tensor has ", tensors[t].elements));
        }
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    if (!error_.status().ok()) return error_.status();
    if (state_exchange_) {
      return absl::FailedPreconditionError("the optimizer's state is already being exchanged");
    }
    state_exchange_.emplace();
  }
  // Rank 0's pieces in phubd's order (chunk by chunk, array by array), then the request.
  std::vector<proto::ControlMessage> messages;
  if (membership_.rank == 0) {
    for (const keys::Chunk& chunk : table_->chunks()) {
      for (std::size_t a = 0; a < state.arrays.size(); ++a) {
        const float* values = state.arrays[a][chunk.tensor].data() + chunk.offset;
        for (std::uint32_t at = 0; at < chunk.elements; at += kPieceFloats) {
          const std::uint32_t n = std::min(kPieceFloats, chunk.elements - at);
          proto::ControlMessage& m = messages.emplace_back();
          proto::StatePiece& piece = *m.mutable_state_piece();
          piece.set_chunk(chunk.id);
          piece.set_array(static_cast<std::uint32_t>(a));
          piece.set_offset(at);
          piece.set_floats(values + at, n * sizeof(float));
        }
      }
    }
  }
  messages.emplace_back().mutable_state_restore()->set_steps(state.steps);
  loop_.Post([this, messages = std::move(messages)] {
    for (const proto::ControlMessage& m : messages) SendControl(m);
  });
  std::unique_lock lock(mu_);
  const Status ended = AwaitStateEnd(lock);
  state_exchange_.reset();
  if (ended.ok()) {
    spdlog::info("rank {}: phubd restored the optimizer's state after {} steps", membership_.rank,
                 state.steps);
  }
  return ended;
}

}  // namespace phub::client
