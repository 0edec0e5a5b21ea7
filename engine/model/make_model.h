// Random-weight model folders in Hugging Face layout (`gpe make-model`): config.json,
// model.safetensors, generation_config.json and the tokenizer files copied from a tokenizer
// folder. Used by tests, benchmarks and as training initialisations.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"

namespace gpeserve::model {

struct MakeModelOptions {
  std::string arch = "qwen2";   // qwen2 | llama | mistral
  std::string preset = "tiny";  // see PresetNames()
  std::string tokenizer_dir;    // folder with tokenizer.json (+ tokenizer_config.json)
  uint64_t seed = 0;
  DType dtype = DType::kF32;  // stored dtype
  double init_std = 0.02;     // standard deviation of the random weights
  // Overrides of the preset (unset: keep the preset's value).
  std::optional<int64_t> num_layers;
  std::optional<int64_t> hidden_size;
  std::optional<int64_t> intermediate_size;
  std::optional<int64_t> num_heads;
  std::optional<int64_t> head_dim;
  std::optional<int64_t> num_kv_heads;
  std::optional<int64_t> max_position_embeddings;
  std::optional<bool> tie_word_embeddings;
  std::optional<std::string> rope_scaling;  // none | linear | llama3
  std::optional<bool> attention_bias;       // llama / mistral only
  std::optional<bool> mlp_bias;             // llama / mistral only
};

// Names of the presets: tiny, small, qwen2.5-0.5b, qwen2.5-3b, llama-3.2-1b.
std::vector<std::string> PresetNames();

// The configuration `options` describes, with the vocabulary size fitted to `tokenizer_vocab`
// (the preset's size, or the tokenizer's rounded up to a multiple of 64 when larger).
absl::StatusOr<ModelConfig> MakeConfig(const MakeModelOptions& options, int64_t tokenizer_vocab);

// Writes the folder `out_dir` (created if missing).
absl::Status MakeModel(const MakeModelOptions& options, const std::string& out_dir);

}  // namespace gpeserve::model
