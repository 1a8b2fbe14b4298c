#include "phub/server/admission/hello_check.h"

#include "phub/server/checkpoint/checkpoint_file.h"

#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"
#include "phub/common/version.h"
#include "phub/kernels/lr_scaling.h"

namespace phub::server {
proto::Error MakeError(proto::Error::Code code, std::string message, std::string fix) {
  proto::Error error;
  error.set_code(code);
  // Messages may quote what a peer sent: never more than a bounded amount of it.
  error.set_message(Bounded(message, kMaxErrorTextBytes));
  error.set_fix(Bounded(fix, kMaxErrorTextBytes));
  return error;
}

namespace {

std::string Describe(const proto::TensorSpec& t) {
  return absl::StrCat("'", Escaped(t.name()), "' of ", t.elements(), " elements");
}

}  // namespace

StatusOr<kernels::WireFormat> JobWireFormat(const proto::Hello& hello) {
  if (hello.wire().empty()) return kernels::WireFormat::kFp32;
  // A peer's string: bounded before it is quoted back.
  if (hello.wire().size() > 16) {
    return absl::InvalidArgumentError(absl::StrCat("wire format of ", hello.wire().size(),
                                                   " bytes: use fp32, bf16 or fp16"));
  }
  return kernels::ParseWireFormat(hello.wire());
}

StatusOr<kernels::OptimizerConfig> JobOptimizer(const proto::Hello& hello,
                                                const kernels::OptimizerConfig& default_optimizer) {
  if (!hello.has_optimizer()) return default_optimizer;
  const proto::OptimizerSpec& spec = hello.optimizer();
  StatusOr<kernels::OptimizerKind> kind = kernels::ParseOptimizerKind(Bounded(spec.kind(), 64));
  if (!kind.ok()) return kind.status();
  const kernels::OptimizerConfig config{.kind = *kind,
                                        .lr = spec.lr(),
                                        .momentum = spec.momentum(),
                                        .weight_decay = spec.weight_decay(),
                                        .beta1 = spec.beta1(),
                                        .beta2 = spec.beta2(),
                                        .eps = spec.eps()};
  PHUB_RETURN_IF_ERROR(kernels::Validate(config));
  return config;
}

std::string OptimizerIdentity(const proto::Hello& hello, const kernels::OptimizerConfig& config) {
  if (!hello.per_iteration_values()) return kernels::Describe(config);
  return absl::StrCat(kernels::OptimizerName(config.kind), " (hyper-parameters per iteration)");
}

std::optional<proto::Error> CheckPerIterationValues(const proto::Hello& hello,
                                                    const kernels::OptimizerConfig& optimizer) {
  if (!hello.per_iteration_values()) return std::nullopt;
  if (!hello.has_optimizer()) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(),
                                  " asks for hyper-parameters per iteration without naming the "
                                  "optimizer they are for"),
                     "give the optimizer in the Hello (PsClientOptions::optimizer)");
  }
  if (optimizer.kind == kernels::OptimizerKind::kAverage) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(),
                                  " asks for hyper-parameters per iteration with optimizer "
                                  "average, which has none: the workers step themselves"),
                     "let the workers' own optimizer follow the schedule, and ask phubd for "
                     "fixed values");
  }
  if (hello.racks() > 1) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " asks for hyper-parameters per iteration "
                                  "in a job across ", hello.racks(),
                                  " racks: not supported yet (a rack's PBox passes its sums on, "
                                  "and the chunk's home PBox steps without the values)"),
                     "run the job in one rack, or with a constant schedule");
  }
  return std::nullopt;
}

std::optional<proto::Error> CheckElastic(const proto::Hello& hello) {
  if (!proto::Hello::LrScaling_IsValid(hello.lr_scaling())) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " asks for lr scaling ",
                                  static_cast<int>(hello.lr_scaling()), ", which phubd does not know"),
                     "give --lr-scaling none, linear or sqrt");
  }
  if (hello.rack_workers() > 0 && (hello.min_workers() > 0 || hello.start_workers() > 0)) {
    // The homes' part has one member per rack, each for the whole job: a rack's part is
    // elastic, never the homes'. (Its lr_scaling is the racks' workers': the homes scale by
    // the members every rack's sums count, CheckRacks checked the PBox's start size.)
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("the PBox of rack ", hello.rack(),
                                  " asks for an elastic home part (min_workers ",
                                  hello.min_workers(), ", start_workers ", hello.start_workers(),
                                  "): only a rack's part is elastic"),
                     "run every rack's phubd from the same PHub release");
  }
  // Across racks a fixed rack's workers give the job's lr_scaling too: the homes scale by every
  // rack's members, and a fixed rack's count stays its world size.
  if (hello.min_workers() == 0 && hello.lr_scaling() != proto::Hello::LR_FIXED &&
      hello.racks() <= 1) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " asks for a learning rate that follows "
                                  "the member count in a job of a fixed size"),
                     "give --min-workers (and --max-workers) for an elastic job, or no "
                     "--lr-scaling");
  }
  if (hello.min_workers() == 0) {
    if (hello.start_workers() == 0) return std::nullopt;
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " gives start_workers ",
                                  hello.start_workers(), " without min_workers"),
                     "give --min-workers (and --max-workers) for an elastic job, or neither");
  }
  const std::uint32_t start = hello.start_workers() ? hello.start_workers() : hello.min_workers();
  if (hello.min_workers() > start || start > hello.world_size()) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " asks for an elastic job of ",
                                  hello.min_workers(), " to ", hello.world_size(),
                                  " workers that starts with ", start),
                     "give --min-workers <= the start size <= --max-workers");
  }
  // Across racks each rack's part is elastic on its own (min, start and most are its own; its
  // PBox decides its members), and the homes divide by the copies each rack's sum counts and
  // scale the lr by the members each counts (shard/copy_count.h).
  return std::nullopt;
}

std::optional<proto::Error> CheckHello(const proto::Hello& hello, const AdmissionOptions& options,
                                       const proto::Hello* first,
                                       const std::vector<bool>& rank_taken) {
  if (hello.protocol_version() != kProtocolVersion) {
    return MakeError(proto::Error::VERSION_MISMATCH,
                     absl::StrCat("worker speaks protocol version ", hello.protocol_version(),
                                  ", phubd speaks ", kProtocolVersion),
                     "run phubd and phub-worker from the same PHub release");
  }
  // rank_taken has the job's world size (its first Hello's, bounded by the control plane).
  if (hello.world_size() != rank_taken.size()) {
    return MakeError(proto::Error::WORLD_SIZE_MISMATCH,
                     absl::StrCat("worker says world size ", hello.world_size(),
                                  ", the job has ", rank_taken.size()),
                     "start every worker of the job with the same world size");
  }
  if (hello.rank() >= rank_taken.size()) {
    return MakeError(proto::Error::BAD_RANK,
                     absl::StrCat("rank ", hello.rank(), " is out of range for world size ",
                                  rank_taken.size()),
                     absl::StrCat("use ranks 0..", rank_taken.size() - 1));
  }
  if (rank_taken[hello.rank()]) {
    return MakeError(proto::Error::DUPLICATE_RANK,
                     absl::StrCat("rank ", hello.rank(), " has already joined this job"),
                     "give every worker a distinct --rank");
  }
  if (hello.tensors_size() == 0) {
    return MakeError(proto::Error::TENSOR_TABLE_MISMATCH, "the worker's tensor table is empty",
                     "register the model's parameters before connecting");
  }
  bool any_elements = false;
  for (const auto& t : hello.tensors()) any_elements = any_elements || t.elements() > 0;
  if (!any_elements) {
    return MakeError(proto::Error::TENSOR_TABLE_MISMATCH,
                     "every tensor of the worker's table has 0 elements: nothing to train",
                     "register the model's parameters, with their sizes, before connecting");
  }
  StatusOr<kernels::OptimizerConfig> optimizer = JobOptimizer(hello, options.optimizer);
  if (!optimizer.ok()) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("the optimizer rank ", hello.rank(),
                                  " asks for is invalid: ", optimizer.status().message()),
                     "fix the optimizer the workers give PHub (or give none: phubd's "
                     "--optimizer flags apply)");
  }
  StatusOr<kernels::WireFormat> wire = JobWireFormat(hello);
  if (!wire.ok()) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), ": ", wire.status().message()),
                     "give every worker --wire fp32, bf16 or fp16");
  }
  if (std::optional<proto::Error> error = CheckRacks(hello, options.racks)) return error;
  if (std::optional<proto::Error> error = CheckRackCopies(hello, *wire)) return error;
  if (std::optional<proto::Error> error = CheckPerIterationValues(hello, *optimizer)) return error;
  if (std::optional<proto::Error> error = CheckElastic(hello)) return error;
  if (first == nullptr) return std::nullopt;
  if (JobRole::Of(hello).home_part() && hello.lr_scaling() != first->lr_scaling()) {
    // The racks' PBoxes: each brings its rack's workers' --lr-scaling, which must be the job's.
    const auto scaling = [](const proto::Hello& h) {
      return kernels::LrScalingName(static_cast<kernels::LrScaling>(h.lr_scaling()));
    };
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("the PBox of rack ", hello.rack(), " brings lr scaling ",
                                  scaling(hello), " (its rack's workers'), the PBox of rack ",
                                  first->rack(), " ", scaling(*first)),
                     "give the workers of every rack the same --lr-scaling");
  }
  if (hello.min_workers() != first->min_workers() ||
      hello.start_workers() != first->start_workers() ||
      hello.lr_scaling() != first->lr_scaling()) {
    const auto says = [](const proto::Hello& h) {
      return h.min_workers() == 0
                 ? absl::StrCat("a fixed job of ", h.world_size())
                 : absl::StrCat("an elastic job of ", h.min_workers(), " to ", h.world_size(),
                                " (starting with ", h.start_workers(), ", lr scaling ",
                                kernels::LrScalingName(static_cast<kernels::LrScaling>(h.lr_scaling())),
                                ")");
    };
    return MakeError(proto::Error::WORLD_SIZE_MISMATCH,
                     absl::StrCat("rank ", hello.rank(), " asks for ", says(hello), ", rank ",
                                  first->rank(), " for ", says(*first)),
                     "give every worker of the job the same --min-workers, --max-workers, "
                     "--start-workers and --lr-scaling");
  }
  // (The homes' part has a PBox of each rack as members: their racks differ, CheckRacks checked
  // each. The workers of one rack's part are all of that rack.)
  if (!JobRole::Of(hello).SamePartAs(JobRole::Of(*first))) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " says the job spans ", hello.racks(),
                                  " racks (rack ", hello.rack(), "), rank ", first->rank(), " ",
                                  first->racks(), " (rack ", first->rack(), ")"),
                     "give every worker of the job the same --topology (or none)");
  }
  if (*wire != *JobWireFormat(*first) || hello.wire_weights() != first->wire_weights()) {
    const auto describe = [](const proto::Hello& h) {
      return absl::StrCat(kernels::WireFormatName(*JobWireFormat(h)),
                          h.wire_weights() ? " (weights too)" : " (weights fp32)");
    };
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " sends ", describe(hello), ", rank ",
                                  first->rank(), " ", describe(*first)),
                     "give every worker the same --wire and --wire-weights (phub.torch: "
                     "PHUB_WIRE and PHUB_WIRE_WEIGHTS)");
  }
  if (hello.per_iteration_values() != first->per_iteration_values()) {
    const auto says = [](const proto::Hello& h) {
      return h.per_iteration_values() ? "changes its hyper-parameters per iteration"
                                      : "keeps its hyper-parameters fixed";
    };
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), "'s job ", says(hello), ", rank ",
                                  first->rank(), "'s ", says(*first)),
                     "give every worker the same schedule (phub-worker --lr-schedule)");
  }
  // The first Hello was checked when it came: its optimizer is valid.
  const std::string mine_optimizer = OptimizerIdentity(hello, *optimizer);
  const std::string theirs_optimizer =
      OptimizerIdentity(*first, *JobOptimizer(*first, options.optimizer));
  if (mine_optimizer != theirs_optimizer) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " asks for optimizer ", mine_optimizer,
                                  ", rank ", first->rank(), " for ", theirs_optimizer),
                     "give every worker the same optimizer");
  }
  const auto& mine = hello.tensors();
  const auto& theirs = first->tensors();
  if (mine.size() != theirs.size()) {
    return MakeError(proto::Error::TENSOR_TABLE_MISMATCH,
                     absl::StrCat("rank ", hello.rank(), " has ", mine.size(),
                                  " tensors, rank ", first->rank(), " has ", theirs.size()),
                     "run the same model on every worker, with the same --segment-bytes "
                     "(PHUB_SEGMENT_BYTES in phub.torch): a GPU worker sends a tensor longer "
                     "than it as segments '<name>#<k>', a CPU phub.torch rank whole unless "
                     "staged (PHUB_STAGED=1)");
  }
  for (int i = 0; i < mine.size(); ++i) {
    if (mine[i].name() != theirs[i].name() || mine[i].elements() != theirs[i].elements()) {
      return MakeError(proto::Error::TENSOR_TABLE_MISMATCH,
                       absl::StrCat("tensor ", i, ": rank ", hello.rank(), " has ",
                                    Describe(mine[i]), ", rank ", first->rank(), " has ",
                                    Describe(theirs[i])),
                       "run the same model, with parameters in the same order, on every worker");
    }
  }
  return std::nullopt;
}

std::optional<proto::Error> CheckResumedModel(const proto::Hello& hello,
                                              const kernels::OptimizerConfig& default_optimizer,
                                              const JobSnapshot& snapshot,
                                              const std::string& path) {
  const auto& mine = hello.tensors();
  const char* fix = "start the workers with the model the checkpoint was written for, or start "
                    "phubd without --resume";
  if (hello.world_size() != snapshot.world_size) {
    return MakeError(proto::Error::WORLD_SIZE_MISMATCH,
                     absl::StrCat("phubd resumes checkpoint ", path, ", of a job of ",
                                  snapshot.world_size, " workers; rank ", hello.rank(),
                                  " says world size ", hello.world_size()),
                     "start the job with the checkpoint's world size, or phubd without --resume");
  }
  if (StatusOr<kernels::OptimizerConfig> optimizer = JobOptimizer(hello, default_optimizer);
      optimizer.ok() &&
      OptimizerIdentity(hello, *optimizer) != OptimizerIdentity(hello, snapshot.optimizer)) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("phubd resumes checkpoint ", path, ", of a job that ran ",
                                  OptimizerIdentity(hello, snapshot.optimizer), "; rank ",
                                  hello.rank(), "'s job runs ",
                                  OptimizerIdentity(hello, *optimizer)),
                     "run the job with the checkpoint's optimizer (the workers' or phubd's "
                     "--optimizer flags), or start phubd without --resume");
  }
  if (static_cast<std::size_t>(mine.size()) != snapshot.tensors.size()) {
    return MakeError(proto::Error::TENSOR_TABLE_MISMATCH,
                     absl::StrCat("phubd resumes checkpoint ", path, ", of a model of ",
                                  snapshot.tensors.size(), " tensors; rank ", hello.rank(),
                                  " has ", mine.size()),
                     fix);
  }
  for (int i = 0; i < mine.size(); ++i) {
    const keys::TensorSpec& theirs = snapshot.tensors[i];
    if (mine[i].name() != theirs.name || mine[i].elements() != theirs.elements) {
      return MakeError(proto::Error::TENSOR_TABLE_MISMATCH,
                       absl::StrCat("tensor ", i, ": rank ", hello.rank(), " has ",
                                    Describe(mine[i]), ", the checkpoint phubd resumes (",
                                    path, ") has '", theirs.name, "' (", theirs.elements,
                                    " floats)"),
                       fix);
    }
  }
  return std::nullopt;
}

}  // namespace phub::server
