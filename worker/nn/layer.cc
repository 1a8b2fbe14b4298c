#include "worker/nn/layer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace phub::worker {

Status Layer::AddParameter(Backend& backend, const std::string& suffix, const Shape& shape) {
  PHUB_ASSIGN_OR_RETURN(Tensor value, backend.Allocate(shape));
  PHUB_ASSIGN_OR_RETURN(Tensor grad, backend.Allocate(shape));
  PHUB_RETURN_IF_ERROR(FillConstant(backend, value, 0.0f));
  PHUB_RETURN_IF_ERROR(FillConstant(backend, grad, 0.0f));
  params_.push_back({absl::StrCat(name_, ".", suffix), std::move(value), std::move(grad)});
  return absl::OkStatus();
}

Status Layer::FillUniform(Backend& backend, Parameter& p, double bound, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-bound, bound);
  PHUB_ASSIGN_OR_RETURN(Tensor host, Tensor::Allocate(p.value.shape()));
  for (float& v : host.span()) v = static_cast<float>(dist(rng));
  return backend.CopyFromHost(host, p.value);
}

Status Layer::FillConstant(Backend& backend, Tensor& t, float value) {
  PHUB_ASSIGN_OR_RETURN(Tensor host, Tensor::Allocate(t.shape()));
  std::fill_n(host.data(), host.numel(), value);
  return backend.CopyFromHost(host, t);
}

Status Layer::Invalid(const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(Kind(), " '", name_, "': ", what));
}

Status Layer::InLayer(const Status& status, const Shape& input) const {
  if (status.ok()) return status;
  return Status(status.code(), absl::StrCat(Kind(), " '", name_, "': input ", input.ToString(),
                                            ": ", status.message()));
}

Status Layer::ExpectInputs(std::span<const Shape> inputs, std::size_t count, int rank) const {
  if (inputs.size() != count) {
    return Invalid(absl::StrCat("takes ", count, " input(s), got ", inputs.size()));
  }
  for (const Shape& s : inputs) {
    if (rank > 0 && s.rank() != rank) {
      return Invalid(absl::StrCat("expects rank-", rank, " inputs, got ", s.ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace phub::worker
