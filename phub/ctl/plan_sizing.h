// The answer `phubctl plan` gives an operator before buying PBoxes: for the job's workers and
// links, how many PBoxes a rack, and each one's NICs and cores, so that the workers' links,
// not the PBox, bound the exchange. The rule is docs/design.md "Sizing a PBox"'s: a rack's
// PBoxes take its workers' links together (plus its uplink across racks), in NICs of
// --nic-gbps, at most --max-nics a box; cores from phubd's CPU per byte (calibration.h), at
// most kBusiestCore busy, so that a burst of chunks does not queue on a core. The plan then
// simulates the sized PBoxes: the prediction says whether the rule reaches the link limit.
#pragma once

#include <cstdint>

#include "phub/sim/scenario.h"

namespace phub::ctl {

struct PlanOptions;

struct PboxSizing {
  std::uint32_t pboxes_per_rack = 1;
  std::uint32_t nics = 1;   // each PBox's
  std::uint32_t cores = 1;  // each PBox's
  double nic_gbps = 0;
  double rack_gbps = 0;     // what a rack's PBoxes take together: its workers' links + uplink
};

// A core at most this busy at the link's rate: the headroom for bursts.
inline constexpr double kBusiestCore = 0.7;

PboxSizing SizePboxes(const PlanOptions& options, const sim::Calibration& calibration);

// The PS scenario with `sizing`'s PBoxes: a rack's PBoxes as one PS host with all their cores
// and links (the keys spread evenly over them, max-min sharing gives a flow the same share
// either way). ps-pbox in one rack, ps-racks across racks.
sim::Scenario SizedScenario(const sim::Scenario& base, const PboxSizing& sizing);

}  // namespace phub::ctl
