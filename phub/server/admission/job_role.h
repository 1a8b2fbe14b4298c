// The part of a job a Hello's sender forms on this phubd, read once from the Hello's racks,
// rack and rack_workers (proto/phub.proto Hello; docs/design.md "Racks of racks"), and handed
// on as a value: the control plane keys jobs by it, the Hello checks compare it, the job builds
// its shards and relay from it.
//
//   flat       a job of one rack: its workers and this phubd, nothing more.
//   rack part  a rack's part of a job over several racks: this PBox sums its rack's workers and
//              relays each chunk's sum upstream to its home PBox (racks/uplink.h); the homes
//              step, checkpoint and resume, the rack's part does none of it.
//   home part  the part formed by the racks' PBoxes, each joining with its rack's uplink: a
//              member's push stands for its rack's workers.
//
// A value type; CheckRacks (hello_check.h) is what says the integers behind it are consistent.
#pragma once

#include <cstdint>
#include <string>

#include "phub/server/shard/copy_count.h"
#include "proto/phub.pb.h"

namespace phub::server {

class JobRole {
 public:
  enum class Kind { kFlat, kRackPart, kHomePart };

  // A Hello with rack_workers is a PBox's (the home part), whatever else it says; one of a job
  // over racks > 1 is a rack's worker; any other is of a flat job.
  static JobRole Of(const proto::Hello& hello) {
    JobRole role;
    role.racks_ = hello.racks();
    role.rack_ = hello.rack();
    role.rack_workers_ = hello.rack_workers();
    role.kind_ = hello.rack_workers() > 0 ? Kind::kHomePart
                 : hello.racks() > 1      ? Kind::kRackPart
                                          : Kind::kFlat;
    return role;
  }

  Kind kind() const { return kind_; }
  bool home_part() const { return kind_ == Kind::kHomePart; }
  // The rack's part sums and passes each chunk's sum on; it steps, checkpoints and resumes
  // nothing (the homes do).
  bool relays_upstream() const { return kind_ == Kind::kRackPart; }
  // A rack's part on any rack but the first: its rank 0 sends no initial weights (the first
  // rack's does; they come back through the relay).
  bool weights_from_upstream() const { return relays_upstream() && rack_ != 0; }
  // The workers one member's pushes sum: its rack's for a PBox of the home part, else 1.
  std::uint32_t copies_per_member() const { return home_part() ? rack_workers_ : 1; }
  std::uint32_t racks() const { return racks_; }
  std::uint32_t rack() const { return rack_; }  // the sender's rack (a worker's, a PBox's)

  // The chunks this part cuts its tensors in, on a phubd of --chunk-bytes `phubd`: a home's
  // tensors are the racks' chunks and their counts (shard/copy_count.h), so its chunks are
  // kCountElements longer and each keeps a rack's chunk whole.
  std::uint64_t ChunkBytes(std::uint64_t phubd) const {
    return home_part() ? phubd + kCountBytes : phubd;
  }
  static constexpr std::uint64_t kCountBytes = kCountElements * sizeof(float);

  // The name the control plane keeps the job by: the home part of a job is a job apart from
  // the part of the same name formed by this rack's workers ('@' is in no job name).
  std::string JobKey(const std::string& name) const {
    return home_part() ? name + "@racks" : name;
  }
  // Whether `other` (a Hello of the same job) forms the same part: the same racks and kind,
  // and for workers the same rack (the home part's members are of different racks).
  bool SamePartAs(const JobRole& other) const {
    return racks_ == other.racks_ && kind_ == other.kind_ && (home_part() || rack_ == other.rack_);
  }

 private:
  Kind kind_ = Kind::kFlat;
  std::uint32_t racks_ = 0, rack_ = 0, rack_workers_ = 0;
};

}  // namespace phub::server
