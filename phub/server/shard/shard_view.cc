// Shard (shard.h), JobSpec::wire.weights (docs/design.md "The compact wire"): each chunk's
// CompactView (chunk_state.h), what every worker holds of it, and the rounded change that
// takes it to the chunk's new weights, which is what SendTo sends (shard_send.cc).
#include <algorithm>
#include <utility>

#include "phub/server/shard/shard.h"

namespace phub::server {

void Shard::EnsureView(ChunkState& state) {
  CompactView& view = state.view;
  if (view.ready) return;
  view.ready = true;
  const std::uint32_t elements = state.chunk->elements;
  if (state.previous.size() != 0 && state.iteration > 0) {
    // Loaded from a checkpoint with the previous weights: a worker may resume from those, so
    // the view of now is previous plus one rounded change, the one it will be sent.
    std::copy_n(state.previous.data(), elements, view.previous.data());
    kernels::ConvertChangeToWire(job_->wire.format, state.weights.span(), view.previous.span(),
                                 view.current.span(),
                                 reinterpret_cast<std::byte*>(view.change.data()));
    view.change_of = state.iteration;
  } else {
    std::copy_n(state.weights.data(), elements, view.current.data());
  }
}

void Shard::UpdateView(ChunkState& state, bool swapped) {
  EnsureView(state);
  CompactView& view = state.view;
  auto* change = reinterpret_cast<std::byte*>(view.change.data());
  if (swapped) {
    // The view of the iteration before becomes the previous view, as the weights did.
    std::swap(view.current, view.previous);
    kernels::ConvertChangeToWire(job_->wire.format, state.weights.span(), view.previous.span(),
                                 view.current.span(), change);
  } else {
    kernels::ConvertChangeToWire(job_->wire.format, state.weights.span(), view.current.span(),
                                 view.current.span(), change);
  }
  view.change_of = state.iteration;
}

}  // namespace phub::server
