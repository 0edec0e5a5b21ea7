// A LoRA adapter's adapter_config.json as PEFT writes it, and which of a model's modules it
// adapts: PEFT's target matching (a list of module-name suffixes, a regex over full names, or
// "all-linear"; exclude_modules; layers_to_transform with layers_pattern), its per-module
// rank_pattern and alpha_pattern, and its scaling (lora_alpha / r, or lora_alpha / sqrt(r) with
// use_rslora). What PEFT can express and gpeserve does not compute (DoRA, trained biases,
// another PEFT method, ...) is refused with an error naming the file and the field. Plain C++.
//
// Thread-safety: plain value types.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/formats/config.h"
#include "nlohmann/json.hpp"

namespace gpeserve::model {

// A module of the model an adapter can change, named as in the Hugging Face checkpoint
// ("model.layers.3.self_attn.q_proj", "lm_head", "model.embed_tokens").
struct AdaptableModule {
  enum class Kind { kLinear, kEmbedding };
  std::string name;
  Kind kind = Kind::kLinear;
  int64_t layer = -1;  // decoder layer, -1 outside the layers
  int64_t in = 0;      // in_features (embedding: the vocabulary)
  int64_t out = 0;     // out_features (embedding: the hidden size)
};

// The linear and embedding modules of a model of `config`, in checkpoint order (fused
// projections under their fused names).
std::vector<AdaptableModule> AdaptableModules(const ModelConfig& config);

// The names of a layer's modules that are neither linear nor embeddings (norms, containers,
// activations): a target that matches one is an error, as in PEFT.
std::vector<std::string> OtherModuleNames(const ModelConfig& config);

struct AdapterConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  bool use_rslora = false;
  // target_modules: a list of names (a module is targeted when its name equals one or ends
  // with "." + one), or one regular expression its whole name must match.
  std::vector<std::string> target_list;
  std::optional<std::string> target_regex;
  std::vector<std::string> exclude_list;
  std::optional<std::string> exclude_regex;
  std::vector<int64_t> layers_to_transform;  // empty: every layer
  std::vector<std::string> layers_pattern;   // empty: any "<name>.<index>." component
  std::map<std::string, int64_t> rank_pattern;
  std::map<std::string, double> alpha_pattern;
  std::vector<std::string> modules_to_save;  // fully replaced modules, e.g. "lm_head"
  std::string base_model_name_or_path;       // informational
  // gpeserve's, not PEFT's: the instruction the adapter was trained with, from prompt.json beside
  // adapter_config.json ({"instruction": "..."}, written by gpe train). Sessions on the adapter
  // that give no instruction of their own use it; unset: the profile's.
  std::optional<std::string> instruction;

  // Parses adapter_config.json contents; `name` names it in errors (usually the path).
  static absl::StatusOr<AdapterConfig> FromJson(const nlohmann::json& json,
                                                const std::string& name);
  // The adapter_config.json PEFT loads for this configuration.
  nlohmann::json ToJson() const;

  // Whether PEFT would put a LoRA layer on `module` (a full module name).
  bool Targets(const std::string& module) const;
  // target_modules is "all-linear": every linear layer but the output layer.
  bool all_linear() const { return target_list.size() == 1 && target_list[0] == "all-linear"; }
  // The rank and alpha of `module` (rank_pattern / alpha_pattern, else r / lora_alpha).
  int64_t RankOf(const std::string& module) const;
  double AlphaOf(const std::string& module) const;
  // The factor of the module's low-rank product: alpha / rank, or alpha / sqrt(rank).
  double ScalingOf(const std::string& module, int64_t rank) const;
};

// The file beside adapter_config.json that holds AdapterConfig::instruction.
inline constexpr char kAdapterPromptFile[] = "prompt.json";
// {"instruction": ...} of `config` (an empty object when it has none).
nlohmann::json AdapterPromptJson(const AdapterConfig& config);

// Reads DIR/adapter_config.json, and DIR/prompt.json when present.
absl::StatusOr<AdapterConfig> LoadAdapterConfig(const std::string& dir);

// The modules `config` adapts on a model of `model` (the linear and embedding modules it
// targets), or an error naming `name` when it targets nothing, or a module that is neither.
absl::StatusOr<std::vector<AdaptableModule>> TargetedModules(const AdapterConfig& config,
                                                             const ModelConfig& model,
                                                             const std::string& name);

}  // namespace gpeserve::model
