#include "engine/eval/words.h"

#include <cstdint>

namespace gpeserve::eval {
namespace {

// Python's str.isspace for one code point.
bool IsSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Decodes the code point at text[i]; *length is its byte length (1 for an invalid byte, whose
// value is then returned as is and is never a space above 0x7F).
uint32_t Decode(std::string_view text, size_t i, size_t* length) {
  const auto byte = [&](size_t j) { return static_cast<unsigned char>(text[j]); };
  const unsigned char lead = byte(i);
  size_t n = lead < 0x80           ? 1
             : (lead >> 5) == 0x6  ? 2
             : (lead >> 4) == 0xE  ? 3
             : (lead >> 3) == 0x1E ? 4
                                   : 0;
  if (n == 0 || i + n > text.size()) {
    *length = 1;
    return 0xFFFFFFFF;
  }
  uint32_t c = n == 1 ? lead : lead & (0x7F >> n);
  for (size_t j = 1; j < n; ++j) {
    if ((byte(i + j) & 0xC0) != 0x80) {
      *length = 1;
      return 0xFFFFFFFF;
    }
    c = (c << 6) | (byte(i + j) & 0x3F);
  }
  *length = n;
  return c;
}

}  // namespace

std::vector<std::string_view> SplitWords(std::string_view text) {
  std::vector<std::string_view> words;
  size_t start = std::string_view::npos;
  for (size_t i = 0; i < text.size();) {
    size_t length = 1;
    const bool space = IsSpace(Decode(text, i, &length));
    if (space && start != std::string_view::npos) {
      words.push_back(text.substr(start, i - start));
      start = std::string_view::npos;
    } else if (!space && start == std::string_view::npos) {
      start = i;
    }
    i += length;
  }
  if (start != std::string_view::npos) words.push_back(text.substr(start));
  return words;
}

bool IsOneWord(std::string_view text) {
  const std::vector<std::string_view> words = SplitWords(text);
  return words.size() == 1 && words[0].size() == text.size();
}

std::vector<std::string> WordStream::Add(std::string_view piece) {
  const std::string all = partial_ + std::string(piece);
  partial_.clear();
  std::vector<std::string_view> views = SplitWords(all);
  if (!views.empty() && views.back().data() + views.back().size() == all.data() + all.size()) {
    partial_ = std::string(views.back());  // may continue in the next piece
    views.pop_back();
  }
  return std::vector<std::string>(views.begin(), views.end());
}

std::vector<std::string> WordStream::Finish() {
  std::vector<std::string> words;
  if (!partial_.empty()) words.push_back(std::move(partial_));
  partial_.clear();
  return words;
}

}  // namespace gpeserve::eval
