// `gpe quantize`: writes a model folder with int8 weights (symmetric, one float32 scale per
// output row of every matrix, embedding included), a quarter of fp32's bytes. Serving it is
// the same as serving the original with --dtype int8 (which quantizes at load), without the
// full-precision folder or the load-time work.
//
// Thread-safety: pure function.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace gpeserve::model {

// Quantizes the model in `model_dir` (any stored float dtype) into `out_dir` (created if
// missing): model.safetensors (I8 matrices, F32 "<name>_scale" rows, F32 norms and biases),
// config.json with a quantization_config, and the tokenizer and generation files copied.
absl::Status QuantizeModel(const std::string& model_dir, const std::string& out_dir,
                           int threads = 0);

}  // namespace gpeserve::model
