#include "engine/tokenizer/normalizer.h"

#include <utility>
#include <vector>

#include "engine/tokenizer/pattern.h"
#include "engine/tokenizer/unicode.h"

namespace gpeserve::tokenizer {
namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string Normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& step : steps_) s = step->Normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string Normalize(std::string_view text) const override {
    return gpeserve::tokenizer::Normalize(text, form_);
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string Normalize(std::string_view text) const override { return ToLower(text); }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Normalize(std::string_view text) const override {
    if (text.empty()) return std::string();
    std::string s = prefix_;
    s.append(text);
    return s;
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::shared_ptr<const Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string Normalize(std::string_view text) const override {
    return ReplaceAll(*pattern_, text, content_);
  }

 private:
  std::shared_ptr<const Regex> pattern_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string Normalize(std::string_view text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!IsWhitespace(NextCodePoint(text, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t probe = start;
        if (!IsWhitespace(NextCodePoint(text, &probe))) break;
        end = start;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }

 private:
  bool left_, right_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const nlohmann::json& json,
                                                               const JsonLocation& at) {
  if (!json.is_object()) return JsonError(at, "expected a normalizer object");
  auto type = GetString(json, "type", at);
  if (!type.ok()) return type.status();
  if (*type == "Sequence") {
    auto steps = ParseArray<Normalizer>(json, "normalizers", at, NormalizerFromJson);
    if (!steps.ok()) return steps.status();
    return std::make_unique<SequenceNormalizer>(*std::move(steps));
  }
  if (*type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (*type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (*type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (*type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  if (*type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (*type == "Prepend") {
    auto prefix = GetString(json, "prepend", at);
    if (!prefix.ok()) return prefix.status();
    return std::make_unique<PrependNormalizer>(*std::move(prefix));
  }
  if (*type == "Replace") {
    auto pattern = PatternFromJson(json, at);
    if (!pattern.ok()) return pattern.status();
    auto content = GetString(json, "content", at);
    if (!content.ok()) return content.status();
    return std::make_unique<ReplaceNormalizer>(*std::move(pattern), *std::move(content));
  }
  if (*type == "Strip") {
    // Both fields are required, as Hugging Face requires them.
    auto left = GetBool(json, "strip_left", at);
    if (!left.ok()) return left.status();
    auto right = GetBool(json, "strip_right", at);
    if (!right.ok()) return right.status();
    return std::make_unique<StripNormalizer>(*left, *right);
  }
  return JsonUnsupported(at.Child("type"), "normalizer", *type);
}

}  // namespace gpeserve::tokenizer
