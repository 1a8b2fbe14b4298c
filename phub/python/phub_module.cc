// phub._phub: PsClient (phub/client/ps_client.h) for Python, through pybind11. The Python side
// (phub/__init__.py, phub/torch.py) builds on these few calls.
//
// Buffers are anything with the buffer protocol holding float32, C-contiguous (numpy arrays,
// memoryviews, torch CPU tensors through .numpy()). The client keeps its own reference to each
// buffer for as long as the C++ side may touch the memory: the weight buffers for the client's
// life, a pushed gradient until the Wait that answers it. So Python may drop its references at
// any time without the network writing into freed memory.
//
// The GIL is released wherever the client may block on the network (connect, init, wait, close):
// other Python threads (PyTorch's autograd thread pushing the next bucket) go on meanwhile.
// Every error is a phub.PhubError (a RuntimeError) carrying PsClient's message: phubd's reason
// and fix, or which peer went silent for how long. Nothing waits without a deadline.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/client/ps_client.h"
#include "phub/common/logging.h"
#include "phub/common/token_file.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/python/module_support.h"
#include "phub/python/python_buffers.h"

namespace py = pybind11;

namespace phub::python {
namespace {

class Client {
 public:
  Client(const std::string& host, std::uint16_t port, std::uint32_t rank,
         std::uint32_t world_size, const std::vector<std::pair<std::string, std::uint64_t>>& tensors,
         const py::list& weights, const std::string& token, const std::optional<py::dict>& optimizer,
         int connect_timeout_ms, const std::string& rdma_device, const std::string& job,
         bool per_iteration_values, std::uint32_t min_workers, std::uint32_t start_workers,
         const std::string& lr_scaling, int io_threads, const std::string& wire,
         bool wire_weights) {
    if (static_cast<std::size_t>(py::len(weights)) != tensors.size()) {
      throw py::value_error(absl::StrCat("weights: ", py::len(weights), " buffers for ",
                                         tensors.size(), " tensors; give one per tensor"));
    }
    client::PsClientOptions options;
    options.host = host;
    options.port = port;
    options.job_token = token;
    options.job = job;
    options.connect_timeout_ms = connect_timeout_ms;
    options.rdma.device = rdma_device;
    if (io_threads < 1) throw py::value_error(absl::StrCat("io_threads ", io_threads, ": at least 1"));
    options.io_threads = io_threads;
    options.wire = ParseWire(wire, wire_weights);
    if (optimizer) {
      auto config = ParseOptimizer(*optimizer);
      if (!config.ok()) throw py::value_error(std::string(config.status().message()));
      options.optimizer = *config;
    }
    if (per_iteration_values && !options.optimizer) {
      throw py::value_error("per_iteration_values needs the optimizer (its kind): give optimizer=");
    }
    options.per_iteration_values = per_iteration_values;
    options.min_workers = min_workers;
    options.start_workers = start_workers;
    auto scaling = kernels::ParseLrScaling(lr_scaling);
    if (!scaling.ok()) throw py::value_error(std::string(scaling.status().message()));
    options.lr_scaling = *scaling;
    if (options.optimizer) optimizer_ = *options.optimizer;
    std::vector<keys::TensorSpec> specs;
    std::vector<std::span<float>> spans;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      specs.push_back({tensors[t].first, tensors[t].second});
      weights_.push_back(FloatBuffer(weights[t], tensors[t].second, /*writable=*/true,
                                     absl::StrCat("weights[", t, "] ('", tensors[t].first, "')")));
      spans.emplace_back(static_cast<float*>(weights_.back().ptr), tensors[t].second);
    }
    elements_.reserve(tensors.size());
    for (const auto& t : tensors) elements_.push_back(t.second);
    in_flight_.resize(tensors.size());
    StatusOr<std::unique_ptr<client::PsClient>> connected = absl::UnknownError("not connected");
    {
      py::gil_scoped_release release;
      connected = client::PsClient::Connect(options, {rank, world_size}, std::move(specs),
                                            std::move(spans));
    }
    ThrowIfError(connected.status(), "connect");
    client_ = *std::move(connected);
  }

  ~Client() {
    // The client writes into weights_: it goes first, and may block in Close (its Goodbye).
    py::gil_scoped_release release;
    client_.reset();
  }

  void Init() {
    client::PsClient& c = Get();
    Blocking("init", [&c] { return c.Init(); });
  }

  void Push(std::uint32_t tensor, const py::object& grads) {
    client::PsClient& c = Get();
    CheckTensor(tensor);
    py::buffer_info info = FloatBuffer(grads, elements_[tensor], /*writable=*/false,
                                       absl::StrCat("push(", tensor, ")"));
    const std::span<const float> span(static_cast<const float*>(info.ptr), elements_[tensor]);
    ThrowIfError(c.Push(tensor, span), "push");
    // Kept until the Wait that answers this push: the gradient goes out from this memory.
    in_flight_[tensor] = std::move(info);
  }

  void StepWith(const py::dict& values) {
    client::PsClient& c = Get();
    auto parsed = ParseStepValues(values, optimizer_);
    if (!parsed.ok()) throw py::value_error(std::string(parsed.status().message()));
    ThrowIfError(c.StepWith(*parsed), "step_with");
  }

  std::optional<py::dict> ResumeValues() {
    auto values = Get().resume_values();
    if (!values) return std::nullopt;
    return StepValuesDict(*values);
  }

  // (steps, arrays): arrays[a][t] a float32 numpy array of tensor t's elements.
  py::tuple FetchOptimizerState() {
    client::PsClient& c = Get();
    StatusOr<client::OptimizerState> state = absl::UnknownError("not fetched");
    {
      py::gil_scoped_release release;
      state = c.FetchOptimizerState();
    }
    ThrowIfError(state.status(), "fetch_optimizer_state");
    return StateToPython(*state);
  }

  void RestoreOptimizerState(std::uint64_t steps, const py::list& arrays) {
    client::PsClient& c = Get();
    const client::OptimizerState state = StateFromPython(steps, arrays, elements_);
    Blocking("restore_optimizer_state", [&] { return c.RestoreOptimizerState(state); });
  }

  void Wait(std::uint32_t tensor) {
    client::PsClient& c = Get();
    CheckTensor(tensor);
    Blocking("wait", [&c, tensor] { return c.Wait(tensor); });
    in_flight_[tensor].reset();
  }

  // wait(t) for each t in order, the GIL released once (a DDP bucket's parameters).
  void WaitMany(const std::vector<std::uint32_t>& tensors) {
    client::PsClient& c = Get();
    for (std::uint32_t t : tensors) CheckTensor(t);
    Blocking("wait_many", [&] {
      for (std::uint32_t t : tensors) PHUB_RETURN_IF_ERROR(c.Wait(t));
      return absl::OkStatus();
    });
    for (std::uint32_t t : tensors) in_flight_[t].reset();
  }

  void WaitAll() {
    client::PsClient& c = Get();
    Blocking("wait_all", [&c] { return c.WaitAll(); });
    for (auto& info : in_flight_) info.reset();
  }

  void Close() {
    if (!client_) return;
    Blocking("close", [this] { return client_->Close(); });
  }
  void Abandon() {
    if (!client_) return;
    Blocking("abandon", [this] { return client_->Abandon(); });
  }

  std::uint32_t rank() { return Get().rank(); }
  std::size_t tensors() const { return elements_.size(); }
  std::uint64_t resume_iteration() { return Get().resume_iteration(); }
  // Elastic jobs: iteration's members and this rank's place (may wait: GIL released).
  py::dict MembersOf(std::uint64_t iteration) {
    client::PsClient& c = Get();
    IterationMembers m;
    {
      py::gil_scoped_release release;
      m = c.MembersOf(iteration);
    }
    return MembersDict(m);
  }
  void RequestLeave() { ThrowIfError(Get().RequestLeave(), "request_leave"); }
  bool weights_from_server() { return Get().weights_from_server(); }
  std::uint64_t iteration(std::uint32_t tensor) {
    CheckTensor(tensor);
    return Get().iteration(tensor);
  }

 private:
  client::PsClient& Get() {
    if (!client_) throw PhubError("the client is not connected");
    return *client_;
  }
  void CheckTensor(std::uint32_t tensor) const {
    if (tensor >= elements_.size()) {
      throw py::index_error(absl::StrCat("tensor ", tensor, " does not exist: the job has ",
                                         elements_.size(), " tensors"));
    }
  }

  kernels::OptimizerConfig optimizer_;    // the connect's (step_with's defaults and kind)
  std::vector<py::buffer_info> weights_;  // held for client_'s life
  std::vector<std::uint64_t> elements_;
  std::vector<std::optional<py::buffer_info>> in_flight_;  // pushed, not yet waited for
  std::unique_ptr<client::PsClient> client_;               // destroyed first (~Client)
};

}  // namespace

PYBIND11_MODULE(_phub, m) {
  m.doc() = "PHub's PsClient (phub/client/ps_client.h): connect to phubd, push, wait, close";
  m.def(
      "set_up_logging",
      [](const std::string& level, const std::string& process) {
        ThrowIfError(SetUpLogging(level, process), "set_up_logging");
      },
      py::arg("level"), py::arg("process"),
      "spdlog's level (trace, debug, info, warn, error, critical, off) and the prefix of each "
      "line; phub.torch sets it from PHUB_LOG_LEVEL (default warn) and the rank.");
  py::register_exception<PhubError>(m, "PhubError", PyExc_RuntimeError);
  m.def(
      "read_token_file",
      [](const std::string& path) {
        StatusOr<std::string> token = ReadTokenFile(path);
        ThrowIfError(token.status(), "read_token_file");
        return *token;
      },
      py::arg("path"),
      "The job token a file holds, read as phubd and phub-worker read theirs "
      "(phub/common/token_file.h: trailing whitespace trimmed; empty, missing or oversized "
      "files raise PhubError naming the file and the fix).");
  py::class_<Client>(m, "PsClient", R"doc(
A worker's connection to phubd (one job, one rank). Connecting blocks until every worker of the
job has joined. weights[t] is tensor t's receive buffer (float32, contiguous, writable): the
weights, or in summation mode (optimizer kind "average") the mean gradient, land there.)doc")
      .def(py::init<const std::string&, std::uint16_t, std::uint32_t, std::uint32_t,
                    const std::vector<std::pair<std::string, std::uint64_t>>&, const py::list&,
                    const std::string&, const std::optional<py::dict>&, int,
                    const std::string&, const std::string&, bool, std::uint32_t,
                    std::uint32_t, const std::string&, int, const std::string&, bool>(),
           py::arg("host"), py::arg("port"), py::arg("rank"), py::arg("world_size"),
           py::arg("tensors"), py::arg("weights"), py::arg("token") = "",
           py::arg("optimizer") = py::none(), py::arg("connect_timeout_ms") = 30000,
           py::arg("rdma_device") = "", py::arg("job") = "",
           py::arg("per_iteration_values") = false, py::arg("min_workers") = 0,
           py::arg("start_workers") = 0, py::arg("lr_scaling") = "none",
           py::arg("io_threads") = 1, py::arg("wire") = "fp32", py::arg("wire_weights") = true,
           "tensors: [(name, elements)], the same on every rank. optimizer: None (phubd's "
           "flags) or a dict {kind: sgd|momentum|nesterov|adam|average, lr, momentum, "
           "weight_decay, beta1, beta2, eps}. job: the job's name on a shared phubd (\"\": "
           "\"default\"). per_iteration_values: the hyper-parameters may change every "
           "iteration (step_with before each iteration's first push); needs optimizer. "
           "min_workers > 0: an elastic job of min_workers to world_size workers, started by "
           "ranks 0..start_workers-1 (0: min_workers); later clients join it (members_of). "
           "lr_scaling: linear or sqrt: the lr is the rate at start_workers members and "
           "phubd scales it with each iteration's member count; none: it does not. "
           "io_threads: threads serving the connections to phubd's cores on TCP "
           "(PsClientOptions::io_threads). wire: fp32, or bf16/fp16 to halve the bytes "
           "(the same on every rank); wire_weights: the weights come back in it too.")
      .def("init", &Client::Init,
           "Rank 0's weights become everyone's (unless phubd has them); blocks until they land.")
      .def("push", &Client::Push, py::arg("tensor"), py::arg("grads"),
           "Starts pushing tensor's gradient (float32 buffer); returns at once. The buffer must "
           "not change until wait(tensor) returns.")
      .def("step_with", &Client::StepWith, py::arg("values"),
           "per_iteration_values: the values phubd steps this rank's next iteration with, a "
           "dict of the optimizer's keys (lr, momentum, weight_decay, beta1, beta2, eps; those "
           "not given keep the connect's). Once before each iteration's first push, the same "
           "on every rank (else phubd stalls the job naming each rank's).")
      .def_property_readonly("resume_values", &Client::ResumeValues,
                             "per_iteration_values, in a job phubd resumed or this rank "
                             "rejoined: the values phubd stepped resume_iteration with (a "
                             "dict), or None.")
      .def("fetch_optimizer_state", &Client::FetchOptimizerState,
           "(steps, arrays): the optimizer's state phubd holds, arrays[a][t] tensor t's part of "
           "state array a (momentum's velocity; Adam's m, then s), float32. Ask between an "
           "iteration's last wait and the next push.")
      .def("restore_optimizer_state", &Client::RestoreOptimizerState, py::arg("steps"),
           py::arg("arrays"),
           "Every rank, after init and before the first push: the job's optimizer starts from "
           "`steps` steps and (rank 0's) `arrays`, shaped as fetch_optimizer_state's (other "
           "ranks give []). Blocks until phubd has restored it.")
      .def("wait", &Client::Wait, py::arg("tensor"),
           "Blocks (GIL released) until the answer to the last push of tensor has landed.")
      .def("wait_many", &Client::WaitMany, py::arg("tensors"),
           "wait(t) for each t in order, the GIL released once for all.")
      .def("wait_all", &Client::WaitAll)
      .def("close", &Client::Close, "Leaves the job cleanly. Idempotent.")
      .def("abandon", &Client::Abandon,
           "Closes without leaving the job (no Goodbye): phubd takes this worker as lost, as a "
           "killed one. An elastic job then holds for restarted workers instead of ending. "
           "Idempotent; close() after it does nothing.")
      .def("iteration", &Client::iteration, py::arg("tensor"), "Completed pushes of tensor.")
      .def("members_of", &Client::MembersOf, py::arg("iteration"),
           "Elastic jobs: {member, index, world, member_iterations_before} of iteration (this "
           "rank's place among its members shards its data). Once this rank has pushed "
           "iteration - 1, waits (GIL released) until weights of it have landed: by then phubd "
           "has told it any change from iteration on.")
      .def("request_leave", &Client::RequestLeave,
           "Elastic jobs: leave at the next iteration boundary; members_of(t)['member'] turns "
           "False from the first iteration without this rank: wait_all, then close.")
      .def_property_readonly("rank", &Client::rank)
      .def_property_readonly("tensors", &Client::tensors)
      .def_property_readonly("resume_iteration", &Client::resume_iteration)
      .def_property_readonly("weights_from_server", &Client::weights_from_server)
      .def("__enter__", [](Client& c) -> Client& { return c; })
      .def("__exit__", [](Client& c, const py::args&) { c.Close(); });
  RegisterDeviceClient(m);
}

}  // namespace phub::python
