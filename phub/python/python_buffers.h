// What phub._phub's classes share about Python's memory: a float32 buffer checked once, and
// the optimizer's state as Python holds it — (steps, arrays[a][t]: tensor t's float32 numpy
// array) — including its regrouping between a caller's tensors and the segments a staged
// exchange cut them into (StagedExchange: segments consecutive, in order, per tensor).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "phub/client/ps_client.h"

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

// A state by segment as a state by tensor: tensor t's arrays are the next segments[t]
// segments' joined. REQUIRES: segments sum to the state's tensors.
client::OptimizerState JoinSegments(client::OptimizerState by_segment,
                                    const std::vector<std::uint32_t>& segments);
// The other way: tensor t's arrays cut into segments of the given lengths, in order
// (lengths: every segment's elements; segments[t]: how many are tensor t's).
client::OptimizerState SplitIntoSegments(const client::OptimizerState& by_tensor,
                                         const std::vector<std::uint32_t>& segments,
                                         const std::vector<std::uint64_t>& lengths);

}  // namespace phub::python
