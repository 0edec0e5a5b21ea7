// Small helpers for reading tokenizer.json with precise errors: every error names the file and
// the JSON path of the offending part (e.g. "tokenizer.json: /pre_tokenizer/pretokenizers/1").
//
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer {

// Where a JSON value came from, for error messages.
struct JsonLocation {
  std::string file;  // e.g. "/models/qwen/tokenizer.json"
  std::string path;  // JSON pointer, e.g. "/normalizer/normalizers/0"

  JsonLocation Child(std::string_view key) const;
  JsonLocation Child(size_t index) const;
  std::string ToString() const;
};

// InvalidArgument("FILE: PATH: message").
absl::Status JsonError(const JsonLocation& at, std::string_view message);
// Unimplemented("FILE: PATH: unsupported <what> '<type>'").
absl::Status JsonUnsupported(const JsonLocation& at, std::string_view what, std::string_view type);

// The string at json[key]; error if absent or not a string.
absl::StatusOr<std::string> GetString(const nlohmann::json& json, std::string_view key,
                                      const JsonLocation& at);
// json[key] as a string when present and a string, else `fallback`.
std::string GetStringOr(const nlohmann::json& json, std::string_view key,
                        std::string_view fallback);
// The bool at json[key]; error if absent or not a bool.
absl::StatusOr<bool> GetBool(const nlohmann::json& json, std::string_view key,
                             const JsonLocation& at);
// json[key] as a bool when present and a bool, else `fallback`.
bool GetBoolOr(const nlohmann::json& json, std::string_view key, bool fallback);

// Builds one object per element of the array json[key] with `parse(element, location)`, for
// the "Sequence" types (normalizers, pre-tokenizers, decoders).
template <typename T, typename Parse>
absl::StatusOr<std::vector<std::unique_ptr<T>>> ParseArray(const nlohmann::json& json,
                                                           std::string_view key,
                                                           const JsonLocation& at, Parse parse) {
  const JsonLocation array_at = at.Child(key);
  const auto it = json.find(key);
  if (it == json.end() || !it->is_array()) return JsonError(array_at, "expected an array");
  std::vector<std::unique_ptr<T>> items;
  for (size_t i = 0; i < it->size(); ++i) {
    absl::StatusOr<std::unique_ptr<T>> item = parse((*it)[i], array_at.Child(i));
    if (!item.ok()) return item.status();
    items.push_back(*std::move(item));
  }
  return items;
}

}  // namespace gpeserve::tokenizer
