#include "engine/model/config.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace gpeserve::model {
namespace {

constexpr const char* kInt8QuantMethod = "gpeserve_int8";

absl::Status FieldError(const std::string& name, const std::string& field,
                        const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", field, ": ", message));
}

absl::Status Unsupported(const std::string& name, const std::string& field,
                         const std::string& message) {
  return absl::UnimplementedError(absl::StrCat(name, ": ", field, ": ", message));
}

// A positive integer field; `fallback` when absent (0 = required).
absl::StatusOr<int64_t> PositiveInt(const nlohmann::json& json, const std::string& name,
                                    const std::string& field, int64_t fallback = 0) {
  const auto it = json.find(field);
  if (it == json.end() || it->is_null()) {
    if (fallback > 0) return fallback;
    return FieldError(name, field, "missing (a positive integer is required)");
  }
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
    return FieldError(name, field, "expected a positive integer");
  }
  return it->get<int64_t>();
}

double NumberOr(const nlohmann::json& json, const std::string& field, double fallback) {
  const auto it = json.find(field);
  return it != json.end() && it->is_number() ? it->get<double>() : fallback;
}

bool BoolOr(const nlohmann::json& json, const std::string& field, bool fallback) {
  const auto it = json.find(field);
  return it != json.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// eos_token_id may be an integer or a list of integers.
std::vector<int64_t> TokenIds(const nlohmann::json& json, const std::string& field) {
  std::vector<int64_t> ids;
  const auto it = json.find(field);
  if (it == json.end()) return ids;
  if (it->is_number_integer()) ids.push_back(it->get<int64_t>());
  if (it->is_array()) {
    for (const auto& id : *it) {
      if (id.is_number_integer()) ids.push_back(id.get<int64_t>());
    }
  }
  return ids;
}

absl::Status ParseRopeScaling(const nlohmann::json& json, const std::string& name,
                              RopeScaling* out) {
  const auto it = json.find("rope_scaling");
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return FieldError(name, "rope_scaling", "expected an object or null");
  std::string type;
  if (auto t = it->find("rope_type"); t != it->end() && t->is_string())
    type = t->get<std::string>();
  if (auto t = it->find("type"); type.empty() && t != it->end() && t->is_string()) {
    type = t->get<std::string>();
  }
  if (type == "default" || type.empty()) return absl::OkStatus();
  out->factor = NumberOr(*it, "factor", 1.0);
  if (type == "linear") {
    out->type = RopeScaling::Type::kLinear;
    return absl::OkStatus();
  }
  if (type == "llama3") {
    out->type = RopeScaling::Type::kLlama3;
    out->low_freq_factor = NumberOr(*it, "low_freq_factor", 1.0);
    out->high_freq_factor = NumberOr(*it, "high_freq_factor", 4.0);
    out->original_max_position =
        static_cast<int64_t>(NumberOr(*it, "original_max_position_embeddings", 8192));
    if (out->high_freq_factor <= out->low_freq_factor) {
      return FieldError(name, "rope_scaling.high_freq_factor", "must exceed low_freq_factor");
    }
    return absl::OkStatus();
  }
  return Unsupported(name, "rope_scaling.rope_type",
                     absl::StrCat("'", type,
                                  "' is not implemented (supported: default, linear, "
                                  "llama3)"));
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromJson(const nlohmann::json& json,
                                                  const std::string& name) {
  if (!json.is_object()) return FieldError(name, "/", "expected a JSON object");
  ModelConfig c;
  const auto archs = json.find("architectures");
  if (archs == json.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return FieldError(name, "architectures", "expected a list naming the model class");
  }
  c.architecture_name = (*archs)[0].get<std::string>();
  if (c.architecture_name == "Qwen2ForCausalLM") {
    c.architecture = Architecture::kQwen2;
  } else if (c.architecture_name == "LlamaForCausalLM") {
    c.architecture = Architecture::kLlama;
  } else if (c.architecture_name == "MistralForCausalLM") {
    c.architecture = Architecture::kMistral;
  } else {
    return Unsupported(name, "architectures",
                       absl::StrCat("unknown architecture '", c.architecture_name,
                                    "' (supported: Qwen2ForCausalLM, LlamaForCausalLM, "
                                    "MistralForCausalLM)"));
  }
  for (const auto& [field, target] :
       {std::pair{"vocab_size", &c.vocab_size}, std::pair{"hidden_size", &c.hidden_size},
        std::pair{"intermediate_size", &c.intermediate_size},
        std::pair{"num_hidden_layers", &c.num_layers},
        std::pair{"num_attention_heads", &c.num_heads}}) {
    auto value = PositiveInt(json, name, field);
    if (!value.ok()) return value.status();
    *target = *value;
  }
  auto kv_heads = PositiveInt(json, name, "num_key_value_heads", c.num_heads);
  if (!kv_heads.ok()) return kv_heads.status();
  c.num_kv_heads = *kv_heads;
  if (c.num_heads % c.num_kv_heads != 0) {
    return FieldError(
        name, "num_key_value_heads",
        absl::StrCat(c.num_kv_heads, " does not divide num_attention_heads ", c.num_heads));
  }
  if (c.hidden_size % c.num_heads != 0 && !json.contains("head_dim")) {
    return FieldError(name, "num_attention_heads", "does not divide hidden_size");
  }
  auto head_dim = PositiveInt(json, name, "head_dim", c.hidden_size / c.num_heads);
  if (!head_dim.ok()) return head_dim.status();
  c.head_dim = *head_dim;
  if (c.head_dim % 2 != 0) return FieldError(name, "head_dim", "must be even for rotary");

  const std::string act = json.value("hidden_act", "silu");
  if (act != "silu") {
    return Unsupported(name, "hidden_act", absl::StrCat("'", act, "' (only silu is implemented)"));
  }
  c.rms_norm_eps = NumberOr(json, "rms_norm_eps", 1e-6);
  c.rope_theta = NumberOr(json, "rope_theta", 10000.0);
  if (absl::Status s = ParseRopeScaling(json, name, &c.rope_scaling); !s.ok()) return s;
  auto max_pos = PositiveInt(json, name, "max_position_embeddings", 32768);
  if (!max_pos.ok()) return max_pos.status();
  c.max_position_embeddings = *max_pos;
  c.tie_word_embeddings = BoolOr(json, "tie_word_embeddings", false);
  c.torch_dtype = json.value("torch_dtype", "");
  if (auto q = json.find("quantization_config"); q != json.end() && !q->is_null()) {
    const std::string method =
        q->is_object() && q->contains("quant_method") && (*q)["quant_method"].is_string()
            ? (*q)["quant_method"].get<std::string>()
            : "";
    if (method != kInt8QuantMethod) {
      return Unsupported(
          name, "quantization_config",
          absl::StrCat("quant_method '", method, "' is not implemented (gpeserve reads its own '",
                       kInt8QuantMethod, "' folders, written by gpe quantize)"));
    }
    c.int8_weights = true;
  }

  switch (c.architecture) {
    case Architecture::kQwen2:
      c.attention_bias = true;  // q, k, v
      c.o_proj_bias = false;
      if (BoolOr(json, "use_sliding_window", false)) {
        return Unsupported(name, "use_sliding_window",
                           "sliding-window attention is not implemented");
      }
      break;
    case Architecture::kLlama:
      c.attention_bias = c.o_proj_bias = BoolOr(json, "attention_bias", false);
      c.mlp_bias = BoolOr(json, "mlp_bias", false);
      break;
    case Architecture::kMistral:
      if (auto w = json.find("sliding_window"); w != json.end() && w->is_number_integer() &&
                                                w->get<int64_t>() < c.max_position_embeddings) {
        return Unsupported(
            name, "sliding_window",
            absl::StrCat("a window of ", w->get<int64_t>(), " < ", c.max_position_embeddings,
                         " positions changes attention; sliding-window attention "
                         "is not implemented"));
      }
      break;
  }
  c.eos_token_ids = TokenIds(json, "eos_token_id");
  if (auto bos = TokenIds(json, "bos_token_id"); !bos.empty()) c.bos_token_id = bos[0];
  return c;
}

nlohmann::json ModelConfig::ToJson() const {
  static constexpr const char* kModelTypes[] = {"qwen2", "llama", "mistral"};
  nlohmann::json j = {{"architectures", {architecture_name}},
                      {"model_type", kModelTypes[static_cast<int>(architecture)]},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_layers},
                      {"num_attention_heads", num_heads},
                      {"num_key_value_heads", num_kv_heads},
                      {"head_dim", head_dim},
                      {"hidden_act", "silu"},
                      {"rms_norm_eps", rms_norm_eps},
                      {"rope_theta", rope_theta},
                      {"max_position_embeddings", max_position_embeddings},
                      {"tie_word_embeddings", tie_word_embeddings},
                      {"torch_dtype", torch_dtype.empty() ? "float32" : torch_dtype},
                      {"use_cache", true},
                      {"attention_dropout", 0.0},
                      {"initializer_range", 0.02}};
  switch (rope_scaling.type) {
    case RopeScaling::Type::kNone:
      j["rope_scaling"] = nullptr;
      break;
    case RopeScaling::Type::kLinear:
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
      break;
    case RopeScaling::Type::kLlama3:
      j["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", rope_scaling.factor},
          {"low_freq_factor", rope_scaling.low_freq_factor},
          {"high_freq_factor", rope_scaling.high_freq_factor},
          {"original_max_position_embeddings", rope_scaling.original_max_position}};
      break;
  }
  if (architecture == Architecture::kQwen2) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = num_layers;
  } else {
    j["attention_bias"] = attention_bias;
    j["mlp_bias"] = mlp_bias;
    if (architecture == Architecture::kMistral) j["sliding_window"] = nullptr;
  }
  if (int8_weights) j["quantization_config"] = Int8QuantizationConfig();
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  if (eos_token_ids.size() > 1) j["eos_token_id"] = eos_token_ids;
  return j;
}

nlohmann::json Int8QuantizationConfig() {
  return {{"quant_method", kInt8QuantMethod},
          {"bits", 8},
          {"scheme", "symmetric, one float32 scale per output row"},
          {"scale_suffix", "_scale"}};
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  auto config = ModelConfig::FromJson(json, path);
  if (!config.ok()) return config.status();
  const std::string generation = dir + "/generation_config.json";
  if (std::ifstream gin(generation); gin) {
    try {
      const nlohmann::json g = nlohmann::json::parse(gin);
      if (auto eos = TokenIds(g, "eos_token_id"); !eos.empty()) config->eos_token_ids = eos;
      if (auto bos = TokenIds(g, "bos_token_id"); !bos.empty()) config->bos_token_id = bos[0];
    } catch (const nlohmann::json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(generation, ": not valid JSON: ", e.what()));
    }
  }
  return config;
}

}  // namespace gpeserve::model
