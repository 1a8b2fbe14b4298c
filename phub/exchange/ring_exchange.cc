#include "phub/exchange/ring_exchange.h"

namespace phub::exchange {
namespace {

class RingAllreducer final : public Allreducer {
 public:
  RingAllreducer(std::unique_ptr<ring::RingAllreduce> ring, std::uint32_t rank)
      : ring_(std::move(ring)), rank_(rank) {}
  Status Allreduce(std::span<float> data, ReduceOp op) override {
    return ring_->Allreduce(data, op);
  }
  std::uint32_t rank() const override { return rank_; }
  std::string name() const override { return "ring"; }

 private:
  std::unique_ptr<ring::RingAllreduce> ring_;
  std::uint32_t rank_;
};

}  // namespace

StatusOr<std::unique_ptr<AllreduceExchange>> ConnectRingExchange(
    const RingExchangeOptions& options, Membership membership,
    std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> weights) {
  // Checked before connecting, so a bad flag never leaves the neighbours waiting on this rank.
  PHUB_RETURN_IF_ERROR(AllreduceExchange::Check(options.optimizer, tensors, weights));
  PHUB_ASSIGN_OR_RETURN(auto ring, ring::RingAllreduce::Connect(options.ring, membership));
  return AllreduceExchange::Create(
      options.optimizer, std::make_unique<RingAllreducer>(std::move(ring), membership.rank),
      std::move(tensors), std::move(weights));
}

}  // namespace phub::exchange
