// A prompt profile (docs/GPE.md section 2): the strings that frame a streaming session for a
// model family's chat format, whether words after the first get a leading space, and phi, the
// first position id of the target group. Built-in profiles are JSON files compiled into the
// binary (engine/policy/profiles/); a profile can also be read from a JSON file.
//
// Thread-safety: plain value type; the loaders are pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gpeserve::policy {

struct Profile {
  std::string name;
  std::string description;
  std::string instruction;  // the task text substituted for {instruction}
  std::string instruct;     // system/instruction segment, may contain {instruction}
  std::string user;         // start of the user turn
  std::string assistant;    // start of the assistant turn (the target header)
  std::string end;          // end of a turn (source segment n+1)
  bool add_space = true;    // words after the first get a leading " "
  int64_t phi = 0;          // first position id of the target group

  // Source segment 0: instruct (with the instruction filled in) + user.
  std::string Prefix() const;
  // The same profile with another instruction.
  Profile WithInstruction(std::string text) const;

  static absl::StatusOr<Profile> FromJson(const nlohmann::json& json, const std::string& origin);
};

// Names of the built-in profiles: gemma2, llama3, phi3, qwen2.5, qwen3.
std::vector<std::string> BuiltinProfileNames();

// The profile name "auto" stands for the built-in profile of the model's chat format. With a
// chat template (tokenizer_config.json's chat_template, a GGUF file's tokenizer.chat_template)
// it is recognized by the markers the template writes: <|im_start|> (ChatML) is qwen2.5, or
// qwen3 when the template also writes Qwen 3's <think> block; <|start_header_id|> is llama3;
// <start_of_turn> is gemma2 (Gemma 2 and 3); <|user|> with <|assistant|> and <|end|> is phi3.
// A template with none of them (Llama 2's and Mistral's [INST], for one: their format has no
// target header for the target group to start from) is InvalidArgument naming --profile FILE.
// Without a template (a base model), by config.json's model_type (qwen2: qwen2.5, qwen3: qwen3,
// llama: llama3, gemma2: gemma2, phi3: phi3; anything else qwen2.5). Other names are returned
// unchanged.
inline constexpr char kAutoProfile[] = "auto";
absl::StatusOr<std::string> ResolveProfileName(const std::string& name,
                                               const std::string& model_type,
                                               const std::string& chat_template);
// The built-in profile whose markers `chat_template` writes (see above), or InvalidArgument.
absl::StatusOr<std::string> ProfileForChatTemplate(const std::string& chat_template);
// A built-in profile by name, or a JSON file by path (anything containing '/' or ending in
// ".json"). Errors name the profile or file and the field.
absl::StatusOr<Profile> LoadProfile(const std::string& name_or_path);

}  // namespace gpeserve::policy
