// phub._phub's buffers and optimizer state in Python (python_buffers.h).
#include "phub/python/python_buffers.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"

namespace phub::python {

// The float32, C-contiguous buffer of `elements` floats behind `object` (what: for messages).
py::buffer_info FloatBuffer(const py::object& object, std::uint64_t elements, bool writable,
                            const std::string& what) {
  py::buffer_info info;
  try {
    info = py::reinterpret_borrow<py::buffer>(object).request(writable);
  } catch (const std::exception& e) {
    throw py::type_error(absl::StrCat(what, ": not a ", writable ? "writable " : "", "buffer (",
                                      e.what(), "); pass a numpy array or tensor.numpy()"));
  }
  if (info.itemsize != 4 || (info.format != "f" && info.format != "<f" && info.format != "=f")) {
    throw py::type_error(absl::StrCat(what, ": holds '", info.format, "' items of ", info.itemsize,
                                      " bytes; PHub moves float32 ('f')"));
  }
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expect) {
      throw py::value_error(absl::StrCat(what,
                                         ": not C-contiguous; pass a contiguous copy "
                                         "(numpy.ascontiguousarray, tensor.contiguous())"));
    }
    expect *= info.shape[d];
  }
  if (static_cast<std::uint64_t>(info.size) != elements) {
    throw py::value_error(
        absl::StrCat(what, ": holds ", info.size, " floats, the tensor has ", elements));
  }
  return info;
}

py::tuple StateToPython(const client::OptimizerState& state) {
  py::list arrays;
  for (const auto& by_tensor : state.arrays) {
    py::list tensors;
    for (const auto& values : by_tensor) {
      py::array_t<float> out(static_cast<py::ssize_t>(values.size()));
      std::copy(values.begin(), values.end(), out.mutable_data());
      tensors.append(std::move(out));
    }
    arrays.append(std::move(tensors));
  }
  return py::make_tuple(state.steps, std::move(arrays));
}

client::OptimizerState StateFromPython(std::uint64_t steps, const py::list& arrays,
                                       const std::vector<std::uint64_t>& elements) {
  client::OptimizerState state{.steps = steps, .arrays = {}};
  for (std::size_t a = 0; a < static_cast<std::size_t>(py::len(arrays)); ++a) {
    const py::list tensors = arrays[a];
    if (static_cast<std::size_t>(py::len(tensors)) != elements.size()) {
      throw py::value_error(absl::StrCat("state array ", a, ": ", py::len(tensors),
                                         " tensors; the job has ", elements.size()));
    }
    auto& out = state.arrays.emplace_back();
    for (std::size_t t = 0; t < elements.size(); ++t) {
      py::buffer_info info = FloatBuffer(tensors[t], elements[t], /*writable=*/false,
                                         absl::StrCat("state array ", a, " tensor ", t));
      const auto* begin = static_cast<const float*>(info.ptr);
      out.emplace_back(begin, begin + elements[t]);
    }
  }
  return state;
}

client::OptimizerState JoinSegments(const client::OptimizerState& by_segment, Segments segments,
                                    const std::vector<std::uint64_t>& elements) {
  client::OptimizerState out{.steps = by_segment.steps, .arrays = {}};
  for (const auto& pieces : by_segment.arrays) {
    auto& joined = out.arrays.emplace_back();
    for (std::uint64_t n : elements) joined.emplace_back(n);
    for (std::size_t k = 0; k < segments.size(); ++k) {
      std::copy(
          pieces[k].begin(), pieces[k].end(),
          joined[segments[k].tensor].begin() + static_cast<std::ptrdiff_t>(segments[k].offset));
    }
  }
  return out;
}

client::OptimizerState SplitIntoSegments(const client::OptimizerState& by_tensor,
                                         Segments segments) {
  client::OptimizerState out{.steps = by_tensor.steps, .arrays = {}};
  for (const auto& tensors : by_tensor.arrays) {
    auto& cut = out.arrays.emplace_back();
    for (const auto& k : segments) {
      const auto begin = tensors[k.tensor].begin() + static_cast<std::ptrdiff_t>(k.offset);
      cut.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(k.elements));
    }
  }
  return out;
}

}  // namespace phub::python
