// Initial weights from a file (phubd --init-weights): raw little-endian float32, the model's
// tensors concatenated in tensor-table order, nothing else. Written by `phub-worker
// --save-weights` or by numpy's `array.astype('<f4').tofile(path)`.
#pragma once

#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/keys/key_table.h"

namespace phub::server {

// InvalidArgument when the file cannot be read or its size is not 4 × the table's elements
// (the message gives both sizes); NotFound when it does not exist.
StatusOr<std::vector<float>> LoadInitialWeights(const std::string& path,
                                                const keys::KeyTable& table);

}  // namespace phub::server
