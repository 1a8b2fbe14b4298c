#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/nn/models/models.h"

namespace phub::worker {

std::vector<std::string> ModelNames() {
  return {"fashion-cnn", "fcn5", "alexnet", "resnet56", "resnet50", "lstm"};
}

StatusOr<std::unique_ptr<Model>> MakeModel(const std::string& name, std::int64_t batch) {
  if (batch < 1) return absl::InvalidArgumentError(absl::StrCat("batch ", batch, " must be >= 1"));
  if (name == "fashion-cnn") return MakeFashionCnn(batch);
  if (name == "fcn5") return MakeFcn5(batch);
  if (name == "alexnet") return MakeAlexNet(batch);
  if (name == "resnet56") return MakeResNet56(batch);
  if (name == "resnet50") return MakeResNet50(batch);
  if (name == "lstm") return MakeLstmLanguageModel(batch);
  return absl::InvalidArgumentError("unknown model '" + name + "': use one of " +
                                    absl::StrJoin(ModelNames(), ", "));
}

}  // namespace phub::worker
