#include "engine/formats/gguf_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpeserve::model {
namespace {

// general.architecture -> the transformers class that computes the same model.
constexpr std::pair<const char*, const char*> kArchitectures[] = {
    {"llama", "LlamaForCausalLM"},   {"qwen2", "Qwen2ForCausalLM"},   {"qwen3", "Qwen3ForCausalLM"},
    {"gemma2", "Gemma2ForCausalLM"}, {"gemma3", "Gemma3ForCausalLM"}, {"phi3", "Phi3ForCausalLM"},
};

// Copies metadata `key` (an integer) to json[field]; absent is an error when `required`.
absl::Status CopyInteger(const GgufFile& file, const std::string& key, nlohmann::json& json,
                         const char* field, bool required = true) {
  if (file.FindValue(key) == nullptr && !required) return absl::OkStatus();
  auto value = file.Integer(key);
  if (!value.ok()) return value.status();
  json[field] = *value;
  return absl::OkStatus();
}

absl::Status CopyFloat(const GgufFile& file, const std::string& key, nlohmann::json& json,
                       const char* field) {
  if (file.FindValue(key) == nullptr) return absl::OkStatus();
  auto value = file.Float(key);
  if (!value.ok()) return value.status();
  json[field] = *value;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> GgufConfigJson(const GgufFile& file) {
  auto arch = file.String("general.architecture");
  if (!arch.ok()) return arch.status();
  const char* class_name = nullptr;
  std::string served;
  for (const auto& [name, cls] : kArchitectures) {
    if (*arch == name) class_name = cls;
    absl::StrAppend(&served, served.empty() ? "" : ", ", name);
  }
  if (class_name == nullptr) {
    return absl::UnimplementedError(absl::StrCat(file.path(), ": general.architecture '", *arch,
                                                 "' is not served (", served, ")"));
  }
  const std::string a = *arch + ".";
  nlohmann::json json = {{"architectures", {class_name}}, {"model_type", *arch}};
  for (const auto& [key, field] : {std::pair{"embedding_length", "hidden_size"},
                                   std::pair{"feed_forward_length", "intermediate_size"},
                                   std::pair{"block_count", "num_hidden_layers"},
                                   std::pair{"attention.head_count", "num_attention_heads"},
                                   std::pair{"context_length", "max_position_embeddings"}}) {
    if (absl::Status s = CopyInteger(file, a + key, json, field); !s.ok()) return s;
  }
  // Multi-head attention when absent.
  json["num_key_value_heads"] = json["num_attention_heads"];
  for (const auto& [key, field] : {std::pair{"attention.head_count_kv", "num_key_value_heads"},
                                   std::pair{"attention.key_length", "head_dim"},
                                   std::pair{"attention.sliding_window", "sliding_window"}}) {
    if (absl::Status s = CopyInteger(file, a + key, json, field, false); !s.ok()) return s;
  }
  for (const auto& [key, field] :
       {std::pair{"attention.layer_norm_rms_epsilon", "rms_norm_eps"},
        std::pair{"rope.freq_base", "rope_theta"},
        std::pair{"attn_logit_softcapping", "attn_logit_softcapping"},
        std::pair{"final_logit_softcapping", "final_logit_softcapping"}}) {
    if (absl::Status s = CopyFloat(file, a + key, json, field); !s.ok()) return s;
  }
  // The vocabulary: the embedding's rows.
  const GgufTensorInfo* embed = file.Find("token_embd.weight");
  if (embed == nullptr || embed->dims.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": no 2-D tensor 'token_embd.weight' (the embedding)"));
  }
  json["vocab_size"] = embed->dims[1];
  // llama.cpp keeps these as tensors, not metadata.
  json["tie_word_embeddings"] = file.Find("output.weight") == nullptr;
  if (*arch == "llama") {
    json["attention_bias"] = file.Find("blk.0.attn_q.bias") != nullptr;
    json["mlp_bias"] = file.Find("blk.0.ffn_gate.bias") != nullptr;
  }
  if (*arch == "qwen3") json["attention_bias"] = file.Find("blk.0.attn_q.bias") != nullptr;
  if (*arch == "gemma2" || *arch == "gemma3") {
    // llama.cpp scales queries by head_dim^-0.5 (query_pre_attn_scalar = head_dim: Gemma 2 2B
    // and 9B, Gemma 3 up to 12B; the 27Bs' differ and are not told apart in the file).
    if (json.contains("head_dim")) json["query_pre_attn_scalar"] = json["head_dim"];
    json["hidden_activation"] = "gelu_pytorch_tanh";
  }
  // Gemma 3: llama.cpp fixes what the file leaves out as Gemma3TextConfig's defaults do, which
  // ModelConfig takes: local layers rotate with base 10000 unscaled, every 6th layer is global.
  if (*arch == "phi3") {
    if (file.Find("rope_factors_long.weight") != nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(file.path(),
                       ": Phi-3's longrope factors (rope_factors_long.weight) are not read from "
                       "GGUF yet: serve the Hugging Face folder"));
    }
    if (json.contains("sliding_window")) json["sliding_window"] = nullptr;
  }
  if (file.Find("rope_freqs.weight") != nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(file.path(),
                     ": rope_freqs.weight (Llama 3.1's frequency scaling) is not read from GGUF "
                     "yet: serve the Hugging Face folder"));
  }
  if (file.FindValue(a + "rope.scaling.type") != nullptr) {
    auto type = file.String(a + "rope.scaling.type");
    if (!type.ok()) return type.status();
    if (*type == "linear") {
      auto factor = file.Float(a + "rope.scaling.factor");
      if (!factor.ok()) return factor.status();
      json["rope_scaling"] = {{"type", "linear"}, {"factor", *factor}};
    } else if (*type != "none") {
      return absl::UnimplementedError(
          absl::StrCat(file.path(), ": ", a, "rope.scaling.type '", *type, "' (none, linear)"));
    }
  }
  // Rotary channels short of a head: Phi-3's partial_rotary_factor (refused elsewhere).
  if (file.FindValue(a + "rope.dimension_count") != nullptr) {
    auto rotary = file.Integer(a + "rope.dimension_count");
    if (!rotary.ok()) return rotary.status();
    const int64_t head_dim = json.contains("head_dim")
                                 ? json["head_dim"].get<int64_t>()
                                 : json["hidden_size"].get<int64_t>() /
                                       std::max<int64_t>(1, json["num_attention_heads"]);
    if (*rotary != head_dim) {
      json["partial_rotary_factor"] = static_cast<double>(*rotary) / static_cast<double>(head_dim);
    }
  }
  for (const auto& [key, field] : {std::pair{"tokenizer.ggml.eos_token_id", "eos_token_id"},
                                   std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"}}) {
    if (absl::Status s = CopyInteger(file, key, json, field, false); !s.ok()) return s;
  }
  return json;
}

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file) {
  auto json = GgufConfigJson(file);
  if (!json.ok()) return json.status();
  return ModelConfig::FromJson(*json, file.path());
}

}  // namespace gpeserve::model
