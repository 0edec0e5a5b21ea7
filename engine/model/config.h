// The architecture hyper-parameters of a Hugging Face causal LM (config.json), for the
// architectures gpeserve implements: Qwen2ForCausalLM, LlamaForCausalLM, MistralForCausalLM.
// Every field that changes the math is read; fields we do not implement are rejected with an
// error naming the field rather than silently computing something else.
//
// Thread-safety: plain value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gpeserve::model {

enum class Architecture { kQwen2, kLlama, kMistral };

// RoPE frequency scaling ("rope_scaling" in config.json).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;                   // linear and llama3
  double low_freq_factor = 1.0;          // llama3
  double high_freq_factor = 4.0;         // llama3
  int64_t original_max_position = 8192;  // llama3: original_max_position_embeddings
};

struct ModelConfig {
  Architecture architecture = Architecture::kQwen2;
  std::string architecture_name;  // as written in config.json, e.g. "Qwen2ForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads for multi-head attention
  int64_t head_dim = 0;      // hidden_size / num_heads unless given
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q/k/v/o (Qwen2: q/k/v always, o never)
  bool o_proj_bias = false;
  bool mlp_bias = false;
  std::string torch_dtype;  // stored dtype hint ("bfloat16", "float32", ...)
  // quantization_config.quant_method "gpeserve_int8": the matrices are stored as int8 with a
  // float32 "<name>_scale" per output row (written by `gpe quantize`). No other method is read.
  bool int8_weights = false;
  std::vector<int64_t> eos_token_ids;  // from config.json / generation_config.json
  std::optional<int64_t> bos_token_id;

  // Parses config.json contents; `name` is used in error messages (usually the file path).
  static absl::StatusOr<ModelConfig> FromJson(const nlohmann::json& json, const std::string& name);
  // Writes the config.json that Hugging Face transformers loads for this configuration.
  nlohmann::json ToJson() const;
};

// The quantization_config of a folder written by `gpe quantize` (int8_weights).
nlohmann::json Int8QuantizationConfig();

// Reads DIR/config.json and, if present, DIR/generation_config.json (eos ids).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);

}  // namespace gpeserve::model
