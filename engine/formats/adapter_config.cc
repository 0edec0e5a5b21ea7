#include "engine/formats/adapter_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tokenizer/regex.h"

namespace gpeserve::model {
namespace {

using nlohmann::json;

absl::Status FieldError(const std::string& name, const std::string& field,
                        const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": \"", field, "\" ", what));
}

// A null, a string or a list of strings; `regex` receives a lone string when given.
absl::Status ReadNames(const json& j, const std::string& name, const std::string& field,
                       std::vector<std::string>* list, std::optional<std::string>* regex) {
  if (!j.contains(field) || j[field].is_null()) return absl::OkStatus();
  const json& v = j[field];
  if (v.is_string() && regex != nullptr) {
    *regex = v.get<std::string>();
    return absl::OkStatus();
  }
  if (!v.is_array()) {
    return FieldError(name, field,
                      regex != nullptr ? "must be a string, a list of strings or null"
                                       : "must be a list of strings or null");
  }
  for (const json& e : v) {
    if (!e.is_string()) return FieldError(name, field, "must hold strings only");
    list->push_back(e.get<std::string>());
  }
  return absl::OkStatus();
}

// Whether `pattern` (a Python regular expression) matches the whole of `text`. PCRE2 reads the
// patterns module names use as Python does.
absl::StatusOr<bool> FullMatch(const std::string& pattern, const std::string& text) {
  auto regex = tokenizer::Regex::CompileFull(pattern);
  if (!regex.ok()) return regex.status();
  return (*regex)->Matches(text);
}

// PEFT's name matching for a list: the name itself or a "." + entry suffix.
bool ListMatches(const std::vector<std::string>& list, const std::string& module) {
  for (const std::string& entry : list) {
    if (module == entry || (module.size() > entry.size() && module.ends_with(entry) &&
                            module[module.size() - entry.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

// The decoder layer in a module name "model.layers.<i>...." when its "layers" component matches
// one of `patterns` (any, when empty); -1 otherwise.
int64_t LayerIndex(const std::string& module, const std::vector<std::string>& patterns) {
  const std::string prefix = "model.layers.";
  if (!module.starts_with(prefix)) return -1;
  const size_t end = module.find('.', prefix.size());
  if (end == std::string::npos) return -1;
  bool matched = patterns.empty();
  for (const std::string& pattern : patterns) {
    auto full = FullMatch(pattern, "layers");
    matched |= full.ok() && *full;
  }
  if (!matched) return -1;
  return std::stoll(module.substr(prefix.size(), end - prefix.size()));
}

// The first key of `pattern` (rank_pattern, alpha_pattern) matching `module` as PEFT does:
// re.match(r"(.*\.)?(key)$", module).
template <typename T>
const T* PatternValue(const std::map<std::string, T>& pattern, const std::string& module) {
  for (const auto& [key, value] : pattern) {
    auto full = FullMatch(absl::StrCat("(.*\\.)?(", key, ")"), module);
    if (full.ok() && *full) return &value;
  }
  return nullptr;
}

}  // namespace

std::vector<AdaptableModule> AdaptableModules(const ModelConfig& c) {
  using Kind = AdaptableModule::Kind;
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim,
                ff = c.intermediate_size;
  std::vector<AdaptableModule> modules;
  modules.push_back({"model.embed_tokens", Kind::kEmbedding, -1, c.vocab_size, h});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    if (c.fused_projections) {
      modules.push_back({p + "self_attn.o_proj", Kind::kLinear, i, q, h});
      modules.push_back({p + "self_attn.qkv_proj", Kind::kLinear, i, h, q + 2 * kv});
      modules.push_back({p + "mlp.gate_up_proj", Kind::kLinear, i, h, 2 * ff});
      modules.push_back({p + "mlp.down_proj", Kind::kLinear, i, ff, h});
    } else {
      modules.push_back({p + "self_attn.q_proj", Kind::kLinear, i, h, q});
      modules.push_back({p + "self_attn.k_proj", Kind::kLinear, i, h, kv});
      modules.push_back({p + "self_attn.v_proj", Kind::kLinear, i, h, kv});
      modules.push_back({p + "self_attn.o_proj", Kind::kLinear, i, q, h});
      modules.push_back({p + "mlp.gate_proj", Kind::kLinear, i, h, ff});
      modules.push_back({p + "mlp.up_proj", Kind::kLinear, i, h, ff});
      modules.push_back({p + "mlp.down_proj", Kind::kLinear, i, ff, h});
    }
  }
  modules.push_back({"lm_head", Kind::kLinear, -1, h, c.vocab_size});
  return modules;
}

std::vector<std::string> OtherModuleNames(const ModelConfig& c) {
  std::vector<std::string> names = {"model", "model.layers", "model.norm", "model.rotary_emb"};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i);
    for (const char* suffix : {"", ".self_attn", ".mlp", ".mlp.act_fn", ".input_layernorm",
                               ".post_attention_layernorm"}) {
      names.push_back(p + suffix);
    }
    if (c.sandwich_norms) {
      names.push_back(p + ".pre_feedforward_layernorm");
      names.push_back(p + ".post_feedforward_layernorm");
    }
    if (c.qk_norm) {
      names.push_back(p + ".self_attn.q_norm");
      names.push_back(p + ".self_attn.k_norm");
    }
  }
  return names;
}

absl::StatusOr<AdapterConfig> AdapterConfig::FromJson(const json& j, const std::string& name) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(name, ": not a JSON object"));
  AdapterConfig c;
  auto string_field = [&](const char* field) -> std::optional<std::string> {
    if (j.contains(field) && j[field].is_string()) return j[field].get<std::string>();
    return std::nullopt;
  };
  if (auto type = string_field("peft_type"); type && *type != "LORA") {
    return FieldError(name, "peft_type",
                      absl::StrCat("is \"", *type, "\": gpeserve serves LoRA adapters only"));
  }
  if (auto task = string_field("task_type"); task && *task != "CAUSAL_LM") {
    return FieldError(name, "task_type",
                      absl::StrCat("is \"", *task, "\": gpeserve serves CAUSAL_LM adapters only"));
  }
  // Fields whose non-default values change the computation in ways gpeserve does not.
  auto refuse_if = [&](const char* field, bool set, const char* what) -> absl::Status {
    if (set) return FieldError(name, field, absl::StrCat("is set: ", what, " is not implemented"));
    return absl::OkStatus();
  };
  auto truthy = [&](const char* field) {
    if (!j.contains(field) || j[field].is_null()) return false;
    const json& v = j[field];
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_array() || v.is_object() || v.is_string()) return !v.empty();
    return true;
  };
  for (auto [field, what] : std::initializer_list<std::pair<const char*, const char*>>{
           {"use_dora", "DoRA (weight-decomposed LoRA)"},
           {"lora_bias", "a trained LoRA bias"},
           {"layer_replication", "layer replication"},
           {"target_parameters", "LoRA on parameters (target_parameters)"},
           {"trainable_token_indices", "trainable token indices"},
           {"alora_invocation_tokens", "activated LoRA"},
           {"use_qalora", "QA-LoRA"}}) {
    if (absl::Status s = refuse_if(field, truthy(field), what); !s.ok()) return s;
  }
  if (auto bias = string_field("bias"); bias && *bias != "none") {
    return FieldError(
        name, "bias",
        absl::StrCat("is \"", *bias, "\": trained biases are not implemented ", "(only \"none\")"));
  }
  if (j.contains("r")) {
    if (!j["r"].is_number_integer() || j["r"].get<int64_t>() < 1) {
      return FieldError(name, "r", "must be a whole number >= 1");
    }
    c.r = j["r"].get<int64_t>();
  }
  if (j.contains("lora_alpha")) {
    if (!j["lora_alpha"].is_number()) return FieldError(name, "lora_alpha", "must be a number");
    c.lora_alpha = j["lora_alpha"].get<double>();
  }
  if (j.contains("use_rslora") && !j["use_rslora"].is_null()) {
    if (!j["use_rslora"].is_boolean())
      return FieldError(name, "use_rslora", "must be true or false");
    c.use_rslora = j["use_rslora"].get<bool>();
  }
  if (j.contains("fan_in_fan_out") && !j["fan_in_fan_out"].is_null() &&
      !j["fan_in_fan_out"].is_boolean()) {
    return FieldError(name, "fan_in_fan_out", "must be true or false");
  }
  // fan_in_fan_out itself changes nothing here: PEFT turns it off for torch.nn.Linear (every
  // module these architectures adapt), and the saved tensors are [r, in] and [out, r] either way.
  if (absl::Status s = ReadNames(j, name, "target_modules", &c.target_list, &c.target_regex);
      !s.ok()) {
    return s;
  }
  // "all-linear" (any case) is PEFT's shorthand for every linear layer but the output layer.
  if (c.target_regex && absl::AsciiStrToLower(*c.target_regex) == "all-linear") {
    c.target_regex.reset();
    c.target_list = {"all-linear"};
  }
  if (c.target_list.empty() && !c.target_regex) {
    return FieldError(name, "target_modules", "is missing or empty: the adapter adapts nothing");
  }
  if (absl::Status s = ReadNames(j, name, "exclude_modules", &c.exclude_list, &c.exclude_regex);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadNames(j, name, "modules_to_save", &c.modules_to_save, nullptr);
      !s.ok()) {
    return s;
  }
  std::optional<std::string> layers_pattern;
  if (absl::Status s = ReadNames(j, name, "layers_pattern", &c.layers_pattern, &layers_pattern);
      !s.ok()) {
    return s;
  }
  if (layers_pattern) c.layers_pattern.push_back(*layers_pattern);
  if (j.contains("layers_to_transform") && !j["layers_to_transform"].is_null()) {
    const json& v = j["layers_to_transform"];
    if (v.is_number_integer()) {
      c.layers_to_transform.push_back(v.get<int64_t>());
    } else if (v.is_array()) {
      for (const json& e : v) {
        if (!e.is_number_integer()) {
          return FieldError(name, "layers_to_transform", "must hold whole numbers only");
        }
        c.layers_to_transform.push_back(e.get<int64_t>());
      }
    } else {
      return FieldError(name, "layers_to_transform", "must be a whole number, a list or null");
    }
  }
  for (const char* field : {"rank_pattern", "alpha_pattern"}) {
    if (!j.contains(field) || j[field].is_null()) continue;
    if (!j[field].is_object()) return FieldError(name, field, "must be an object");
    for (const auto& [key, value] : j[field].items()) {
      const bool rank = std::string(field) == "rank_pattern";
      if (rank ? !value.is_number_integer() || value.get<int64_t>() < 1 : !value.is_number()) {
        return FieldError(
            name, field,
            absl::StrCat("['", key, "'] must be ", rank ? "a whole number >= 1" : "a number"));
      }
      if (auto compiled = tokenizer::Regex::CompileFull(key); !compiled.ok()) {
        return FieldError(name, field,
                          absl::StrCat("['", key, "']: ", compiled.status().message()));
      }
      if (rank) {
        c.rank_pattern[key] = value.get<int64_t>();
      } else {
        c.alpha_pattern[key] = value.get<double>();
      }
    }
  }
  for (const std::optional<std::string>* regex : {&c.target_regex, &c.exclude_regex}) {
    if (!*regex) continue;
    if (auto compiled = tokenizer::Regex::CompileFull(**regex); !compiled.ok()) {
      return FieldError(name, regex == &c.target_regex ? "target_modules" : "exclude_modules",
                        std::string(compiled.status().message()));
    }
  }
  if (auto base = string_field("base_model_name_or_path")) c.base_model_name_or_path = *base;
  return c;
}

json AdapterConfig::ToJson() const {
  json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["r"] = r;
  j["lora_alpha"] = lora_alpha;
  j["use_rslora"] = use_rslora;
  j["target_modules"] = target_regex   ? json(*target_regex)
                        : all_linear() ? json("all-linear")
                                       : json(target_list);
  j["exclude_modules"] = exclude_regex          ? json(*exclude_regex)
                         : exclude_list.empty() ? json(nullptr)
                                                : json(exclude_list);
  j["layers_to_transform"] =
      layers_to_transform.empty() ? json(nullptr) : json(layers_to_transform);
  j["layers_pattern"] = layers_pattern.empty() ? json(nullptr) : json(layers_pattern);
  j["rank_pattern"] = json(rank_pattern);
  j["alpha_pattern"] = json(alpha_pattern);
  j["modules_to_save"] = modules_to_save.empty() ? json(nullptr) : json(modules_to_save);
  j["fan_in_fan_out"] = false;
  j["bias"] = "none";
  j["use_dora"] = false;
  j["lora_dropout"] = 0.0;
  j["init_lora_weights"] = true;
  j["inference_mode"] = true;
  j["base_model_name_or_path"] = base_model_name_or_path;
  j["revision"] = nullptr;
  return j;
}

bool AdapterConfig::Targets(const std::string& module) const {
  if (exclude_regex) {
    auto full = FullMatch(*exclude_regex, module);
    if (full.ok() && *full) return false;
  } else if (ListMatches(exclude_list, module)) {
    return false;
  }
  if (target_regex) {
    auto full = FullMatch(*target_regex, module);
    return full.ok() && *full;
  }
  if (all_linear()) {
    // PEFT expands it to the last name of every linear layer but the output layer.
    const std::string leaf = module.substr(module.rfind('.') + 1);
    static const std::set<std::string> kLinear = {"q_proj",  "k_proj",    "v_proj",
                                                  "o_proj",  "qkv_proj",  "gate_proj",
                                                  "up_proj", "down_proj", "gate_up_proj"};
    if (!kLinear.contains(leaf)) return false;
  } else {
    // An exact name is targeted whatever its layer (PEFT checks layers only for suffixes).
    if (std::find(target_list.begin(), target_list.end(), module) != target_list.end()) return true;
    if (!ListMatches(target_list, module)) return false;
  }
  if (layers_to_transform.empty()) return true;
  const int64_t layer = LayerIndex(module, layers_pattern);
  return layer >= 0 && std::find(layers_to_transform.begin(), layers_to_transform.end(), layer) !=
                           layers_to_transform.end();
}

int64_t AdapterConfig::RankOf(const std::string& module) const {
  const int64_t* rank = PatternValue(rank_pattern, module);
  return rank != nullptr ? *rank : r;
}

double AdapterConfig::AlphaOf(const std::string& module) const {
  const double* alpha = PatternValue(alpha_pattern, module);
  return alpha != nullptr ? *alpha : lora_alpha;
}

double AdapterConfig::ScalingOf(const std::string& module, int64_t rank) const {
  const double alpha = AlphaOf(module);
  return use_rslora ? alpha / std::sqrt(static_cast<double>(rank))
                    : alpha / static_cast<double>(rank);
}

absl::StatusOr<AdapterConfig> LoadAdapterConfig(const std::string& dir) {
  const std::string path = dir + "/adapter_config.json";
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no adapter_config.json (not a PEFT adapter folder)"));
  }
  std::ifstream in(path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  auto config = AdapterConfig::FromJson(j, path);
  if (!config.ok()) return config;
  const std::string prompt_path = absl::StrCat(dir, "/", kAdapterPromptFile);
  if (!std::filesystem::exists(prompt_path)) return config;
  std::ifstream prompt_in(prompt_path);
  const json prompt = json::parse(prompt_in, nullptr, /*allow_exceptions=*/false);
  if (!prompt.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prompt_path, ": not a JSON object (expected {\"instruction\": \"...\"})"));
  }
  for (const auto& [key, value] : prompt.items()) {
    if (key != "instruction") {
      return absl::InvalidArgumentError(
          absl::StrCat(prompt_path, ": unknown field '", key, "' (it may hold \"instruction\")"));
    }
    if (!value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(prompt_path, ": instruction is not a string"));
    }
    config->instruction = value.get<std::string>();
  }
  return config;
}

json AdapterPromptJson(const AdapterConfig& config) {
  json prompt = json::object();
  if (config.instruction) prompt["instruction"] = *config.instruction;
  return prompt;
}

absl::StatusOr<std::vector<AdaptableModule>> TargetedModules(const AdapterConfig& config,
                                                             const ModelConfig& model,
                                                             const std::string& name) {
  const std::string field = config.target_regex ? "target_modules (a regex)" : "target_modules";
  for (const std::string& other : OtherModuleNames(model)) {
    if (config.Targets(other)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", field, " matches '", other,
                       "', which is neither a linear nor an embedding layer"));
    }
  }
  std::vector<AdaptableModule> targeted;
  for (const AdaptableModule& module : AdaptableModules(model)) {
    if (!config.Targets(module.name)) continue;
    if (std::find(config.modules_to_save.begin(), config.modules_to_save.end(),
                  module.name.substr(module.name.rfind('.') + 1)) != config.modules_to_save.end()) {
      continue;  // PEFT saves a module whole rather than adapting it
    }
    targeted.push_back(module);
  }
  if (targeted.empty() && config.modules_to_save.empty()) {
    std::vector<std::string> shown = config.target_list;
    if (config.target_regex) shown = {*config.target_regex};
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": ", field, " [", absl::StrJoin(shown, ", "), "] matches no module of this ",
        model.architecture_name, " model (its projections are named ",
        model.fused_projections ? "qkv_proj, o_proj, gate_up_proj, down_proj"
                                : "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj",
        ", plus embed_tokens and lm_head)"));
  }
  return targeted;
}

}  // namespace gpeserve::model
