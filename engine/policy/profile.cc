#include "engine/policy/profile.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "engine/policy/builtin_profiles.h"

namespace gpeserve::policy {

std::string Profile::Prefix() const {
  return absl::StrReplaceAll(instruct, {{"{instruction}", instruction}}) + user;
}

Profile Profile::WithInstruction(std::string text) const {
  Profile p = *this;
  p.instruction = std::move(text);
  return p;
}

absl::StatusOr<Profile> Profile::FromJson(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": expected a JSON object"));
  }
  Profile p;
  const std::pair<const char*, std::string*> strings[] = {{"name", &p.name},
                                                          {"description", &p.description},
                                                          {"instruction", &p.instruction},
                                                          {"instruct", &p.instruct},
                                                          {"user", &p.user},
                                                          {"assistant", &p.assistant},
                                                          {"end", &p.end}};
  for (const auto& [key, target] : strings) {
    const auto it = json.find(key);
    if (it == json.end()) continue;
    if (!it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": ", key, ": expected a string"));
    }
    *target = it->get<std::string>();
  }
  for (const char* required : {"assistant", "end"}) {
    if (!json.contains(required)) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": ", required, ": missing"));
    }
  }
  if (auto it = json.find("add_space"); it != json.end()) {
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": add_space: expected true/false"));
    }
    p.add_space = it->get<bool>();
  }
  if (auto it = json.find("phi"); it != json.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": phi: expected a non-negative integer"));
    }
    p.phi = it->get<int64_t>();
  }
  return p;
}

absl::StatusOr<std::string> ProfileForChatTemplate(const std::string& chat_template) {
  const auto has = [&chat_template](std::string_view marker) {
    return chat_template.find(marker) != std::string::npos;
  };
  if (has("<|im_start|>")) return has("<think>") ? "qwen3" : "qwen2.5";
  if (has("<|start_header_id|>")) return "llama3";
  if (has("<start_of_turn>")) return "gemma2";
  if (has("<|user|>") && has("<|assistant|>") && has("<|end|>")) return "phi3";
  return absl::InvalidArgumentError(absl::StrCat(
      "--profile auto: the model's chat template is none of the formats with a built-in profile "
      "(ChatML <|im_start|>, Llama 3 <|start_header_id|>, Gemma <start_of_turn>, Phi-3 <|user|>); "
      "write the format's strings to a JSON file and pass --profile FILE (docs/streaming.md), or "
      "name a built-in profile (",
      absl::StrJoin(BuiltinProfileNames(), ", "), ")"));
}

absl::StatusOr<std::string> ResolveProfileName(const std::string& name,
                                               const std::string& model_type,
                                               const std::string& chat_template) {
  if (name != kAutoProfile) return name;
  if (!chat_template.empty()) return ProfileForChatTemplate(chat_template);
  // Gemma 3's turns are Gemma 2's (no system turn: the instruction opens the user turn).
  static constexpr std::pair<const char*, const char*> kByModelType[] = {
      {"qwen2", "qwen2.5"}, {"qwen3", "qwen3"},        {"llama", "llama3"},
      {"gemma2", "gemma2"}, {"gemma3_text", "gemma2"}, {"phi3", "phi3"}};
  for (const auto& [type, profile] : kByModelType) {
    if (model_type == type) return std::string(profile);
  }
  return std::string("qwen2.5");
}

std::vector<std::string> BuiltinProfileNames() {
  std::vector<std::string> names;
  for (const auto& builtin : BuiltinProfiles()) names.emplace_back(builtin.name);
  return names;
}

absl::StatusOr<Profile> LoadProfile(const std::string& name_or_path) {
  const bool is_file =
      name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json");
  if (!is_file) {
    for (const auto& builtin : BuiltinProfiles()) {
      if (name_or_path == builtin.name) {
        return Profile::FromJson(nlohmann::json::parse(builtin.json),
                                 absl::StrCat("built-in profile ", std::string(builtin.name)));
      }
    }
    return absl::NotFoundError(absl::StrCat("unknown profile '", name_or_path, "' (built in: ",
                                            absl::StrJoin(BuiltinProfileNames(), ", "),
                                            "; or a path to a JSON file)"));
  }
  std::ifstream in(name_or_path);
  if (!in) return absl::NotFoundError(absl::StrCat(name_or_path, ": cannot open file"));
  try {
    return Profile::FromJson(nlohmann::json::parse(in), name_or_path);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(name_or_path, ": not valid JSON: ", e.what()));
  }
}

}  // namespace gpeserve::policy
