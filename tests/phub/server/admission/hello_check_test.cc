#include "phub/server/admission/hello_check.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "phub/common/version.h"
#include "tests/phub/server/admission/hello_testing.h"

namespace phub::server {
namespace {

TEST(HelloCheckTest, AcceptsTheFirstValidHello) {
  std::optional<proto::Error> error = Check(MakeHello(0), Options(), nullptr, kNoneTaken);
  EXPECT_FALSE(error.has_value()) << Text(*error);
}

TEST(HelloCheckTest, AcceptsAHelloIdenticalToTheFirstButForRank) {
  const proto::Hello first = MakeHello(0);
  std::optional<proto::Error> error =
      Check(MakeHello(3), Options(), &first, {true, false, false, false});
  EXPECT_FALSE(error.has_value()) << Text(*error);
}

TEST(HelloCheckTest, RefusesOtherProtocolVersionNamingBoth) {
  proto::Hello hello = MakeHello(0);
  hello.set_protocol_version(kProtocolVersion + 6);
  std::optional<proto::Error> error = Check(hello, Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::VERSION_MISMATCH);
  EXPECT_TRUE(Names(*error, "version " + std::to_string(kProtocolVersion + 6)));
  EXPECT_TRUE(Names(*error, "phubd speaks " + std::to_string(kProtocolVersion)));
}

TEST(HelloCheckTest, RefusesOtherWorldSizeNamingBoth) {
  std::optional<proto::Error> error = Check(MakeHello(0, 8), Options(4), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::WORLD_SIZE_MISMATCH);
  EXPECT_TRUE(Names(*error, "world size 8"));
  EXPECT_TRUE(Names(*error, "the job has 4"));
}

TEST(HelloCheckTest, RefusesRankEqualToWorldSizeNamingRankAndRange) {
  std::optional<proto::Error> error = Check(MakeHello(4), Options(4), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::BAD_RANK);
  EXPECT_TRUE(Names(*error, "rank 4"));
  EXPECT_TRUE(Names(*error, "world size 4"));
  EXPECT_TRUE(Names(*error, "0..3"));
}

TEST(HelloCheckTest, RefusesAFarOutOfRangeRank) {
  std::optional<proto::Error> error =
      Check(MakeHello(4000000000u), Options(4), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::BAD_RANK);
  EXPECT_TRUE(Names(*error, "rank 4000000000"));
}

TEST(HelloCheckTest, AcceptsTheLastRank) {
  std::optional<proto::Error> error = Check(MakeHello(3), Options(4), nullptr, kNoneTaken);
  EXPECT_FALSE(error.has_value()) << Text(*error);
}

TEST(HelloCheckTest, RefusesADuplicateRankNamingIt) {
  const proto::Hello first = MakeHello(2);
  std::optional<proto::Error> error =
      Check(MakeHello(2), Options(), &first, {false, false, true, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::DUPLICATE_RANK);
  EXPECT_TRUE(Names(*error, "rank 2"));
  EXPECT_TRUE(Names(*error, "--rank"));
}

TEST(HelloCheckTest, RefusesAnEmptyTensorTable) {
  proto::Hello hello = MakeHello(0);
  hello.clear_tensors();
  std::optional<proto::Error> error = Check(hello, Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::TENSOR_TABLE_MISMATCH);
  EXPECT_TRUE(Names(*error, "empty"));
}

TEST(HelloCheckTest, RefusesATableOfOtherLengthNamingBothCountsAndRanks) {
  const proto::Hello first = MakeHello(0);
  proto::Hello hello = MakeHello(1);
  hello.add_tensors()->set_name("extra");
  hello.mutable_tensors(3)->set_elements(5);
  std::optional<proto::Error> error =
      Check(hello, Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::TENSOR_TABLE_MISMATCH);
  EXPECT_TRUE(Names(*error, "rank 1 has 4 tensors"));
  EXPECT_TRUE(Names(*error, "rank 0 has 3"));
}

TEST(HelloCheckTest, RefusesATensorOfOtherNameNamingBoth) {
  const proto::Hello first = MakeHello(0);
  proto::Hello hello = MakeHello(1);
  hello.mutable_tensors(1)->set_name("classifier.weight");
  std::optional<proto::Error> error =
      Check(hello, Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::TENSOR_TABLE_MISMATCH);
  EXPECT_TRUE(Names(*error, "tensor 1"));
  EXPECT_TRUE(Names(*error, "'classifier.weight'"));
  EXPECT_TRUE(Names(*error, "'fc.weight'"));
}

TEST(HelloCheckTest, RefusesATensorOfOtherSizeNamingBoth) {
  const proto::Hello first = MakeHello(0);
  proto::Hello hello = MakeHello(1);
  hello.mutable_tensors(2)->set_elements(1001);
  std::optional<proto::Error> error =
      Check(hello, Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::TENSOR_TABLE_MISMATCH);
  EXPECT_TRUE(Names(*error, "tensor 2"));
  EXPECT_TRUE(Names(*error, "1001 elements"));
  EXPECT_TRUE(Names(*error, "1000 elements"));
}

TEST(HelloCheckTest, RefusesTheSameTensorsInAnotherOrder) {
  const proto::Hello first = MakeHello(0);
  proto::Hello hello = MakeHello(1);
  hello.mutable_tensors()->SwapElements(0, 2);
  std::optional<proto::Error> error =
      Check(hello, Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::TENSOR_TABLE_MISMATCH);
  EXPECT_TRUE(Names(*error, "tensor 0"));
}

// ---- The job's optimizer: the Hello's, or phubd's flags ----

proto::Hello WithOptimizer(proto::Hello hello, const std::string& kind, float lr = 0.1f,
                           float weight_decay = 0.0f) {
  proto::OptimizerSpec& spec = *hello.mutable_optimizer();
  spec.set_kind(kind);
  spec.set_lr(lr);
  spec.set_momentum(0.9f);
  spec.set_weight_decay(weight_decay);
  spec.set_beta1(0.9f);
  spec.set_beta2(0.999f);
  spec.set_eps(1e-8f);
  return hello;
}

TEST(HelloCheckTest, JobOptimizerIsTheHellosOrElsePhubdsFlags) {
  AdmissionOptions options = Options();
  options.optimizer = {.kind = kernels::OptimizerKind::kAdam, .lr = 0.003f};
  auto flags = JobOptimizer(MakeHello(0), options.optimizer);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(kernels::Describe(*flags), kernels::Describe(options.optimizer));
  auto asked =
      JobOptimizer(WithOptimizer(MakeHello(0), "momentum", 0.25f, 1e-4f), options.optimizer);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->kind, kernels::OptimizerKind::kMomentum);
  EXPECT_EQ(asked->lr, 0.25f);
  EXPECT_EQ(asked->weight_decay, 1e-4f);
  auto average = JobOptimizer(WithOptimizer(MakeHello(0), "average"), options.optimizer);
  ASSERT_TRUE(average.ok());
  EXPECT_EQ(average->kind, kernels::OptimizerKind::kAverage);
}

TEST(HelloCheckTest, RefusesAnInvalidOptimizerNamingTheField) {
  for (const auto& [hello, part] :
       std::vector<std::pair<proto::Hello, std::string>>{
           {WithOptimizer(MakeHello(0), "adamw"), "unknown optimizer 'adamw'"},
           {WithOptimizer(MakeHello(0), "sgd", -1.0f), "lr=-1"},
           {WithOptimizer(MakeHello(0), "average", 0.1f, 0.5f), "weight_decay=0.5"},
           {WithOptimizer(MakeHello(0), std::string(5000, 'x')), "unknown optimizer"}}) {
    std::optional<proto::Error> error = Check(hello, Options(), nullptr, kNoneTaken);
    ASSERT_TRUE(error.has_value()) << part;
    EXPECT_EQ(error->code(), proto::Error::BAD_REQUEST);
    EXPECT_TRUE(Names(*error, part));
    EXPECT_LE(error->message().size(), kMaxErrorTextBytes);  // a peer's string, bounded
  }
}

TEST(HelloCheckTest, RefusesAnOptimizerOtherThanTheFirstWorkers) {
  const proto::Hello first = WithOptimizer(MakeHello(0), "average");
  std::optional<proto::Error> error = Check(WithOptimizer(MakeHello(1), "sgd"), Options(),
                                                 &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "rank 1 asks for optimizer sgd(lr=0.1"));
  EXPECT_TRUE(Names(*error, "rank 0 for average"));
  EXPECT_TRUE(Names(*error, "same optimizer"));
  // Asking for exactly phubd's flags is the same job as asking for nothing.
  AdmissionOptions options = Options();
  options.optimizer = {.kind = kernels::OptimizerKind::kSgd, .lr = 0.1f};
  const proto::Hello plain = MakeHello(0);
  EXPECT_FALSE(Check(WithOptimizer(MakeHello(1), "sgd"), options, &plain,
                          {true, false, false, false})
                   .has_value());
}

// The compact wire (--wire): a name phubd does not know is refused listing the known ones (a
// long one is not quoted back); every rank must choose the same format and weights.
TEST(HelloCheckTest, RefusesAnUnknownWireFormatListingTheKnownOnes) {
  proto::Hello hello = MakeHello(0);
  hello.set_wire("int4");
  std::optional<proto::Error> error = Check(hello, Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), proto::Error::BAD_REQUEST);
  EXPECT_TRUE(Names(*error, "'int4'"));
  EXPECT_TRUE(Names(*error, "fp32, bf16 or fp16"));
  hello.set_wire(std::string(100000, 'x'));
  error = Check(hello, Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_LT(error->message().size(), 1000u);
  EXPECT_TRUE(Names(*error, "100000 bytes"));
}

TEST(HelloCheckTest, RefusesAWireFormatOrWeightsOtherThanTheFirstRanksNamingBoth) {
  proto::Hello first = MakeHello(0);
  first.set_wire("bf16");
  first.set_wire_weights(true);
  proto::Hello same = MakeHello(1);
  same.set_wire("bf16");
  same.set_wire_weights(true);
  EXPECT_FALSE(Check(same, Options(), &first, {true, false, false, false}).has_value());
  proto::Hello other = MakeHello(1);
  other.set_wire("fp16");
  other.set_wire_weights(true);
  std::optional<proto::Error> error =
      Check(other, Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "fp16 (weights too)"));
  EXPECT_TRUE(Names(*error, "bf16 (weights too)"));
  other.set_wire("bf16");
  other.set_wire_weights(false);
  error = Check(other, Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "bf16 (weights fp32)"));
  // fp32 spelled out and left empty are the same job.
  proto::Hello empty = MakeHello(0), spelled = MakeHello(1);
  spelled.set_wire("fp32");
  EXPECT_FALSE(Check(spelled, Options(), &empty, {true, false, false, false}).has_value());
}

// Hyper-parameters per iteration (a schedule): the Hello names the optimizer (its kind), not
// "average", not across racks; every rank asks the same; and the kind alone makes the job (a
// worker that rejoins late starts from the schedule's values of then).
TEST(HelloCheckTest, PerIterationValuesNeedAnOptimizerOfTheirOwnAndTheSameOnEveryRank) {
  auto scheduled = [](proto::Hello hello) {
    hello.set_per_iteration_values(true);
    return hello;
  };
  std::optional<proto::Error> error = Check(scheduled(MakeHello(0)), Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "without naming the optimizer"));
  error = Check(scheduled(WithOptimizer(MakeHello(0), "average")), Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "average, which has none"));
  proto::Hello racks = scheduled(WithOptimizer(MakeHello(0), "sgd"));
  racks.set_racks(2);
  error = CheckPerIterationValues(racks, {.kind = kernels::OptimizerKind::kSgd});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "across 2 racks"));

  const proto::Hello first = scheduled(WithOptimizer(MakeHello(0), "sgd"));
  EXPECT_FALSE(Check(first, Options(), nullptr, kNoneTaken).has_value());
  // Another lr is the same job (the values come per iteration); another kind is not.
  proto::Hello later = scheduled(WithOptimizer(MakeHello(1), "sgd"));
  later.mutable_optimizer()->set_lr(0.001f);
  EXPECT_FALSE(Check(later, Options(), &first, {true, false, false, false}).has_value());
  error = Check(scheduled(WithOptimizer(MakeHello(1), "momentum")), Options(), &first,
                {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "momentum (hyper-parameters per iteration)"));
  // A rank with fixed values is of another job.
  error = Check(WithOptimizer(MakeHello(1), "sgd"), Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "rank 1's job keeps its hyper-parameters fixed, rank 0's changes"));
}

// An elastic job: min <= start <= world size (its most members), with a schedule too but not
// across racks; an lr that follows the members only in an elastic job; every worker's sizes
// and lr scaling the same.
TEST(HelloCheckTest, ElasticSizesAreOrderedAndTheSameOnEveryWorker) {
  auto elastic = [](proto::Hello hello, std::uint32_t min, std::uint32_t start) {
    hello.set_min_workers(min);
    hello.set_start_workers(start);
    return hello;
  };
  EXPECT_FALSE(Check(elastic(MakeHello(0), 2, 3), Options(), nullptr, kNoneTaken).has_value());
  EXPECT_FALSE(Check(elastic(MakeHello(0), 2, 0), Options(), nullptr, kNoneTaken).has_value());
  std::optional<proto::Error> error =
      Check(elastic(MakeHello(0), 3, 2), Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "an elastic job of 3 to 4 workers that starts with 2"));
  error = Check(elastic(MakeHello(0), 2, 5), Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "--min-workers <= the start size <= --max-workers"));
  error = Check(elastic(MakeHello(0), 0, 2), Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "start_workers 2 without min_workers"));
  proto::Hello scheduled = elastic(WithOptimizer(MakeHello(0), "sgd"), 2, 2);
  scheduled.set_per_iteration_values(true);
  scheduled.set_lr_scaling(proto::Hello::LR_LINEAR);
  EXPECT_FALSE(Check(scheduled, Options(), nullptr, kNoneTaken).has_value());
  proto::Hello fixed_scaled = MakeHello(0);
  fixed_scaled.set_lr_scaling(proto::Hello::LR_SQRT);
  error = Check(fixed_scaled, Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "follows the member count in a job of a fixed size"));
  proto::Hello unknown = elastic(MakeHello(0), 2, 2);
  unknown.set_lr_scaling(static_cast<proto::Hello::LrScaling>(7));
  error = Check(unknown, Options(), nullptr, kNoneTaken);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "lr scaling 7, which phubd does not know"));

  const proto::Hello first = elastic(MakeHello(0), 2, 2);
  EXPECT_FALSE(
      Check(elastic(MakeHello(3), 2, 2), Options(), &first, {true, false, false, false}).has_value());
  error = Check(elastic(MakeHello(1), 1, 2), Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "rank 1 asks for an elastic job of 1 to 4 (starting with 2, lr "
                            "scaling none), rank 0 for an elastic job of 2 to 4"));
  proto::Hello linear = elastic(MakeHello(1), 2, 2);
  linear.set_lr_scaling(proto::Hello::LR_LINEAR);
  error = Check(linear, Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "lr scaling linear), rank 0 for an elastic job of 2 to 4 (starting "
                            "with 2, lr scaling none)"));
  error = Check(MakeHello(1), Options(), &first, {true, false, false, false});
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(Names(*error, "a fixed job of 4"));
}

}  // namespace
}  // namespace phub::server
