// Writing a loaded model's weights back as a Hugging Face folder (what `gpe quantize` and
// `gpe merge-adapter` produce): the source folder's config.json edited, its tokenizer and
// generation files copied, and model.safetensors with every weight as held.
//
// Thread-safety: pure function.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "engine/formats/config.h"
#include "engine/model/model.h"
#include "nlohmann/json.hpp"

namespace gpeserve::model {

// Writes `weights` (NamedWeights of `config`, each in its held dtype: fp32, bf16, fp16, or int8
// with "<name>_scale" rows) into `out_dir` (created if missing; not `from_dir`) with
// `from_dir`'s config.json passed through `edit_config` (fields gpeserve does not read are
// kept) and its generation_config.json, tokenizer.json and tokenizer_config.json copied.
absl::Status WriteModelFolder(const std::string& from_dir, const std::string& out_dir,
                              const ModelConfig& config, const Weights& weights,
                              const std::function<void(nlohmann::json&)>& edit_config);

}  // namespace gpeserve::model
