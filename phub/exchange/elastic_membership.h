// ElasticMembership: what a training loop sees of an elastic job (docs/design.md "Elastic
// jobs"), apart from the exchange itself: who the members of each iteration are and this
// worker's place among them (it shards that iteration's data by them), and a way to leave at
// the next iteration boundary. Only the PS on one phubd offers it (GradientExchange::elastic):
// phubd holds the weights, so members come and go while it keeps them.
#pragma once

#include <cstdint>

#include "phub/common/member_schedule.h"
#include "phub/common/status.h"

namespace phub::exchange {

class ElasticMembership {
 public:
  virtual ~ElasticMembership() = default;
  // As PsClient::MembersOf: known for every iteration this worker may begin; `member` false
  // once it has left (after RequestLeave): it then finishes (WaitAll) and closes.
  virtual IterationMembers MembersOf(std::uint64_t iteration) const = 0;
  // As PsClient::RequestLeave: does not block.
  virtual Status RequestLeave() = 0;
};

}  // namespace phub::exchange
