// The Hello checks of a job across racks (docs/design.md "Racks of racks"): a rack's and the
// homes' parts, the topology they name, and the counts a rack's sums carry (of copies and of
// members, against the PBox's start size).
#include "absl/strings/str_cat.h"
#include "phub/server/admission/hello_check.h"

namespace phub::server {

std::optional<proto::Error> CheckRackCopies(const proto::Hello& hello, kernels::WireFormat wire) {
  if (hello.racks() <= 1) return std::nullopt;
  // A rack's sum carries its counts of copies and members as elements in the job's wire format
  // (shard/copy_count.h): every count up to the rack's most workers must travel exactly.
  const JobRole role = JobRole::Of(hello);
  const std::uint32_t most = role.home_part() ? hello.rack_workers() : hello.world_size();
  if (most <= kernels::MaxExactInteger(wire)) return std::nullopt;
  return MakeError(proto::Error::BAD_REQUEST,
                   absl::StrCat("rack ", hello.rack(), " has up to ", most,
                                " workers; a rack's sum counts its copies in the job's wire "
                                "format, ", kernels::WireFormatName(wire), ", exact only up to ",
                                kernels::MaxExactInteger(wire)),
                   "give the workers a wider --wire (fp16 counts up to 2048, fp32 up to 2^24), "
                   "or split the rack in the topology file");
}

std::optional<proto::Error> CheckRacks(const proto::Hello& hello, const RacksOptions& options) {
  if (hello.racks() <= 1) {
    if (hello.rack() == 0 && hello.rack_workers() == 0) return std::nullopt;
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " names rack ", hello.rack(),
                                  " (rack_workers ", hello.rack_workers(), ") of a job of ",
                                  hello.racks(), " racks"),
                     "give racks > 1 with a rack, or neither");
  }
  const topology::Topology* topology = options.topology.get();
  if (topology == nullptr) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), "'s job spans ", hello.racks(),
                                  " racks; this phubd was started without --topology"),
                     "start every rack's phubd with --topology FILE --rack NAME, the file the "
                     "workers have");
  }
  const auto racks = static_cast<std::uint32_t>(topology->racks().size());
  const auto rack_name = [&](std::uint32_t r) {
    return r < racks ? absl::StrCat("'", topology->racks()[r].name, "'")
                     : absl::StrCat("number ", r);
  };
  if (hello.racks() != racks || hello.rack() >= racks) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("rank ", hello.rank(), " says the job spans ", hello.racks(),
                                  " racks (it is in rack ", hello.rack(), "); phubd's topology ",
                                  topology->origin(), " has ", racks),
                     "give the workers and every rack's phubd the same topology file");
  }
  const auto hosts = static_cast<std::uint32_t>(topology->racks()[hello.rack()].hosts.size());
  if (JobRole::Of(hello).relays_upstream()) {  // a worker: of this PBox's rack
    if (hello.rack() != options.rack) {
      return MakeError(proto::Error::BAD_REQUEST,
                       absl::StrCat("rank ", hello.rank(), " is in rack ", rack_name(hello.rack()),
                                    "; this phubd serves rack ", rack_name(options.rack),
                                    " (--rack)"),
                       "a worker joins its own rack's phubd: check its --hostname and the topology "
                       "file");
    }
    if (hello.world_size() != hosts) {
      return MakeError(proto::Error::WORLD_SIZE_MISMATCH,
                       absl::StrCat("rank ", hello.rank(), " says its rack has ",
                                    hello.world_size(), " workers; rack ",
                                    rack_name(hello.rack()), " lists ", hosts, " hosts in ",
                                    topology->origin()),
                       "give the workers and every rack's phubd the same topology file");
    }
    return std::nullopt;
  }
  // A PBox passing its rack's sums on: rank = its rack, one per rack, its rack's workers each,
  // and sums that end in their count (an earlier release's would have a weight there).
  if (!hello.counts_copies()) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("the PBox of rack ", rack_name(hello.rack()),
                                  " sends sums without their count of copies (an earlier PHub "
                                  "release)"),
                     "run every rack's phubd from the same PHub release");
  }
  // Its rack's start size, summed over the racks for the lr (the homes' JobSpec::
  // lr_start_members): an earlier release gives none, and its sums count no members.
  if (hello.rack_start_workers() == 0) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("the PBox of rack ", rack_name(hello.rack()),
                                  " gives no start size and sends sums without their count of "
                                  "members (an earlier PHub release)"),
                     "run every rack's phubd from the same PHub release");
  }
  if (hello.rack_start_workers() > hello.rack_workers()) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("the PBox of rack ", rack_name(hello.rack()),
                                  " says its rack starts with ", hello.rack_start_workers(),
                                  " workers of its ", hello.rack_workers()),
                     "give the rack's workers --start-workers (or --min-workers) up to its "
                     "hosts in the topology file");
  }
  if (hello.rank() != hello.rack() || hello.world_size() != racks ||
      hello.rack_workers() != hosts) {
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat("a PBox of rack ", rack_name(hello.rack()), " joins as rank ",
                                  hello.rank(), " of ", hello.world_size(), " with ",
                                  hello.rack_workers(), " workers; topology ", topology->origin(),
                                  " says rank ", hello.rack(), " of ", racks, " with ", hosts),
                     "give every rack's phubd the same topology file");
  }
  return std::nullopt;
}

}  // namespace phub::server
