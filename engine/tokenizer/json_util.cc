#include "engine/tokenizer/json_util.h"

#include "absl/strings/str_cat.h"

namespace gpeserve::tokenizer {

JsonLocation JsonLocation::Child(std::string_view key) const {
  return {file, absl::StrCat(path, "/", std::string(key))};
}

JsonLocation JsonLocation::Child(size_t index) const {
  return {file, absl::StrCat(path, "/", index)};
}

std::string JsonLocation::ToString() const {
  return absl::StrCat(file, ": ", path.empty() ? "/" : path);
}

absl::Status JsonError(const JsonLocation& at, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(at.ToString(), ": ", std::string(message)));
}

absl::Status JsonUnsupported(const JsonLocation& at, std::string_view what, std::string_view type) {
  return absl::UnimplementedError(absl::StrCat(at.ToString(), ": unsupported ", std::string(what),
                                               " '", std::string(type), "'"));
}

absl::StatusOr<std::string> GetString(const nlohmann::json& json, std::string_view key,
                                      const JsonLocation& at) {
  const auto it = json.find(key);
  if (it == json.end() || !it->is_string()) {
    return JsonError(at.Child(key), "expected a string");
  }
  return it->get<std::string>();
}

absl::StatusOr<bool> GetBool(const nlohmann::json& json, std::string_view key,
                             const JsonLocation& at) {
  const auto it = json.find(key);
  if (it == json.end() || !it->is_boolean()) return JsonError(at.Child(key), "expected a boolean");
  return it->get<bool>();
}

std::string GetStringOr(const nlohmann::json& json, std::string_view key,
                        std::string_view fallback) {
  const auto it = json.find(key);
  return it != json.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
}

bool GetBoolOr(const nlohmann::json& json, std::string_view key, bool fallback) {
  const auto it = json.find(key);
  return it != json.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace gpeserve::tokenizer
