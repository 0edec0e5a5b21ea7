// The architecture hyper-parameters of a Hugging Face causal LM (config.json), for the
// architectures gpeserve implements: Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM,
// MistralForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM (also the text model of
// Gemma3ForConditionalGeneration) and Phi3ForCausalLM. Every field that
// changes the math is read; fields we do not implement are rejected with an error naming the field
// rather than silently computing something else. The architecture's quirks are resolved here into
// plain switches (norm style, activation, q/k norms, ...) so that the forward pass reads them, not
// the architecture's name.
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

enum class Architecture { kQwen2, kLlama, kMistral, kGemma2, kQwen3, kPhi3, kGemma3 };

// The gated MLP's activation ("hidden_act" / Gemma's "hidden_activation").
enum class Activation { kSilu, kGeluTanh };

// RoPE frequency scaling ("rope_scaling" in config.json).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kLongRope };
  Type type = Type::kNone;
  double factor = 1.0;                   // linear and llama3
  double low_freq_factor = 1.0;          // llama3
  double high_freq_factor = 4.0;         // llama3
  int64_t original_max_position = 8192;  // llama3, longrope: original_max_position_embeddings
  // longrope (Phi-3): per-frequency divisors of the inverse frequencies, rotary_dim / 2 each;
  // positions below original_max_position use the short ones, the rest the long ones. Both
  // tables' cos and sin are multiplied by attention_factor.
  // attention_factor = sqrt(1 + ln(max_position_embeddings / original) / ln(original)), 1 when
  // the ratio is at most 1 (Phi-3's config cannot set it).
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1.0;
};

// longrope's attention factor: sqrt(1 + ln(s) / ln(original)), s = max_positions / original;
// 1 when s <= 1.
double LongRopeAttentionFactor(int64_t max_positions, int64_t original);

struct ModelConfig {
  Architecture architecture = Architecture::kQwen2;
  std::string architecture_name;  // as written in config.json, e.g. "Qwen2ForCausalLM"
  // Gemma3ForConditionalGeneration: the text model of a multimodal checkpoint, configured by
  // config.json's text_config, its tensors under the language model's names (the vision tower
  // is not read). The config.json it writes (ToJson) is the text model's, Gemma3ForCausalLM.
  bool multimodal = false;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads for multi-head attention
  int64_t head_dim = 0;      // hidden_size / num_heads unless given
  // Rotary embedding on the first rotary_dim channels of each head (partial_rotary_factor *
  // head_dim); the rest pass through.
  int64_t rotary_dim = 0;
  double partial_rotary_factor = 1.0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q/k/v/o (Qwen2: q/k/v always, o never)
  bool o_proj_bias = false;
  bool mlp_bias = false;
  Activation activation = Activation::kSilu;

  // Sliding-window attention: a windowed layer's query sees only the last `sliding_window` of
  // the keys it may see, in cache order (0: no window). windowed_layers[i]: layer i is one.
  int64_t sliding_window = 0;
  std::vector<bool> windowed_layers;
  // Qwen 2/3 checkpoints: use_sliding_window and max_window_layers as written (windowed_layers
  // is derived from them).
  bool use_sliding_window = false;
  int64_t max_window_layers = 0;

  // Gemma 2 and 3: attention scale query_pre_attn_scalar^-0.5 (otherwise head_dim^-0.5); tanh
  // soft-capping of attention scores and final logits (0: none); embeddings times
  // sqrt(hidden_size); RMSNorm weights as (1 + w); a norm after attention and after the MLP.
  double query_pre_attn_scalar = 0;
  double attn_logit_softcapping = 0;
  double final_logit_softcapping = 0;
  bool scale_embeddings = false;
  bool norm_weight_plus_one = false;
  bool sandwich_norms = false;
  // Qwen 3, Gemma 3: RMSNorm over each head of q and k (q_norm, k_norm) before the rotary
  // embedding.
  bool qk_norm = false;
  // Gemma 3: the windowed layers rotate with base rope_local_base_freq and no rope_scaling; the
  // others with rope_theta and rope_scaling (0: every layer alike).
  double rope_local_theta = 0;
  // Phi-3: q/k/v stored as one qkv_proj, gate and up as one gate_up_proj.
  bool fused_projections = false;

  std::string torch_dtype;  // stored dtype hint ("bfloat16", "float32", ...)
  // quantization_config.quant_method "gpeserve_int8": the matrices are stored as int8 with a
  // float32 "<name>_scale" per output row (written by `gpe quantize`). No other method is read.
  bool int8_weights = false;
  std::vector<int64_t> eos_token_ids;  // from config.json / generation_config.json
  std::optional<int64_t> bos_token_id;

  // The factor multiplying q.k in attention.
  double attention_scale() const;
  bool windowed(int64_t layer) const {
    return sliding_window > 0 && layer < static_cast<int64_t>(windowed_layers.size()) &&
           windowed_layers[layer];
  }
  // Whether `layer` rotates with the local base (rope_local_theta): Gemma 3's windowed layers.
  bool local_rotary(int64_t layer) const {
    return rope_local_theta > 0 && layer < static_cast<int64_t>(windowed_layers.size()) &&
           windowed_layers[layer];
  }
  // The model_type transformers reads ("qwen2", "gemma2", "gemma3_text", ...).
  const char* model_type() const;

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
