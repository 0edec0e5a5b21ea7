// The model configuration a GGUF file's metadata describes, as the config.json Hugging Face
// would write for it: llama.cpp's keys ("<arch>.embedding_length", "<arch>.block_count", ...)
// mapped to transformers' fields, then read by ModelConfig::FromJson with all its checks. What
// llama.cpp keeps as tensors rather than metadata (whether the head is tied, the biases) is read
// from the tensor names. Architectures: llama (also Mistral's and SmolLM's files), qwen2,
// qwen3, gemma2, gemma3, phi3.
//
// Thread-safety: pure functions.
#pragma once

#include "absl/status/statusor.h"
#include "engine/formats/config.h"
#include "engine/formats/gguf.h"
#include "nlohmann/json.hpp"

namespace gpeserve::model {

// config.json for `file` (errors name the file and the key: Unimplemented for an architecture
// or a rope scaling the project does not serve from GGUF).
absl::StatusOr<nlohmann::json> GgufConfigJson(const GgufFile& file);

// GgufConfigJson read as a ModelConfig, eos and bos ids from tokenizer.ggml.*.
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file);

}  // namespace gpeserve::model
