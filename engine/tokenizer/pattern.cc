#include "engine/tokenizer/pattern.h"

namespace gpeserve::tokenizer {

absl::StatusOr<std::shared_ptr<const Regex>> PatternFromJson(const nlohmann::json& json,
                                                             const JsonLocation& at) {
  const JsonLocation pattern_at = at.Child("pattern");
  const auto it = json.find("pattern");
  if (it == json.end() || !it->is_object()) return JsonError(pattern_at, "expected an object");
  if (auto s = it->find("String"); s != it->end() && s->is_string()) {
    return Regex::Literal(s->get<std::string>());
  }
  if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    auto regex = Regex::Compile(r->get<std::string>());
    if (!regex.ok())
      return JsonError(pattern_at.Child("Regex"), std::string(regex.status().message()));
    return regex;
  }
  return JsonError(pattern_at, "expected {\"String\": ...} or {\"Regex\": ...}");
}

std::string ReplaceAll(const Regex& pattern, std::string_view text, std::string_view content) {
  const auto matches = pattern.FindAll(text);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t last = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(last, begin - last));
    out.append(content);
    last = end;
  }
  out.append(text.substr(last));
  return out;
}

}  // namespace gpeserve::tokenizer
