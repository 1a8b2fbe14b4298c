// Admission of a worker's Hello: pure checks against admission's options (admission_options.h)
// and the Hellos already accepted for the forming job. Each refusal is a proto::Error that
// names the mismatch (both values) and how to fix it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/kernels/wire_format.h"
#include "phub/server/admission/admission_options.h"
#include "phub/server/admission/job_role.h"
#include "proto/phub.pb.h"

namespace phub::server {

// Longest message or fix an Error carries (each is cut there).
inline constexpr std::size_t kMaxErrorTextBytes = 400;

// An Error for a worker: `message` says what is wrong, `fix` how to fix it.
proto::Error MakeError(proto::Error::Code code, std::string message, std::string fix);

// The optimizer the Hello asks for (its OptimizerSpec), or `default_optimizer` (phubd's flags)
// when it asks none. InvalidArgument naming the bad field (an unknown kind, a hyper-parameter
// out of range).
StatusOr<kernels::OptimizerConfig> JobOptimizer(const proto::Hello& hello,
                                                const kernels::OptimizerConfig& default_optimizer);

// What makes two workers' optimizers the same job's: every hyper-parameter, or, where the Hello
// asks for per_iteration_values, the kind alone (the values come with each iteration, and a
// worker that rejoins later starts from the schedule's values of then).
std::string OptimizerIdentity(const proto::Hello& hello, const kernels::OptimizerConfig& config);

// A Hello's per_iteration_values: with the optimizer in the Hello (its kind), not "average" (the
// workers step themselves: their own optimizer follows the schedule), not across racks (a rack's
// PBox passes sums on, and the home PBox would need the values too). Part of CheckHello.
std::optional<proto::Error> CheckPerIterationValues(const proto::Hello& hello,
                                                    const kernels::OptimizerConfig& optimizer);

// An elastic job's sizes (min_workers <= start <= world_size, its maximum; across racks, the
// rack's: each rack's part is elastic on its own), and lr_scaling only with them or across
// racks (where a fixed rack counts its world size; the homes scale by every rack's members).
std::optional<proto::Error> CheckElastic(const proto::Hello& hello);

// Racks of racks: a rack's sums carry their counts of copies and members in the job's wire
// format (shard/copy_count.h), so the rack's most workers (a worker's world_size, a PBox's
// rack_workers) must be exact in it: up to 256 in bf16, 2048 in fp16. Part of CheckHello.
std::optional<proto::Error> CheckRackCopies(const proto::Hello& hello, kernels::WireFormat wire);

// `first` is any Hello already accepted for this job (nullptr if none); `rank_taken[r]` says
// whether rank r already joined. Returns the Error to send, or nullopt to accept.
// The Hello's wire format ("" means fp32); InvalidArgument naming the accepted ones.
StatusOr<kernels::WireFormat> JobWireFormat(const proto::Hello& hello);

// The token was checked before (ControlPlane: the Hello's token proof); rank_taken.size() is
// the job's world size.
// Racks of racks: a Hello's racks, rack and rack_workers against phubd's --topology and
// --rack (a worker must be of this phubd's rack, with its rack's size; a PBox relaying its rack
// must join as rank = its rack of world = the racks, with its rack's workers): what makes its
// JobRole one to trust. Part of CheckHello.
std::optional<proto::Error> CheckRacks(const proto::Hello& hello, const RacksOptions& options);

std::optional<proto::Error> CheckHello(const proto::Hello& hello, const AdmissionOptions& options,
                                       const proto::Hello* first,
                                       const std::vector<bool>& rank_taken);

struct JobSnapshot;  // checkpoint_file.h
// phubd resumes `snapshot`, read from `path` (--resume): the worker's tensors and the job's
// optimizer (JobOptimizer, already checked by CheckHello) must be the checkpoint's; the error
// names the file.
std::optional<proto::Error> CheckResumedModel(const proto::Hello& hello,
                                              const kernels::OptimizerConfig& default_optimizer,
                                              const JobSnapshot& snapshot,
                                              const std::string& path);

}  // namespace phub::server
