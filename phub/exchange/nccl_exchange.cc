#include "phub/exchange/nccl_exchange.h"

#include <map>

#include "phub/nccl/device_buffer.h"
#include "phub/nccl/nccl_allreduce.h"

namespace phub::exchange {
namespace {

class NcclAllreducer final : public Allreducer {
 public:
  NcclAllreducer(std::unique_ptr<nccl::NcclAllreduce> nccl, kernels::WireFormat wire)
      : nccl_(std::move(nccl)), wire_(wire) {}

  Status Allreduce(std::span<float> data, ReduceOp op) override {
    if (wire_ == kernels::WireFormat::kFp32) {
      PHUB_ASSIGN_OR_RETURN(nccl::DeviceBuffer * buffer, BufferFor(data.size()));
      PHUB_RETURN_IF_ERROR(buffer->CopyFromHost(data));
      PHUB_RETURN_IF_ERROR(nccl_->Allreduce(buffer->data(), data.size(), op));
      return buffer->CopyToHost(data);
    }
    // Rounded on the host into whole floats' worth of compact elements (DeviceBuffer moves
    // floats), reduced in the compact type, widened back.
    const std::size_t floats =
        (data.size() * kernels::WireBytes(wire_) + sizeof(float) - 1) / sizeof(float);
    staging_.resize(floats);
    auto* wire = reinterpret_cast<std::byte*>(staging_.data());
    kernels::ConvertToWire(wire_, data, wire);
    PHUB_ASSIGN_OR_RETURN(nccl::DeviceBuffer * buffer, BufferFor(floats));
    PHUB_RETURN_IF_ERROR(buffer->CopyFromHost(staging_));
    PHUB_RETURN_IF_ERROR(nccl_->Allreduce(buffer->data(), data.size(), wire_, op));
    PHUB_RETURN_IF_ERROR(buffer->CopyToHost(staging_));
    kernels::ConvertFromWire(wire_, wire, data);
    return absl::OkStatus();
  }
  std::uint32_t rank() const override { return nccl_->rank(); }
  std::string name() const override { return "nccl"; }

 private:
  StatusOr<nccl::DeviceBuffer*> BufferFor(std::size_t count) {
    // One staging buffer per distinct tensor length, made on first use: models have few
    // distinct lengths, and DeviceBuffer copies whole buffers.
    auto it = by_length_.find(count);
    if (it == by_length_.end()) {
      PHUB_ASSIGN_OR_RETURN(auto buffer, nccl::DeviceBuffer::Allocate(nccl_->device(), count));
      it = by_length_.emplace(count, std::move(buffer)).first;
    }
    return &it->second;
  }

  std::unique_ptr<nccl::NcclAllreduce> nccl_;
  const kernels::WireFormat wire_;
  std::map<std::size_t, nccl::DeviceBuffer> by_length_;
  std::vector<float> staging_;  // compact wire: the host side of the copies
};

}  // namespace

nccl::NcclOptions CommunicatorOptions(const NcclExchangeOptions& options, Membership membership) {
  nccl::NcclOptions nccl_options;
  nccl_options.rank = membership.rank;
  nccl_options.world_size = membership.world_size;
  nccl_options.rendezvous = options.rendezvous;
  nccl_options.device = options.device;
  nccl_options.timeout_ms = options.timeout_ms;
  return nccl_options;
}

StatusOr<std::unique_ptr<AllreduceExchange>> ConnectNcclExchange(
    const NcclExchangeOptions& options, Membership membership,
    std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> weights) {
  PHUB_RETURN_IF_ERROR(AllreduceExchange::Check(options.optimizer, tensors, weights));
  PHUB_ASSIGN_OR_RETURN(auto nccl,
                        nccl::NcclAllreduce::Connect(CommunicatorOptions(options, membership)));
  return AllreduceExchange::Create(options.optimizer,
                                   std::make_unique<NcclAllreducer>(std::move(nccl), options.wire),
                                   std::move(tensors), std::move(weights));
}

}  // namespace phub::exchange
