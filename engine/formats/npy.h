// Writing NumPy .npy files (format 1.0) for golden tests and `gpe logits`.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gpeserve::model {

// Writes a C-order float32 array of `shape` (data holds the product of shape values).
absl::Status WriteNpyFloat32(const std::string& path, const std::vector<int64_t>& shape,
                             const float* data);

}  // namespace gpeserve::model
