#include "engine/tokenizer/added_vocabulary.h"

#include <unicode/uchar.h>

#include "engine/tokenizer/unicode.h"

namespace gpeserve::tokenizer {
namespace {

// Rust regex's Unicode \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation,
// Join_Control.
bool IsWordChar(char32_t cp) {
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int8_t type = u_charType(cp);
  return type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK ||
         type == U_COMBINING_SPACING_MARK || type == U_DECIMAL_DIGIT_NUMBER ||
         type == U_CONNECTOR_PUNCTUATION;
}

// Start of the code point that ends at text[end - 1].
size_t PreviousCodePointStart(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

char32_t CodePointBefore(std::string_view text, size_t end) {
  size_t start = PreviousCodePointStart(text, end);
  return NextCodePoint(text, &start);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     std::vector<std::string> patterns)
    : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string& pattern = patterns[i];
    if (pattern.empty()) continue;
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
    int32_t node = 0;
    for (unsigned char c : pattern) {
      auto it = nodes_[node].children.find(c);
      if (it == nodes_[node].children.end()) {
        nodes_.emplace_back();
        const auto child = static_cast<int32_t>(nodes_.size() - 1);
        nodes_[node].children[c] = child;
        node = child;
      } else {
        node = it->second;
      }
    }
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(i);
  }
}

std::pair<int32_t, size_t> AddedTokenMatcher::LongestAt(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, pos};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& children = nodes_[node].children;
    const auto it = children.find(static_cast<unsigned char>(text[i]));
    if (it == children.end()) break;
    node = it->second;
    const int32_t token = nodes_[node].token;
    if (token >= 0) best = {token, i + 1};
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, bool skip_special,
                              std::vector<TextSegment>* out) const {
  if (tokens_.empty()) {
    if (!text.empty()) out->push_back({text, -1});
    return;
  }
  size_t start_offset = 0;  // end of the last emitted segment
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    auto [index, stop] = LongestAt(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos;
    pos = stop;  // matching resumes after this match even if it is rejected below
    // As in HF: a skipped special token is still matched (and hides shorter matches), then
    // left in the text.
    if (skip_special && token.special) continue;
    if (token.single_word) {
      const bool space_before = start == 0 || !IsWordChar(CodePointBefore(text, start));
      size_t probe = stop;
      const bool space_after = stop == text.size() || !IsWordChar(NextCodePoint(text, &probe));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0 && IsWhitespace(CodePointBefore(text, new_start))) {
        new_start = PreviousCodePointStart(text, new_start);
      }
      start = std::max(new_start, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!IsWhitespace(NextCodePoint(text, &next))) break;
        stop = next;
      }
    }
    if (start_offset < start) out->push_back({text.substr(start_offset, start - start_offset), -1});
    out->push_back({text.substr(start, stop - start), token.id});
    start_offset = stop;
    pos = std::max(pos, stop);
  }
  if (start_offset < text.size()) out->push_back({text.substr(start_offset), -1});
}

}  // namespace gpeserve::tokenizer
