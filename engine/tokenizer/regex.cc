#include "engine/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace gpeserve::tokenizer {

absl::StatusOr<std::shared_ptr<const Regex>> Regex::Compile(std::string_view pattern) {
  return CompileWith(pattern, 0);
}

absl::StatusOr<std::shared_ptr<const Regex>> Regex::CompileFull(std::string_view pattern) {
  return CompileWith(pattern, PCRE2_ANCHORED | PCRE2_ENDANCHORED);
}

absl::StatusOr<std::shared_ptr<const Regex>> Regex::CompileWith(std::string_view pattern,
                                                                uint32_t options) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("cannot compile regex '", std::string(pattern),
                                                   "' at offset ", error_offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  std::shared_ptr<Regex> regex(new Regex());
  regex->pattern_ = std::string(pattern);
  regex->code_ = code;
  return regex;
}

bool Regex::Matches(std::string_view text) const {
  if (is_literal_) return text.starts_with(literal_);
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             PCRE2_NO_UTF_CHECK, data, nullptr);
  pcre2_match_data_free(data);
  return rc >= 0;
}

std::shared_ptr<const Regex> Regex::Literal(std::string_view literal) {
  std::shared_ptr<Regex> regex(new Regex());
  regex->pattern_ = std::string(literal);
  regex->literal_ = std::string(literal);
  regex->is_literal_ = true;
  return regex;
}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  if (is_literal_) {
    if (literal_.empty()) return matches;
    for (size_t pos = text.find(literal_); pos != std::string_view::npos;
         pos = text.find(literal_, pos + literal_.size())) {
      matches.emplace_back(pos, pos + literal_.size());
    }
    return matches;
  }
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset <= text.size()) {
    // The text was validated as UTF-8 once, on entry to the tokenizer.
    const int rc =
        pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      offset = end;
    } else {
      // Empty match: step over one whole character.
      if (begin >= text.size()) break;
      offset = begin + 1;
      while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) {
        ++offset;
      }
    }
  }
  pcre2_match_data_free(data);
  return matches;
}

}  // namespace gpeserve::tokenizer
