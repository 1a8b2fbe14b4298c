// IDX files (the MNIST family's format: a big-endian header of magic, dimension sizes, then the
// raw bytes), gzip-compressed or not: zlib's gzread reads both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phub/common/status.h"

namespace phub::worker::data {

struct IdxArray {
  std::vector<std::uint32_t> dims;  // e.g. {60000, 28, 28}
  std::vector<std::uint8_t> values;  // unsigned bytes (type 0x08), row-major
};

// NotFound (naming the file) when it is missing; InvalidArgument when it is not an IDX file of
// unsigned bytes or is cut short (naming the file, what was expected and what was found).
StatusOr<IdxArray> ReadIdx(const std::string& path);

}  // namespace phub::worker::data
