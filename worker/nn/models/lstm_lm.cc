#include "worker/nn/layers/layers.h"
#include "worker/nn/models/models.h"

namespace phub::worker {

std::unique_ptr<Model> MakeLstmLanguageModel(std::int64_t batch, std::int64_t seq_len) {
  constexpr std::int64_t kVocab = 10000, kHidden = 256;
  auto m = std::make_unique<Model>("lstm", Shape{seq_len, batch}, kVocab);
  Model::NodeId x = m->Add(std::make_unique<Embedding>("embed", kVocab, kHidden), Model::kInput);
  x = m->Add(std::make_unique<Lstm>("lstm1", kHidden), x);
  x = m->Add(std::make_unique<Lstm>("lstm2", kHidden), x);
  m->Add(std::make_unique<Linear>("decoder", kVocab), x);  // every step: [T*N, vocab] logits
  return m;
}

}  // namespace phub::worker
