#include "worker/train/save_weights.h"

#include <fstream>

namespace phub::worker {

Status SaveWeights(Model& model, Backend& backend, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::InvalidArgumentError("cannot write --save-weights '" + path + "'");
  for (Parameter* p : model.parameters()) {
    PHUB_ASSIGN_OR_RETURN(Tensor host, Tensor::Allocate(p->value.shape()));
    PHUB_RETURN_IF_ERROR(backend.CopyToHost(p->value, host));
    out.write(reinterpret_cast<const char*>(host.span().data()),
              static_cast<std::streamsize>(host.span().size_bytes()));
  }
  out.flush();
  if (!out) return absl::InternalError("writing --save-weights '" + path + "' failed");
  return absl::OkStatus();
}

}  // namespace phub::worker
