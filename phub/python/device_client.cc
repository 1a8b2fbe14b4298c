// phub._phub.DeviceClient: phubd for tensors in a GPU's memory (phub.torch's CUDA path), through
// the same staging pipeline phub-worker uses (phub/exchange/staged_exchange.h over a PsExchange,
// a CUDA copy engine: pinned staging registered once, a copy per tensor on its own stream as
// the producer's stream reaches it, pushed the moment it is done, the answer copied back to
// the device as it lands). Python hands device pointers and CUDA stream handles as integers
// (tensor.data_ptr(), stream.cuda_stream) and keeps the tensors alive for the client's life;
// no Python thread copies or waits on the device. Device -1 runs the same pipeline on tensors in
// host memory through the host engine (a CPU rank of a GPU job; CI, which has no GPU).
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "phub/exchange/ps_exchange.h"
#include "phub/exchange/staged_exchange.h"
#include "phub/kernels/lr_scaling.h"
#include "phub/python/module_support.h"
#include "phub/python/python_buffers.h"
#include "phub/staging/host_copy_engine.h"
#ifdef PHUB_HAVE_CUDA_STAGING
#include "phub/staging/cuda_copy_engine.h"
#endif

namespace phub::python {
namespace {

staging::Stream AsStream(std::uintptr_t handle) {
  return reinterpret_cast<staging::Stream>(handle);
}

// The engine for `device`: a GPU's CUDA streams, or for -1 the host engine, whose "device" is
// this process's memory (a CPU rank of a job with GPU ranks: the same pipeline, so the same
// segments; and how CI runs this path without a GPU).
StatusOr<std::unique_ptr<staging::CopyEngine>> MakeEngine(int device) {
  if (device < 0) return staging::MakeHostCopyEngine();
#ifdef PHUB_HAVE_CUDA_STAGING
  return staging::MakeCudaCopyEngine({.device = device});
#else
  return absl::UnimplementedError(
      "this build of phub has no CUDA toolkit: CUDA tensors cannot be staged; rebuild with "
      "-DPHUB_WITH_CUDA=ON on a machine with the CUDA toolkit, or give device -1 for tensors "
      "in host memory");
#endif
}

class DeviceClient {
 public:
  DeviceClient(const std::string& host, std::uint16_t port, std::uint32_t rank,
               std::uint32_t world_size,
               const std::vector<std::pair<std::string, std::uint64_t>>& tensors,
               const std::vector<std::uintptr_t>& grads, const std::vector<std::uintptr_t>& weights,
               int device, const std::string& token, const std::optional<py::dict>& optimizer,
               int connect_timeout_ms, const std::string& rdma_device, const std::string& job,
               bool per_iteration_values, int io_threads, const std::string& wire,
               bool wire_weights, std::uint64_t segment_bytes, std::uint32_t min_workers,
               std::uint32_t start_workers, const std::string& lr_scaling) {
    if (grads.size() != tensors.size() || weights.size() != tensors.size()) {
      throw py::value_error(absl::StrCat("grads and weights: ", grads.size(), " and ",
                                         weights.size(), " device pointers for ", tensors.size(),
                                         " tensors; give one of each per tensor"));
    }
    exchange::PsExchangeOptions options;
    options.client.job_token = token;
    options.client.job = job;
    options.client.connect_timeout_ms = connect_timeout_ms;
    options.client.rdma.device = rdma_device;
    if (io_threads < 1) {
      throw py::value_error(absl::StrCat("io_threads ", io_threads, ": at least 1"));
    }
    options.client.io_threads = io_threads;
    options.client.wire = ParseWire(wire, wire_weights);
    if (optimizer) {
      auto config = ParseOptimizer(*optimizer);
      if (!config.ok()) throw py::value_error(std::string(config.status().message()));
      options.client.optimizer = *config;
      optimizer_ = *config;
    }
    if (per_iteration_values && !optimizer) {
      throw py::value_error("per_iteration_values needs the optimizer (its kind): give optimizer=");
    }
    options.client.per_iteration_values = per_iteration_values;
    options.client.min_workers = min_workers;
    options.client.start_workers = start_workers;
    auto scaling = kernels::ParseLrScaling(lr_scaling);
    if (!scaling.ok()) throw py::value_error(std::string(scaling.status().message()));
    options.client.lr_scaling = *scaling;
    options.servers.push_back({host, port});
    std::vector<keys::TensorSpec> specs;
    std::vector<std::span<const float>> g;
    std::vector<std::span<float>> w;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      specs.push_back({tensors[t].first, tensors[t].second});
      g.emplace_back(reinterpret_cast<const float*>(grads[t]), tensors[t].second);
      w.emplace_back(reinterpret_cast<float*>(weights[t]), tensors[t].second);
      elements_.push_back(tensors[t].second);
    }
    StatusOr<std::unique_ptr<exchange::StagedExchange>> made = absl::UnknownError("not made");
    {
      py::gil_scoped_release release;
      auto engine = MakeEngine(device);
      if (!engine.ok()) {
        made = engine.status();
      } else {
        const exchange::PsSeat seat{{rank, world_size}, {}};
        made = exchange::StagedExchange::Create(
            *std::move(engine), std::move(specs), std::move(g), std::move(w),
            [&](std::vector<keys::TensorSpec> t, std::vector<std::span<float>> landed)
                -> StatusOr<std::unique_ptr<exchange::GradientExchange>> {
              PHUB_ASSIGN_OR_RETURN(auto ps, exchange::PsExchange::Connect(
                                                 options, seat, std::move(t), std::move(landed)));
              ps_ = ps.get();  // owned by the StagedExchange, which outlives every use
              return std::unique_ptr<exchange::GradientExchange>(std::move(ps));
            },
            {.segment_bytes = segment_bytes});
      }
    }
    ThrowIfError(made.status(),
                 device < 0 ? "connect (host tensors, staged)" : "connect (CUDA tensors)");
    exchange_ = *std::move(made);
  }

  ~DeviceClient() {
    py::gil_scoped_release release;
    exchange_.reset();
  }

  // As PsClient.step_with: through the staging pipeline, behind the pushes it still holds.
  void StepWith(const py::dict& values) {
    exchange::DeviceExchange& x = Get();
    auto parsed = ParseStepValues(values, optimizer_);
    if (!parsed.ok()) throw py::value_error(std::string(parsed.status().message()));
    Blocking("step_with", [&] { return x.BeginIteration(*parsed); });
  }

  void Init(std::uintptr_t stream) {
    exchange::DeviceExchange& x = Get();
    Blocking("init", [&] { return x.Init(AsStream(stream)); });
  }
  // Without the GIL: the copy may wait for room in the staging ring (back-pressure), and the
  // waiter thread needs the GIL meanwhile to drain it.
  void Push(std::uint32_t tensor, std::uintptr_t stream) {
    exchange::DeviceExchange& x = Get();
    Blocking("push", [&] { return x.Push(tensor, AsStream(stream)); });
  }
  void Wait(std::uint32_t tensor, std::uintptr_t stream) {
    exchange::DeviceExchange& x = Get();
    Blocking("wait", [&] { return x.Wait(tensor, AsStream(stream)); });
  }
  // A bucket's tensors in one call: the GIL is released once for all of them, not once per
  // tensor (the hook's thread and the waiter's would otherwise trade it at every parameter).
  void PushMany(const std::vector<std::uint32_t>& tensors, std::uintptr_t stream) {
    exchange::DeviceExchange& x = Get();
    Blocking("push_many", [&] {
      return ForEach(tensors, [&](std::uint32_t t) { return x.Push(t, AsStream(stream)); });
    });
  }
  void WaitMany(const std::vector<std::uint32_t>& tensors, std::uintptr_t stream) {
    exchange::DeviceExchange& x = Get();
    Blocking("wait_many", [&] {
      return ForEach(tensors, [&](std::uint32_t t) { return x.Wait(t, AsStream(stream)); });
    });
  }
  // As PsClient's: the state by tensor, though phubd holds it by segment. Between a step's
  // last wait and the next push (the pipeline's threads are idle then).
  py::tuple FetchOptimizerState() {
    Get();
    StatusOr<client::OptimizerState> state = absl::UnknownError("not fetched");
    {
      py::gil_scoped_release release;
      state = ps_->client(0).FetchOptimizerState();
    }
    ThrowIfError(state.status(), "fetch_optimizer_state");
    return StateToPython(JoinSegments(*state, exchange_->segments(), elements_));
  }
  void RestoreOptimizerState(std::uint64_t steps, const py::list& arrays) {
    Get();
    const client::OptimizerState state =
        SplitIntoSegments(StateFromPython(steps, arrays, elements_), exchange_->segments());
    Blocking("restore_optimizer_state",
             [&] { return ps_->client(0).RestoreOptimizerState(state); });
  }
  // Closes without leaving the job (no Goodbye), as PsClient.abandon: phubd takes this worker
  // as lost. The client first, so that closing the pipeline after it says nothing.
  void Abandon() {
    if (!exchange_) return;
    Blocking("abandon", [this] {
      PHUB_RETURN_IF_ERROR(ps_->client(0).Abandon());
      return exchange_->Close();
    });
  }
  // As PsClient.members_of (the exchange below answers: between steps its pushes are the
  // caller's, and members_of is asked for the iteration about to start).
  py::dict MembersOf(std::uint64_t iteration) {
    Get();
    IterationMembers m;
    {
      py::gil_scoped_release release;
      m = ps_->MembersOf(iteration);
    }
    return MembersDict(m);
  }
  void RequestLeave() {
    Get();
    ThrowIfError(ps_->RequestLeave(), "request_leave");
  }
  void Close() {
    if (!exchange_) return;
    Blocking("close", [this] { return exchange_->Close(); });
  }
  // phubd's: a worker joining an elastic job whose rank is taken gets the lowest free one.
  std::uint32_t rank() {
    Get();
    return ps_->client(0).rank();
  }
  // As PsClient.resume_iteration: the iteration init()'s weights are of (0 in a fresh job; a
  // job phubd resumed from a checkpoint: its iteration).
  std::uint64_t resume_iteration() { return Get().start_iteration(); }

 private:
  template <typename Call>
  static Status ForEach(const std::vector<std::uint32_t>& tensors, const Call& call) {
    for (std::uint32_t t : tensors) PHUB_RETURN_IF_ERROR(call(t));
    return absl::OkStatus();
  }
  exchange::DeviceExchange& Get() {
    if (!exchange_) throw PhubError("the client is not connected");
    return *exchange_;
  }

  kernels::OptimizerConfig optimizer_;  // the connect's (step_with's defaults and kind)
  std::unique_ptr<exchange::StagedExchange> exchange_;
  exchange::PsExchange* ps_ = nullptr;   // the exchange below exchange_'s staging
  std::vector<std::uint64_t> elements_;  // by tensor
};

}  // namespace

void RegisterDeviceClient(py::module_& m) {
  py::class_<DeviceClient>(m, "DeviceClient", R"doc(
A worker's connection to phubd for tensors in one GPU's memory. grads[t] and weights[t] are
device pointers (tensor.data_ptr()) of tensor t's gradient and answer buffers, float32, kept
alive by the caller for the client's life; streams are CUDA stream handles (stream.cuda_stream).
device -1: grads and weights are host memory (CPU tensors), streams 0; the same pipeline
through the host engine.
A tensor longer than segment_bytes (0: none) is copied, pushed and landed in segments of it.
min_workers, start_workers, lr_scaling: an elastic job, as PsClient's.
push(t, s): tensor t's gradient is what stream s's work enqueued so far writes; returns once its
copy is enqueued (GIL released: a full staging ring holds it back).
wait(t, s): blocks on the network only (GIL released), then makes stream s wait on the device for
the answer in weights[t].)doc")
      .def(py::init<const std::string&, std::uint16_t, std::uint32_t, std::uint32_t,
                    const std::vector<std::pair<std::string, std::uint64_t>>&,
                    const std::vector<std::uintptr_t>&, const std::vector<std::uintptr_t>&, int,
                    const std::string&, const std::optional<py::dict>&, int, const std::string&,
                    const std::string&, bool, int, const std::string&, bool, std::uint64_t,
                    std::uint32_t, std::uint32_t, const std::string&>(),
           py::arg("host"), py::arg("port"), py::arg("rank"), py::arg("world_size"),
           py::arg("tensors"), py::arg("grads"), py::arg("weights"), py::arg("device"),
           py::arg("token") = "", py::arg("optimizer") = py::none(),
           py::arg("connect_timeout_ms") = 30000, py::arg("rdma_device") = "", py::arg("job") = "",
           py::arg("per_iteration_values") = false, py::arg("io_threads") = 1,
           py::arg("wire") = "fp32", py::arg("wire_weights") = true,
           py::arg("segment_bytes") = exchange::kDefaultSegmentBytes, py::arg("min_workers") = 0,
           py::arg("start_workers") = 0, py::arg("lr_scaling") = "none")
      .def("step_with", &DeviceClient::StepWith, py::arg("values"),
           "As PsClient.step_with: the next iteration's values, before its first push.")
      .def("init", &DeviceClient::Init, py::arg("stream"),
           "Rank 0's weights[] become everyone's; returns once they are on this device.")
      .def("push", &DeviceClient::Push, py::arg("tensor"), py::arg("stream"))
      .def("wait", &DeviceClient::Wait, py::arg("tensor"), py::arg("stream"))
      .def("push_many", &DeviceClient::PushMany, py::arg("tensors"), py::arg("stream"),
           "push(t, stream) for each t in order, the GIL released once for all.")
      .def("wait_many", &DeviceClient::WaitMany, py::arg("tensors"), py::arg("stream"),
           "wait(t, stream) for each t in order, the GIL released once for all.")
      .def("fetch_optimizer_state", &DeviceClient::FetchOptimizerState,
           "As PsClient.fetch_optimizer_state: (steps, arrays[a][t]), by tensor.")
      .def("restore_optimizer_state", &DeviceClient::RestoreOptimizerState, py::arg("steps"),
           py::arg("arrays"), "As PsClient.restore_optimizer_state (arrays by tensor).")
      .def("close", &DeviceClient::Close, "Leaves the job cleanly. Idempotent.")
      .def("abandon", &DeviceClient::Abandon,
           "As PsClient.abandon: closes without leaving the job (no Goodbye). Idempotent.")
      .def("members_of", &DeviceClient::MembersOf, py::arg("iteration"),
           "As PsClient.members_of: {member, index, world, member_iterations_before}.")
      .def("request_leave", &DeviceClient::RequestLeave,
           "As PsClient.request_leave: leave the elastic job at the next iteration boundary.")
      .def_property_readonly("rank", &DeviceClient::rank)
      .def_property_readonly("resume_iteration", &DeviceClient::resume_iteration,
                             "The iteration init()'s weights are of: 0 in a fresh job.");
}

}  // namespace phub::python
