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
#include "engine/formats/config.h"
#include "engine/formats/safetensors.h"

namespace gpeserve::model {

struct MakeModelOptions {
  // qwen2 | llama | mistral | gemma2 | gemma3 | qwen3 | phi3; empty: the preset's own (qwen2 for
  // the shape-only presets tiny and small).
  std::string arch;
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
  std::optional<std::string> rope_scaling;  // none | linear | llama3 | longrope (phi3)
  std::optional<bool> attention_bias;       // llama / gemma2 / gemma3 / qwen3 only
  std::optional<bool> mlp_bias;             // llama only
  // Sliding window (mistral, gemma2, gemma3, phi3; qwen2/qwen3 window their layers from
  // max_window_layers on); 0: none.
  std::optional<int64_t> sliding_window;
  std::optional<int64_t> max_window_layers;  // qwen2 / qwen3
  // gemma3: every N-th layer global, the others windowed with the local rotary base (6).
  std::optional<int64_t> sliding_window_pattern;
  // gemma2, gemma3: soft-capping of attention scores and of the final logits (0: none).
  std::optional<double> attn_logit_softcapping;
  std::optional<double> final_logit_softcapping;
  std::optional<double> partial_rotary_factor;              // phi3
  std::optional<int64_t> original_max_position_embeddings;  // phi3 longrope
};

// Names of the presets: tiny, small, and the shapes of public checkpoints (qwen2.5-0.5b,
// qwen2.5-3b, llama-3.2-1b, gemma2-2b, gemma3-270m, gemma3-1b, qwen3-0.6b, qwen3-4b, phi3-mini,
// phi3-mini-128k).
std::vector<std::string> PresetNames();

// The configuration `options` describes, with the vocabulary size fitted to `tokenizer_vocab`
// (the preset's size, or the tokenizer's rounded up to a multiple of 64 when larger).
absl::StatusOr<ModelConfig> MakeConfig(const MakeModelOptions& options, int64_t tokenizer_vocab);

// Writes the folder `out_dir` (created if missing).
absl::Status MakeModel(const MakeModelOptions& options, const std::string& out_dir);

}  // namespace gpeserve::model
