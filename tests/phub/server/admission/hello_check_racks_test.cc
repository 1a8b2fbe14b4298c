// The Hello checks of a job across racks (phub/server/admission/hello_check_racks.cc and
// CheckElastic's racks): each rack's part elastic on its own, the lr following every rack's
// members, a PBox's start size and lr scaling, and counts exact on the wire.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "phub/server/admission/hello_check.h"
#include "phub/topology/topology.h"
#include "tests/phub/server/admission/hello_testing.h"

namespace phub::server {
namespace {

// Across racks each rack's part is elastic on its own (its min, start and most), and the lr may
// follow the members of every rack: an elastic rack's workers and a fixed rack's (whose count
// is its world size) both give it; in one rack a fixed job's may not.
TEST(HelloCheckTest, AcrossRacksARackIsElasticOnItsOwnAndTheLrMayFollowEveryRack) {
  proto::Hello worker = MakeHello(0);
  worker.set_racks(2);
  worker.set_rack(1);
  worker.set_min_workers(1);
  worker.set_start_workers(2);
  EXPECT_FALSE(CheckElastic(worker).has_value());
  worker.set_lr_scaling(proto::Hello::LR_LINEAR);
  EXPECT_FALSE(CheckElastic(worker).has_value());
  proto::Hello fixed = MakeHello(0);
  fixed.set_racks(2);
  fixed.set_lr_scaling(proto::Hello::LR_SQRT);
  EXPECT_FALSE(CheckElastic(fixed).has_value());
  fixed.set_racks(1);
  std::optional<proto::Error> error = CheckElastic(fixed);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "follows the member count in a job of a fixed size"));
  // A PBox's Hello (rack_workers): the homes' part is never elastic, but brings the lr scaling.
  proto::Hello pbox = MakeHello(1);
  pbox.set_racks(2);
  pbox.set_rack(1);
  pbox.set_rack_workers(2);
  EXPECT_FALSE(CheckElastic(pbox).has_value());
  pbox.set_lr_scaling(proto::Hello::LR_LINEAR);
  EXPECT_FALSE(CheckElastic(pbox).has_value());
  pbox.set_min_workers(1);
  error = CheckElastic(pbox);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "asks for an elastic home part"));
}

// Two racks of 3 and 2 hosts, served here as rack r0.
AdmissionOptions RacksOfThreeAndTwo() {
  AdmissionOptions options = Options();
  auto topology = topology::Topology::Parse(
      "rack { name: \"r0\" pbox: \"10.0.0.1:7000\" host: \"a\" host: \"b\" host: \"c\" }\n"
      "rack { name: \"r1\" pbox: \"10.0.0.2:7000\" host: \"d\" host: \"e\" }\n",
      "racks.txtpb");
  EXPECT_TRUE(topology.ok()) << topology.status();
  options.racks.topology = std::make_shared<const topology::Topology>(*std::move(topology));
  return options;
}

// The PBox of rack `rack` (of RacksOfThreeAndTwo) joining a home part, its rack starting with
// `start` of its hosts.
proto::Hello PboxHello(std::uint32_t rack, std::uint32_t start) {
  proto::Hello pbox = MakeHello(rack, 2);
  pbox.set_racks(2);
  pbox.set_rack(rack);
  pbox.set_rack_workers(rack == 0 ? 3 : 2);
  pbox.set_counts_copies(true);
  pbox.set_rack_start_workers(start);
  return pbox;
}

// A PBox gives its rack's start size, 1 to its rack's workers (the homes sum them for the lr):
// none is an earlier release's (whose sums count no members), more than the rack has is
// refused naming both; the PBoxes' lr scaling is the job's, the same from every rack.
TEST(HelloCheckTest, APboxGivesItsRacksStartSizeAndTheJobsLrScaling) {
  const AdmissionOptions options = RacksOfThreeAndTwo();
  const std::vector<bool> none(2, false);
  EXPECT_FALSE(Check(PboxHello(0, 1), options, nullptr, none).has_value());
  EXPECT_FALSE(Check(PboxHello(0, 3), options, nullptr, none).has_value());
  std::optional<proto::Error> error = Check(PboxHello(0, 0), options, nullptr, none);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "the PBox of rack 'r0' gives no start size"));
  EXPECT_TRUE(Names(*error, "same PHub release"));
  error = Check(PboxHello(1, 3), options, nullptr, none);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "the PBox of rack 'r1' says its rack starts with 3 workers of its 2"));

  proto::Hello first = PboxHello(0, 2);
  first.set_lr_scaling(proto::Hello::LR_LINEAR);
  proto::Hello second = PboxHello(1, 2);
  second.set_lr_scaling(proto::Hello::LR_LINEAR);
  EXPECT_FALSE(Check(second, options, &first, {true, false}).has_value());
  second.set_lr_scaling(proto::Hello::LR_FIXED);
  error = Check(second, options, &first, {true, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "the PBox of rack 1 brings lr scaling none (its rack's workers'), "
                            "the PBox of rack 0 linear"));
  EXPECT_TRUE(Names(*error, "the same --lr-scaling"));
}

TEST(HelloCheckTest, ARacksCountOfCopiesMustBeExactInTheWireFormat) {
  proto::Hello worker = MakeHello(0);  // world size 4
  worker.set_racks(2);
  EXPECT_FALSE(CheckRackCopies(worker, kernels::WireFormat::kBf16).has_value());
  worker.set_world_size(256);
  EXPECT_FALSE(CheckRackCopies(worker, kernels::WireFormat::kBf16).has_value());
  worker.set_world_size(257);
  std::optional<proto::Error> error = CheckRackCopies(worker, kernels::WireFormat::kBf16);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "has up to 257 workers"));
  EXPECT_TRUE(Names(*error, "bf16, exact only up to 256"));
  EXPECT_FALSE(CheckRackCopies(worker, kernels::WireFormat::kFp16).has_value());
  // A PBox's Hello: its rack's workers.
  proto::Hello pbox = MakeHello(0);
  pbox.set_racks(2);
  pbox.set_rack_workers(2049);
  error = CheckRackCopies(pbox, kernels::WireFormat::kFp16);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "fp16, exact only up to 2048"));
  EXPECT_FALSE(CheckRackCopies(pbox, kernels::WireFormat::kFp32).has_value());
  // One rack: nothing is counted.
  worker.set_racks(1);
  EXPECT_FALSE(CheckRackCopies(worker, kernels::WireFormat::kBf16).has_value());
}

}  // namespace
}  // namespace phub::server
