// What phub._phub's classes share about Python's memory: a float32 buffer checked once, and
// the optimizer's state as Python holds it — (steps, arrays[a][t]: tensor t's float32 numpy
// array) — including its regrouping between a caller's tensors and the segments a staged
// exchange cut them into (StagedExchange::segments()).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "phub/client/ps_client.h"
#include "phub/exchange/staged_exchange.h"

namespace phub::python {

namespace py = pybind11;

// The float32, C-contiguous buffer of `elements` floats behind `object` (what: for messages).
// TypeError or ValueError naming what is wrong and what to pass instead.
py::buffer_info FloatBuffer(const py::object& object, std::uint64_t elements, bool writable,
                            const std::string& what);

// (steps, arrays) for Python: arrays[a][t] a new float32 numpy array.
py::tuple StateToPython(const client::OptimizerState& state);
// `arrays` (a list of lists of float32 buffers, tensor t's of elements[t] floats) as a state;
// ValueError for a tensor count that is not the job's.
client::OptimizerState StateFromPython(std::uint64_t steps, const py::list& arrays,
                                       const std::vector<std::uint64_t>& elements);

using Segments = std::span<const exchange::StagedExchange::Segment>;
// A state by segment (the exchange below's tensors) as a state by tensor (`elements[t]`
// floats each). REQUIRES: the state has one array per segment, each of its length.
client::OptimizerState JoinSegments(const client::OptimizerState& by_segment, Segments segments,
                                    const std::vector<std::uint64_t>& elements);
// The other way. REQUIRES: each tensor's arrays cover its segments.
client::OptimizerState SplitIntoSegments(const client::OptimizerState& by_tensor,
                                         Segments segments);

}  // namespace phub::python
