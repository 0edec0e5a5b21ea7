#include "engine/tokenizer/pre_tokenizer.h"

#include <utility>

#include "engine/tokenizer/pattern.h"
#include "engine/tokenizer/unicode.h"

namespace gpeserve::tokenizer {
namespace {

// The regex GPT-2 style ByteLevel pre-tokenizers use when use_regex is true.
constexpr std::string_view kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits `text` at the given matches, applying `behavior`; appends non-empty pieces to *out.
void SplitWithBehavior(std::string_view text, const std::vector<std::pair<size_t, size_t>>& found,
                       bool invert, SplitBehavior behavior, std::vector<std::string>* out) {
  // Segments covering the whole text, each flagged as delimiter or not.
  struct Segment {
    size_t begin, end;
    bool delimiter;
  };
  std::vector<Segment> segments;
  size_t last = 0;
  for (const auto& [begin, end] : found) {
    if (begin > last) segments.push_back({last, begin, invert});
    segments.push_back({begin, end, !invert});
    last = end;
  }
  if (last < text.size()) segments.push_back({last, text.size(), invert});

  std::vector<std::pair<size_t, size_t>> pieces;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& s : segments) {
        if (!s.delimiter) pieces.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const auto& s : segments) pieces.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_open = false;  // last piece is a non-delimiter that may absorb a delimiter
      for (const auto& s : segments) {
        if (s.delimiter && previous_open) {
          pieces.back().second = s.end;
          previous_open = false;
        } else {
          pieces.emplace_back(s.begin, s.end);
          previous_open = !s.delimiter;
        }
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_delimiter = false;  // last piece is a delimiter waiting for its next piece
      for (const auto& s : segments) {
        if (!s.delimiter && previous_delimiter) {
          pieces.back().second = s.end;
          previous_delimiter = false;
        } else {
          pieces.emplace_back(s.begin, s.end);
          previous_delimiter = s.delimiter;
        }
      }
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_delimiter = false;
      for (const auto& s : segments) {
        if (s.delimiter && previous_delimiter) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_delimiter = s.delimiter;
      }
      break;
    }
  }
  for (const auto& [begin, end] : pieces) {
    if (end > begin) out->emplace_back(text.substr(begin, end - begin));
  }
}

// Applies `split` to every piece; `split` appends the sub-pieces of one piece.
template <typename Fn>
void ForEachPiece(std::vector<std::string>* pieces, Fn split) {
  std::vector<std::string> out;
  out.reserve(pieces->size());
  for (size_t i = 0; i < pieces->size(); ++i) split((*pieces)[i], i, &out);
  *pieces = std::move(out);
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool first_is_start) const override {
    for (const auto& step : steps_) step->PreTokenize(pieces, first_is_start);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::shared_ptr<const Regex> pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    ForEachPiece(pieces, [&](const std::string& piece, size_t, std::vector<std::string>* out) {
      SplitWithBehavior(piece, pattern_->FindAll(piece), invert_, behavior_, out);
    });
  }

 private:
  std::shared_ptr<const Regex> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::shared_ptr<const Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    ForEachPiece(pieces, [&](const std::string& piece, size_t, std::vector<std::string>* out) {
      std::string text = add_prefix_space_ && !piece.starts_with(' ') ? " " + piece : piece;
      std::vector<std::string> words;
      if (regex_ != nullptr) {
        SplitWithBehavior(text, regex_->FindAll(text), false, SplitBehavior::kIsolated, &words);
      } else if (!text.empty()) {
        words.push_back(std::move(text));
      }
      for (const std::string& word : words) {
        std::string mapped;
        mapped.reserve(word.size() * 2);
        for (unsigned char byte : word) mapped.append(ByteToCharUtf8(byte));
        out->push_back(std::move(mapped));
      }
    });
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<const Regex> regex_;  // null when use_regex is false
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void PreTokenize(std::vector<std::string>* pieces, bool first_is_start) const override {
    const auto space = Regex::Literal(" ");
    const auto marker = Regex::Literal(replacement_);
    ForEachPiece(pieces, [&](const std::string& piece, size_t index,
                             std::vector<std::string>* out) {
      std::string text = ReplaceAll(*space, piece, replacement_);
      const bool prepend = scheme_ == PrependScheme::kAlways ||
                           (scheme_ == PrependScheme::kFirst && index == 0 && first_is_start);
      if (prepend && !text.starts_with(replacement_)) text.insert(0, replacement_);
      if (split_) {
        SplitWithBehavior(text, marker->FindAll(text), false, SplitBehavior::kMergedWithNext, out);
      } else if (!text.empty()) {
        out->push_back(std::move(text));
      }
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(std::shared_ptr<const Regex> digits, bool individual)
      : digits_(std::move(digits)), individual_(individual) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    ForEachPiece(pieces, [&](const std::string& piece, size_t, std::vector<std::string>* out) {
      SplitWithBehavior(piece, digits_->FindAll(piece), false,
                        individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, out);
    });
  }

 private:
  std::shared_ptr<const Regex> digits_;
  bool individual_;
};

absl::StatusOr<SplitBehavior> ParseBehavior(const nlohmann::json& json, const JsonLocation& at) {
  auto name = GetString(json, "behavior", at);
  if (!name.ok()) return name.status();
  if (*name == "Removed") return SplitBehavior::kRemoved;
  if (*name == "Isolated") return SplitBehavior::kIsolated;
  if (*name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (*name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (*name == "Contiguous") return SplitBehavior::kContiguous;
  return JsonUnsupported(at.Child("behavior"), "split behavior", *name);
}

absl::StatusOr<PrependScheme> ParsePrependScheme(const nlohmann::json& json,
                                                 const JsonLocation& at) {
  if (!json.contains("prepend_scheme")) {  // legacy field
    return GetBoolOr(json, "add_prefix_space", true) ? PrependScheme::kAlways
                                                     : PrependScheme::kNever;
  }
  auto name = GetString(json, "prepend_scheme", at);
  if (!name.ok()) return name.status();
  if (*name == "always") return PrependScheme::kAlways;
  if (*name == "first") return PrependScheme::kFirst;
  if (*name == "never") return PrependScheme::kNever;
  return JsonUnsupported(at.Child("prepend_scheme"), "prepend scheme", *name);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const nlohmann::json& json,
                                                                   const JsonLocation& at) {
  if (!json.is_object()) return JsonError(at, "expected a pre-tokenizer object");
  auto type = GetString(json, "type", at);
  if (!type.ok()) return type.status();
  if (*type == "Sequence") {
    auto steps = ParseArray<PreTokenizer>(json, "pretokenizers", at, PreTokenizerFromJson);
    if (!steps.ok()) return steps.status();
    return std::make_unique<SequencePreTokenizer>(*std::move(steps));
  }
  if (*type == "Split") {
    auto pattern = PatternFromJson(json, at);
    if (!pattern.ok()) return pattern.status();
    auto behavior = ParseBehavior(json, at);
    if (!behavior.ok()) return behavior.status();
    return std::make_unique<SplitPreTokenizer>(*std::move(pattern), *behavior,
                                               GetBoolOr(json, "invert", false));
  }
  if (*type == "ByteLevel") {
    std::shared_ptr<const Regex> regex;
    if (GetBoolOr(json, "use_regex", true)) {
      auto compiled = Regex::Compile(kByteLevelPattern);
      if (!compiled.ok()) return compiled.status();
      regex = *std::move(compiled);
    }
    return std::make_unique<ByteLevelPreTokenizer>(GetBoolOr(json, "add_prefix_space", true),
                                                   std::move(regex));
  }
  if (*type == "Metaspace") {
    auto scheme = ParsePrependScheme(json, at);
    if (!scheme.ok()) return scheme.status();
    return std::make_unique<MetaspacePreTokenizer>(GetStringOr(json, "replacement", "\u2581"),
                                                   *scheme, GetBoolOr(json, "split", true));
  }
  if (*type == "Digits") {
    auto digits = Regex::Compile(R"(\p{N})");
    if (!digits.ok()) return digits.status();
    return std::make_unique<DigitsPreTokenizer>(*std::move(digits),
                                                GetBoolOr(json, "individual_digits", false));
  }
  if (*type == "WhitespaceSplit") {
    auto spaces = Regex::Compile(R"(\s+)");
    if (!spaces.ok()) return spaces.status();
    return std::make_unique<SplitPreTokenizer>(*std::move(spaces), SplitBehavior::kRemoved, false);
  }
  return JsonUnsupported(at.Child("type"), "pre-tokenizer", *type);
}

}  // namespace gpeserve::tokenizer
