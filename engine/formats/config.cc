#include "engine/formats/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

// A list of numbers (longrope's factors).
absl::StatusOr<std::vector<double>> NumberList(const nlohmann::json& json, const std::string& name,
                                               const std::string& field, size_t length) {
  const auto it = json.find(field);
  if (it == json.end() || !it->is_array() || it->size() != length) {
    return FieldError(name, absl::StrCat("rope_scaling.", field),
                      absl::StrCat("expected a list of ", length, " numbers (rotary_dim / 2)"));
  }
  std::vector<double> values;
  for (const auto& v : *it) {
    if (!v.is_number() || v.get<double>() <= 0) {
      return FieldError(name, absl::StrCat("rope_scaling.", field), "expected positive numbers");
    }
    values.push_back(v.get<double>());
  }
  return values;
}

// rope_scaling. Needs rotary_dim, max_position_embeddings and, for longrope (Phi-3 only), the
// top-level original_max_position_embeddings.
absl::Status ParseRopeScaling(const nlohmann::json& json, const std::string& name, ModelConfig* c) {
  RopeScaling* out = &c->rope_scaling;
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
  if (c->architecture == Architecture::kPhi3 && type != "longrope" && type != "su" &&
      type != "yarn") {
    return Unsupported(name, "rope_scaling.type",
                       absl::StrCat("'", type, "': Phi3ForCausalLM takes longrope only"));
  }
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
  // Phi-3's config names longrope "longrope", or "su" / "yarn" in older checkpoints, which
  // transformers reads as longrope.
  if (c->architecture == Architecture::kPhi3 &&
      (type == "longrope" || type == "su" || type == "yarn")) {
    out->type = RopeScaling::Type::kLongRope;
    const size_t half = static_cast<size_t>(c->rotary_dim / 2);
    auto short_factor = NumberList(*it, name, "short_factor", half);
    if (!short_factor.ok()) return short_factor.status();
    auto long_factor = NumberList(*it, name, "long_factor", half);
    if (!long_factor.ok()) return long_factor.status();
    out->short_factor = *std::move(short_factor);
    out->long_factor = *std::move(long_factor);
    auto original = PositiveInt(json, name, "original_max_position_embeddings", 4096);
    if (!original.ok()) return original.status();
    out->original_max_position = *original;
    out->attention_factor =
        LongRopeAttentionFactor(c->max_position_embeddings, out->original_max_position);
    return absl::OkStatus();
  }
  return Unsupported(name, "rope_scaling.rope_type",
                     absl::StrCat("'", type,
                                  "' is not implemented (supported: default, linear, llama3; "
                                  "longrope for Phi3ForCausalLM)"));
}

// A soft-capping field: null or absent (when `fallback` is 0) means none.
absl::StatusOr<double> SoftCap(const nlohmann::json& json, const std::string& name,
                               const std::string& field, double fallback) {
  const auto it = json.find(field);
  if (it == json.end()) return fallback;
  if (it->is_null()) return 0.0;
  if (!it->is_number() || it->get<double>() <= 0) {
    return FieldError(name, field, "expected a positive number or null");
  }
  return it->get<double>();
}

// A non-negative integer field; `fallback` when absent or null.
absl::StatusOr<int64_t> NonNegativeInt(const nlohmann::json& json, const std::string& name,
                                       const std::string& field, int64_t fallback) {
  const auto it = json.find(field);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return FieldError(name, field, "expected a non-negative integer");
  }
  return it->get<int64_t>();
}

// Gemma 3 without layer_types: every sliding_window_pattern-th layer is global (transformers'
// default pattern).
constexpr int64_t kGemma3WindowPattern = 6;

// The windowed layers by the architecture's own rule (no layer_types): Mistral and Phi-3 every
// layer, Gemma 2 the even ones, Gemma 3 all but every `gemma3_pattern`-th, Qwen the layers from
// max_window_layers on when use_sliding_window.
std::vector<bool> WindowedByRule(const ModelConfig& c,
                                 int64_t gemma3_pattern = kGemma3WindowPattern) {
  std::vector<bool> windowed(c.num_layers, false);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    switch (c.architecture) {
      case Architecture::kMistral:
      case Architecture::kPhi3:
        windowed[i] = true;
        break;
      case Architecture::kGemma2:
        windowed[i] = i % 2 == 0;
        break;
      case Architecture::kGemma3:
        windowed[i] = (i + 1) % gemma3_pattern != 0;
        break;
      case Architecture::kQwen2:
      case Architecture::kQwen3:
        windowed[i] = c.use_sliding_window && i >= c.max_window_layers;
        break;
      case Architecture::kLlama:
        break;
    }
  }
  return windowed;
}

// The sliding window and which layers use it, as transformers reads them: the architecture's
// rule, or config.json's layer_types where transformers reads it (Gemma 2 and 3, Qwen 2/3;
// Mistral and Phi-3 window every layer whatever it says).
absl::Status ParseSlidingWindow(const nlohmann::json& json, const std::string& name,
                                ModelConfig* c) {
  const Architecture arch = c->architecture;
  if (arch == Architecture::kLlama) return absl::OkStatus();  // Llama has no window
  const bool qwen = arch == Architecture::kQwen2 || arch == Architecture::kQwen3;
  if (qwen) {
    c->use_sliding_window = BoolOr(json, "use_sliding_window", false);
    auto max_window = NonNegativeInt(json, name, "max_window_layers", 28);
    if (!max_window.ok()) return max_window.status();
    c->max_window_layers = *max_window;
  }
  // The window: transformers' default when the field is absent (4096; Phi-3 none), none when
  // null; Qwen's is read only with use_sliding_window.
  const int64_t fallback = arch == Architecture::kPhi3 ? 0 : 4096;
  if (qwen && !c->use_sliding_window) {
    c->sliding_window = 0;
  } else if (auto w = json.find("sliding_window"); w == json.end()) {
    c->sliding_window = fallback;
  } else if (!w->is_null()) {
    auto window = PositiveInt(json, name, "sliding_window");
    if (!window.ok()) return window.status();
    c->sliding_window = *window;
  }
  const bool gemma = arch == Architecture::kGemma2 || arch == Architecture::kGemma3;
  auto pattern = arch == Architecture::kGemma3
                     ? PositiveInt(json, name, "sliding_window_pattern", kGemma3WindowPattern)
                     : kGemma3WindowPattern;
  if (!pattern.ok()) return pattern.status();
  c->windowed_layers = WindowedByRule(*c, *pattern);
  const auto types = json.find("layer_types");
  if (types == json.end() || types->is_null() || !(qwen || gemma)) {
    return absl::OkStatus();
  }
  if (!types->is_array() || static_cast<int64_t>(types->size()) != c->num_layers) {
    return FieldError(name, "layer_types", "expected one entry per layer");
  }
  for (int64_t i = 0; i < c->num_layers; ++i) {
    const nlohmann::json& t = (*types)[i];
    if (t != "sliding_attention" && t != "full_attention") {
      return FieldError(name, absl::StrCat("layer_types[", i, "]"),
                        "expected \"full_attention\" or \"sliding_attention\"");
    }
    c->windowed_layers[i] = t == "sliding_attention";
  }
  if (c->sliding_window == 0 && std::find(c->windowed_layers.begin(), c->windowed_layers.end(),
                                          true) != c->windowed_layers.end()) {
    return FieldError(name, "layer_types",
                      qwen ? "sliding layers need use_sliding_window and a sliding_window"
                           : "sliding layers need a sliding_window");
  }
  return absl::OkStatus();
}

constexpr const char* kGemma3Multimodal = "Gemma3ForConditionalGeneration";

// Gemma3ForConditionalGeneration's text model: config.json's text_config (its fields left out
// take Gemma3TextConfig's defaults, as in transformers) with the top-level token ids, dtype and
// head tying where text_config has none.
absl::StatusOr<ModelConfig> MultimodalTextModel(const nlohmann::json& json,
                                                const std::string& name) {
  nlohmann::json text = nlohmann::json::object();
  if (auto t = json.find("text_config"); t != json.end() && !t->is_null()) {
    if (!t->is_object()) return FieldError(name, "text_config", "expected an object");
    text = *t;
  }
  text["architectures"] = {"Gemma3ForCausalLM"};
  for (const char* field : {"eos_token_id", "bos_token_id", "torch_dtype", "tie_word_embeddings"}) {
    if (!text.contains(field) && json.contains(field)) text[field] = json[field];
  }
  auto config = ModelConfig::FromJson(text, absl::StrCat(name, ": text_config"));
  if (!config.ok()) return config.status();
  config->architecture_name = kGemma3Multimodal;
  config->multimodal = true;
  return config;
}

constexpr std::pair<const char*, Architecture> kArchitectures[] = {
    {"Qwen2ForCausalLM", Architecture::kQwen2},     {"LlamaForCausalLM", Architecture::kLlama},
    {"MistralForCausalLM", Architecture::kMistral}, {"Gemma2ForCausalLM", Architecture::kGemma2},
    {"Qwen3ForCausalLM", Architecture::kQwen3},     {"Phi3ForCausalLM", Architecture::kPhi3},
    {"Gemma3ForCausalLM", Architecture::kGemma3},
};

}  // namespace

double LongRopeAttentionFactor(int64_t max_positions, int64_t original) {
  const double ratio = static_cast<double>(max_positions) / static_cast<double>(original);
  if (ratio <= 1.0) return 1.0;
  return std::sqrt(1 + std::log(ratio) / std::log(static_cast<double>(original)));
}

const char* ModelConfig::model_type() const {
  switch (architecture) {
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kLlama:
      return "llama";
    case Architecture::kMistral:
      return "mistral";
    case Architecture::kGemma2:
      return "gemma2";
    case Architecture::kQwen3:
      return "qwen3";
    case Architecture::kPhi3:
      return "phi3";
    case Architecture::kGemma3:
      return "gemma3_text";
  }
  return "";
}

double ModelConfig::attention_scale() const {
  return 1.0 / std::sqrt(query_pre_attn_scalar > 0 ? query_pre_attn_scalar
                                                   : static_cast<double>(head_dim));
}

absl::StatusOr<ModelConfig> ModelConfig::FromJson(const nlohmann::json& json,
                                                  const std::string& name) {
  if (!json.is_object()) return FieldError(name, "/", "expected a JSON object");
  ModelConfig c;
  const auto archs = json.find("architectures");
  if (archs == json.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return FieldError(name, "architectures", "expected a list naming the model class");
  }
  c.architecture_name = (*archs)[0].get<std::string>();
  if (c.architecture_name == kGemma3Multimodal) return MultimodalTextModel(json, name);
  bool known = false;
  std::vector<std::string> names;
  for (const auto& [arch_name, arch] : kArchitectures) {
    names.push_back(arch_name);
    if (c.architecture_name == arch_name) {
      c.architecture = arch;
      known = true;
    }
  }
  names.push_back(kGemma3Multimodal);
  if (!known) {
    return Unsupported(name, "architectures",
                       absl::StrCat("unknown architecture '", c.architecture_name,
                                    "' (supported: ", absl::StrJoin(names, ", "), ")"));
  }
  const Architecture arch = c.architecture;
  const bool gemma3 = arch == Architecture::kGemma3;
  const bool gemma = arch == Architecture::kGemma2 || gemma3;
  // Required, except for Gemma 3, whose config class has a default for each (Gemma 3 4B's
  // shape; checkpoints rely on some of them).
  for (const auto& [field, target, gemma3_default] :
       {std::tuple{"vocab_size", &c.vocab_size, 262208},
        std::tuple{"hidden_size", &c.hidden_size, 2304},
        std::tuple{"intermediate_size", &c.intermediate_size, 9216},
        std::tuple{"num_hidden_layers", &c.num_layers, 26},
        std::tuple{"num_attention_heads", &c.num_heads, 8}}) {
    auto value = PositiveInt(json, name, field, gemma3 ? gemma3_default : 0);
    if (!value.ok()) return value.status();
    *target = *value;
  }
  auto kv_heads = PositiveInt(json, name, "num_key_value_heads", gemma3 ? 4 : c.num_heads);
  if (!kv_heads.ok()) return kv_heads.status();
  c.num_kv_heads = *kv_heads;
  if (c.num_heads % c.num_kv_heads != 0) {
    return FieldError(
        name, "num_key_value_heads",
        absl::StrCat(c.num_kv_heads, " does not divide num_attention_heads ", c.num_heads));
  }
  // transformers' defaults when head_dim is absent: Gemma 2 and 3 256, Qwen 3 128, else
  // hidden_size / num_attention_heads.
  int64_t default_head_dim = gemma                          ? 256
                             : arch == Architecture::kQwen3 ? 128
                                                            : c.hidden_size / c.num_heads;
  if (default_head_dim == 0 || (!gemma && arch != Architecture::kQwen3 &&
                                c.hidden_size % c.num_heads != 0 && !json.contains("head_dim"))) {
    return FieldError(name, "num_attention_heads", "does not divide hidden_size");
  }
  auto head_dim = PositiveInt(json, name, "head_dim", default_head_dim);
  if (!head_dim.ok()) return head_dim.status();
  c.head_dim = *head_dim;
  if (c.head_dim % 2 != 0) return FieldError(name, "head_dim", "must be even for rotary");
  if (arch == Architecture::kPhi3 && c.head_dim * c.num_heads != c.hidden_size) {
    return FieldError(name, "head_dim", "Phi-3 takes head_dim = hidden_size / num_attention_heads");
  }
  c.rotary_dim = c.head_dim;
  if (auto f = json.find("partial_rotary_factor"); f != json.end() && !f->is_null()) {
    if (!f->is_number() || f->get<double>() <= 0 || f->get<double>() > 1) {
      return FieldError(name, "partial_rotary_factor", "expected a number in (0, 1]");
    }
    if (f->get<double>() != 1.0 && arch != Architecture::kPhi3) {
      return Unsupported(name, "partial_rotary_factor",
                         absl::StrCat("a partial rotary embedding is implemented for "
                                      "Phi3ForCausalLM only, not ",
                                      c.architecture_name));
    }
    c.partial_rotary_factor = f->get<double>();
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
    if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0) {
      return FieldError(name, "partial_rotary_factor",
                        absl::StrCat("head_dim * factor = ", c.rotary_dim,
                                     " rotary channels: must be positive and even"));
    }
  }

  // Gemma names its activation hidden_activation (its hidden_act is ignored by transformers).
  const char* act_field = gemma ? "hidden_activation" : "hidden_act";
  if (json.contains(act_field) && !json[act_field].is_string()) {
    return FieldError(name, act_field, "expected the activation's name");
  }
  const std::string act = json.contains(act_field) ? json[act_field].get<std::string>()
                          : gemma                  ? "gelu_pytorch_tanh"
                                                   : "silu";
  if (act == "silu" || act == "swish") {
    c.activation = Activation::kSilu;
  } else if (act == "gelu_pytorch_tanh") {
    c.activation = Activation::kGeluTanh;
  } else {
    return Unsupported(name, act_field,
                       absl::StrCat("'", act, "' (implemented: silu, gelu_pytorch_tanh)"));
  }
  // transformers' defaults where the field is absent.
  c.rms_norm_eps = NumberOr(json, "rms_norm_eps", arch == Architecture::kPhi3 ? 1e-5 : 1e-6);
  c.rope_theta = NumberOr(json, "rope_theta", gemma3 ? 1e6 : 10000.0);
  const int64_t default_max_positions = arch == Architecture::kLlama     ? 2048
                                        : arch == Architecture::kGemma2  ? 8192
                                        : gemma3                         ? 131072
                                        : arch == Architecture::kPhi3    ? 4096
                                        : arch == Architecture::kMistral ? 131072
                                                                         : 32768;
  auto max_pos = PositiveInt(json, name, "max_position_embeddings", default_max_positions);
  if (!max_pos.ok()) return max_pos.status();
  c.max_position_embeddings = *max_pos;
  if (absl::Status s = ParseRopeScaling(json, name, &c); !s.ok()) return s;
  // transformers' default: tied for Gemma, untied for the others.
  c.tie_word_embeddings = BoolOr(json, "tie_word_embeddings", gemma);
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
  if (absl::Status s = ParseSlidingWindow(json, name, &c); !s.ok()) return s;

  switch (arch) {
    case Architecture::kQwen2:
      c.attention_bias = true;  // q, k, v
      c.o_proj_bias = false;
      break;
    case Architecture::kLlama:
      c.attention_bias = c.o_proj_bias = BoolOr(json, "attention_bias", false);
      c.mlp_bias = BoolOr(json, "mlp_bias", false);
      break;
    case Architecture::kMistral:  // no biases (transformers ignores attention_bias here)
      break;
    case Architecture::kQwen3:
      c.attention_bias = c.o_proj_bias = BoolOr(json, "attention_bias", false);
      c.qk_norm = true;
      break;
    case Architecture::kGemma2:
    case Architecture::kGemma3: {
      c.attention_bias = c.o_proj_bias = BoolOr(json, "attention_bias", false);
      c.query_pre_attn_scalar = NumberOr(json, "query_pre_attn_scalar", 256);
      if (c.query_pre_attn_scalar <= 0) {
        return FieldError(name, "query_pre_attn_scalar", "expected a positive number");
      }
      // Gemma 2 caps by default; Gemma 3 caps its final logits only where its config says, and
      // never its attention scores (transformers' Gemma 3 keeps attn_logit_softcapping but does
      // not apply it).
      auto attn_cap = SoftCap(json, name, "attn_logit_softcapping", gemma3 ? 0.0 : 50.0);
      if (!attn_cap.ok()) return attn_cap.status();
      auto final_cap = SoftCap(json, name, "final_logit_softcapping", gemma3 ? 0.0 : 30.0);
      if (!final_cap.ok()) return final_cap.status();
      c.attn_logit_softcapping = gemma3 ? 0.0 : *attn_cap;
      c.final_logit_softcapping = *final_cap;
      c.scale_embeddings = c.norm_weight_plus_one = c.sandwich_norms = true;
      if (!gemma3) break;
      c.qk_norm = true;
      c.rope_local_theta = NumberOr(json, "rope_local_base_freq", 10000.0);
      if (c.rope_local_theta <= 0) {
        return FieldError(name, "rope_local_base_freq", "expected a positive number");
      }
      if (BoolOr(json, "use_bidirectional_attention", false)) {
        return Unsupported(name, "use_bidirectional_attention",
                           "bidirectional attention (EmbeddingGemma) is not a causal LM");
      }
      break;
    }
    case Architecture::kPhi3:
      c.fused_projections = true;
      break;
  }
  c.eos_token_ids = TokenIds(json, "eos_token_id");
  if (auto bos = TokenIds(json, "bos_token_id"); !bos.empty()) c.bos_token_id = bos[0];
  return c;
}

nlohmann::json ModelConfig::ToJson() const {
  const bool gemma = architecture == Architecture::kGemma2 || architecture == Architecture::kGemma3;
  // A multimodal checkpoint's text model is written as the model it is.
  nlohmann::json j = {{"architectures", {multimodal ? "Gemma3ForCausalLM" : architecture_name}},
                      {"model_type", model_type()},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_layers},
                      {"num_attention_heads", num_heads},
                      {"num_key_value_heads", num_kv_heads},
                      {"head_dim", head_dim},
                      {gemma ? "hidden_activation" : "hidden_act",
                       activation == Activation::kSilu ? "silu" : "gelu_pytorch_tanh"},
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
    case RopeScaling::Type::kLongRope:  // Phi-3's validation wants exactly these three fields
      j["rope_scaling"] = {{"type", "longrope"},
                           {"short_factor", rope_scaling.short_factor},
                           {"long_factor", rope_scaling.long_factor}};
      break;
  }
  const nlohmann::json window = sliding_window > 0 ? nlohmann::json(sliding_window) : nullptr;
  switch (architecture) {
    case Architecture::kQwen2:
    case Architecture::kQwen3:
      j["use_sliding_window"] = use_sliding_window;
      j["sliding_window"] = use_sliding_window ? window : nullptr;
      j["max_window_layers"] = use_sliding_window ? max_window_layers : num_layers;
      if (architecture == Architecture::kQwen3) j["attention_bias"] = attention_bias;
      break;
    case Architecture::kLlama:
      j["attention_bias"] = attention_bias;
      j["mlp_bias"] = mlp_bias;
      break;
    case Architecture::kMistral:
      j["sliding_window"] = window;
      break;
    case Architecture::kGemma2:
    case Architecture::kGemma3:
      j["attention_bias"] = attention_bias;
      j["query_pre_attn_scalar"] = query_pre_attn_scalar;
      j["attn_logit_softcapping"] =
          attn_logit_softcapping > 0 ? nlohmann::json(attn_logit_softcapping) : nullptr;
      j["final_logit_softcapping"] =
          final_logit_softcapping > 0 ? nlohmann::json(final_logit_softcapping) : nullptr;
      j["sliding_window"] = window;
      j["cache_implementation"] = "hybrid";
      if (architecture == Architecture::kGemma3) j["rope_local_base_freq"] = rope_local_theta;
      break;
    case Architecture::kPhi3:
      j["partial_rotary_factor"] = partial_rotary_factor;
      j["original_max_position_embeddings"] = rope_scaling.type == RopeScaling::Type::kLongRope
                                                  ? rope_scaling.original_max_position
                                                  : max_position_embeddings;
      j["sliding_window"] = window;
      j["attention_bias"] = false;
      // transformers' default (32000, Phi-3's own vocabulary) would not fit other vocabularies.
      j["pad_token_id"] = nullptr;
      break;
  }
  if (sliding_window > 0 && windowed_layers != WindowedByRule(*this)) {
    nlohmann::json types = nlohmann::json::array();
    for (bool windowed : windowed_layers) {
      types.push_back(windowed ? "sliding_attention" : "full_attention");
    }
    j["layer_types"] = types;
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
