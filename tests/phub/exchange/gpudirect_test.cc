// GPUDirect's choice (gpudirect.h) on a machine with no GPU and no HCA: every reason to stage
// is found and said, --gpudirect on refuses with it, and what cannot carry device memory
// refuses it (a PS client with a compact wire; TCP's data plane). A successful dma-buf export
// and registration need a GPU and an RDMA NIC together, which no machine here has: those are
// compiled here and run only where both exist.
#include "phub/exchange/gpudirect.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "phub/client/ps_client.h"
#include "phub/exchange/make_exchange.h"
#include "phub/staging/host_copy_engine.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/open_device.h"

namespace phub::exchange {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<staging::CopyEngine> SeparateDevice() {
  return std::shared_ptr<staging::CopyEngine>(
      *staging::MakeHostCopyEngine({.separate_device = true}));
}

Status Allowed() { return absl::OkStatus(); }

TEST(GpuDirectChoiceTest, EveryReasonToStageIsSaid) {
  auto engine = SeparateDevice();
  ExchangeOptions ps;
  ps.kind = ExchangeKind::kPs;
  // Everything allows: direct.
  auto all = ChooseGpuDirect(GpuDirectMode::kAuto, ps, *engine, Allowed);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->direct);

  auto off = ChooseGpuDirect(GpuDirectMode::kOff, ps, *engine, Allowed);
  EXPECT_FALSE(off->direct);
  EXPECT_THAT(off->reason, HasSubstr("--gpudirect off"));

  std::shared_ptr<staging::CopyEngine> cpu(*staging::MakeHostCopyEngine());
  auto host = ChooseGpuDirect(GpuDirectMode::kAuto, ps, *cpu, Allowed);
  EXPECT_FALSE(host->direct);
  EXPECT_THAT(host->reason, HasSubstr("host memory"));

  ExchangeOptions ring = ps;
  ring.kind = ExchangeKind::kRing;
  auto r = ChooseGpuDirect(GpuDirectMode::kAuto, ring, *engine, Allowed);
  EXPECT_FALSE(r->direct);
  EXPECT_THAT(r->reason, HasSubstr("ring"));

  ExchangeOptions bf16 = ps;
  bf16.ps.client.wire.format = kernels::WireFormat::kBf16;
  auto b = ChooseGpuDirect(GpuDirectMode::kAuto, bf16, *engine, Allowed);
  EXPECT_FALSE(b->direct);
  EXPECT_THAT(b->reason, HasSubstr("compact wire"));

  bool probed = false;
  auto p = ChooseGpuDirect(GpuDirectMode::kAuto, ps, *engine, [&] {
    probed = true;
    return absl::UnimplementedError("mlx5_0 cannot register device memory");
  });
  EXPECT_TRUE(probed);
  EXPECT_FALSE(p->direct);
  EXPECT_THAT(p->reason, HasSubstr("mlx5_0 cannot register device memory"));
  // The probe is asked only when nothing else rules GPUDirect out.
  probed = false;
  (void)ChooseGpuDirect(GpuDirectMode::kAuto, ring, *engine, [&] {
    probed = true;
    return absl::OkStatus();
  });
  EXPECT_FALSE(probed);
}

TEST(GpuDirectChoiceTest, OnThatCannotBeIsAnErrorSayingWhy) {
  auto engine = SeparateDevice();
  ExchangeOptions ps;
  auto on = ChooseGpuDirect(GpuDirectMode::kOn, ps, *engine,
                            [] { return absl::UnimplementedError("no RDMA device here"); });
  ASSERT_FALSE(on.ok());
  EXPECT_EQ(on.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(on.status().message(), HasSubstr("no RDMA device here"));
  EXPECT_THAT(on.status().message(), HasSubstr("--gpudirect auto"));
}

TEST(GpuDirectProbeTest, AnEngineWithoutDeviceMemoryExportsNothing) {
  auto engine = SeparateDevice();
  std::vector<std::byte> buffer(4096);
  const Status s = ProbeGpuDirect(*engine, buffer, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

TEST(GpuDirectExchangeTest, OnWithoutAGpuRefusesToMakeTheExchange) {
  auto engine = SeparateDevice();
  ExchangeOptions options;
  options.kind = ExchangeKind::kPs;
  options.gpudirect = GpuDirectMode::kOn;
  std::vector<float> g(8), w(8);
  auto x =
      MakeDeviceExchange(options, engine, {{"w", 8}}, {std::span<float>(g)}, {std::span<float>(w)});
  ASSERT_FALSE(x.ok());
  EXPECT_EQ(x.status().code(), absl::StatusCode::kFailedPrecondition) << x.status();
}

TEST(GpuDirectTransportTest, TcpCannotReachDeviceMemory) {
  auto device = transport::OpenDevice({transport::TransportKind::kTcp, {}, {}});
  ASSERT_TRUE(device.ok());
  transport::EventLoop loop("tcp", -1);
  Status status;
  std::vector<std::byte> memory(4096);
  loop.Run([&] {
    auto bound = (*device)->Bind(loop);
    ASSERT_TRUE(bound.ok());
    status = (*bound)->RegisterDeviceMemory({memory, -1, 0});
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_THAT(status.message(), HasSubstr("host memory"));
}

TEST(GpuDirectClientTest, ACompactWireWithDeviceMemoryIsRefusedBeforeConnecting) {
  client::PsClientOptions options;
  options.port = 1;  // never reached: refused first
  options.wire.format = kernels::WireFormat::kBf16;
  options.device_memory = [](std::span<std::byte> range) -> StatusOr<transport::DeviceMemory> {
    return transport::DeviceMemory{range, -1, 0};
  };
  std::vector<float> w(8);
  auto client = client::PsClient::Connect(options, {0, 1}, {{"w", 8}}, {std::span<float>(w)});
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("--gpudirect off"));
}

}  // namespace
}  // namespace phub::exchange
