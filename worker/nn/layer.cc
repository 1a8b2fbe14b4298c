#include "worker/nn/layer.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace phub::worker {

Parameter& Layer::AddParameter(Backend& backend, const std::string& suffix, const Shape& shape) {
  params_.push_back({absl::StrCat(name_, ".", suffix), backend.Allocate(shape),
                     backend.Allocate(shape)});
  FillConstant(backend, params_.back().value, 0.0f);
  FillConstant(backend, params_.back().grad, 0.0f);
  return params_.back();
}

void Layer::FillUniform(Backend& backend, Parameter& p, double bound, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-bound, bound);
  Tensor host = Tensor::Empty(p.value.shape());
  for (float& v : host.span()) v = static_cast<float>(dist(rng));
  backend.CopyFromHost(host, p.value);
}

void Layer::FillConstant(Backend& backend, Tensor& t, float value) {
  backend.CopyFromHost(Tensor::Filled(t.shape(), value), t);
}

void Layer::Fail(const std::string& what) const {
  throw std::invalid_argument(absl::StrCat(Kind(), " '", name_, "': ", what));
}

void Layer::ExpectInputs(std::span<const Shape> inputs, std::size_t count, int rank) const {
  if (inputs.size() != count) {
    Fail(absl::StrCat("takes ", count, " input(s), got ", inputs.size()));
  }
  for (const Shape& s : inputs) {
    if (rank > 0 && s.rank() != rank) {
      Fail(absl::StrCat("expects rank-", rank, " inputs, got ", s.ToString()));
    }
  }
}

}  // namespace phub::worker
