// The out-of-place AggregateAndStep (phubd keeps each chunk's previous weights by alternating
// two buffers) gives the same bits as the in-place form, in the new weights and every state
// array, and leaves the old weights untouched: N = 1..8 (register and blocked paths), every
// optimizer, odd lengths and unaligned starts, several steps with the buffers trading places.
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "phub/kernels/aggregate_and_step.h"

namespace phub::kernels {
namespace {

std::vector<float> Random(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(AggregateAndStepOutOfPlace, SameBitsAsInPlaceAndTheOldWeightsUntouched) {
  std::mt19937 rng(16);
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                             OptimizerKind::kNesterov, OptimizerKind::kAdam,
                             OptimizerKind::kAverage}) {
    for (int n = 1; n <= 8; ++n) {
      for (std::size_t offset : {std::size_t{0}, std::size_t{3}}) {
        SCOPED_TRACE(testing::Message() << OptimizerName(kind) << " N=" << n << " offset "
                                        << offset);
        const std::size_t len = 4099;  // > 2 blocks of the N > 4 path, odd
        OptimizerConfig config{.kind = kind, .lr = 0.05f, .weight_decay = 1e-3f};
        std::vector<std::vector<float>> grads;
        for (int w = 0; w < n; ++w) grads.push_back(Random(len + offset, rng));
        std::vector<const float*> inputs;
        for (auto& g : grads) inputs.push_back(g.data() + offset);
        const int arrays = StateArrays(kind);
        // In place: one weights buffer; out of place: two that trade places each step.
        std::vector<float> in_place = Random(len + offset, rng);
        std::vector<float> a = in_place, b(len + offset, 0.0f);
        std::vector<std::vector<float>> state_ip(arrays, std::vector<float>(len + offset, 0.0f));
        auto state_op = state_ip;
        std::vector<float*> sp_ip, sp_op;
        for (int s = 0; s < arrays; ++s) {
          sp_ip.push_back(state_ip[s].data() + offset);
          sp_op.push_back(state_op[s].data() + offset);
        }
        std::vector<float>* current = &a;
        std::vector<float>* other = &b;
        for (std::uint64_t step = 1; step <= 3; ++step) {
          const std::vector<float> before = *current;
          AggregateAndStep(inputs, std::span<float>(in_place.data() + offset, len), sp_ip, config,
                           step);
          AggregateAndStep(inputs, std::span<const float>(current->data() + offset, len),
                           std::span<float>(other->data() + offset, len), sp_op, config, step);
          ASSERT_EQ(std::memcmp(before.data(), current->data(), before.size() * sizeof(float)), 0)
              << "step " << step << ": the old weights were written";
          std::swap(current, other);
          ASSERT_EQ(std::memcmp(in_place.data() + offset, current->data() + offset,
                                len * sizeof(float)),
                    0)
              << "step " << step << ": new weights differ from the in-place form";
          for (int s = 0; s < arrays; ++s) {
            ASSERT_EQ(std::memcmp(state_ip[s].data(), state_op[s].data(),
                                  state_ip[s].size() * sizeof(float)),
                      0)
                << "step " << step << ": state array " << s << " differs";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace phub::kernels
