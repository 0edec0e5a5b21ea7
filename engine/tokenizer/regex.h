// A compiled PCRE2 pattern (UTF + UCP, JIT when available) with the one operation the tokenizer
// needs: list every non-overlapping match in a string, left to right.
//
// Thread-safety: a Regex is immutable after Compile and may be shared; FindAll allocates its
// own match data, so concurrent calls are safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace gpeserve::tokenizer {

class Regex {
 public:
  // Compiles `pattern` (Hugging Face / Oniguruma syntax, which PCRE2 accepts for the patterns
  // model tokenizers use). On failure: InvalidArgument with PCRE2's message and offset.
  static absl::StatusOr<std::shared_ptr<const Regex>> Compile(std::string_view pattern);
  // Compiles `pattern` to match whole strings only (Python's re.fullmatch), for Matches().
  static absl::StatusOr<std::shared_ptr<const Regex>> CompileFull(std::string_view pattern);
  // A pattern matching `literal` exactly.
  static std::shared_ptr<const Regex> Literal(std::string_view literal);

  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // [begin, end) byte ranges of the non-overlapping matches of the pattern in `text` (valid
  // UTF-8), in order. Empty matches are skipped.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;
  // Whether the pattern matches at the start of `text` (valid UTF-8); with CompileFull, the
  // whole of it.
  bool Matches(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  static absl::StatusOr<std::shared_ptr<const Regex>> CompileWith(std::string_view pattern,
                                                                  uint32_t options);

  std::string pattern_;
  std::string literal_;  // set instead of code_ for literal patterns
  bool is_literal_ = false;
  void* code_ = nullptr;  // pcre2_code*
};

}  // namespace gpeserve::tokenizer
