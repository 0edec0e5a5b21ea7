// The "pattern" field shared by Replace normalizers/decoders and Split pre-tokenizers:
// {"String": "..."} (a literal) or {"Regex": "..."}.
//
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"
#include "engine/tokenizer/regex.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer {

// Reads json["pattern"]; `at` is the location of `json`.
absl::StatusOr<std::shared_ptr<const Regex>> PatternFromJson(const nlohmann::json& json,
                                                             const JsonLocation& at);

// `text` with every match of `pattern` replaced by `content`.
std::string ReplaceAll(const Regex& pattern, std::string_view text, std::string_view content);

}  // namespace gpeserve::tokenizer
