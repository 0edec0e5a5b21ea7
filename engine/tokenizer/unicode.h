// UTF-8 and Unicode helpers shared by the tokenizer's stages: code point iteration, validation,
// lossy conversion of raw bytes, character classes (via ICU), normalization forms, and the GPT-2
// byte <-> printable character map used by byte-level BPE.
//
// Thread-safety: every function is pure and may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpeserve::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Length in bytes of the UTF-8 sequence that starts with `lead` (1..4), or 1 for a byte that
// cannot start a sequence.
inline int Utf8SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at s[*pos] and advances *pos past it. REQUIRES: s is valid UTF-8.
char32_t NextCodePoint(std::string_view s, size_t* pos);

// Appends the UTF-8 encoding of `cp` to *out.
void AppendUtf8(char32_t cp, std::string* out);

// Number of code points in valid UTF-8 `s`.
size_t CodePointCount(std::string_view s);

// OK if `s` is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF); otherwise
// InvalidArgument naming the byte offset of the first ill-formed sequence.
absl::Status ValidateUtf8(std::string_view s);

// Length of the longest prefix of `s` that is well-formed UTF-8 *and* does not end inside an
// incomplete (but so far valid) sequence.
size_t CompleteUtf8Prefix(std::string_view s);

// True if `s` ends with a sequence that is a valid but incomplete prefix of a UTF-8 character.
bool EndsWithIncompleteUtf8(std::string_view s);

// Converts arbitrary bytes to valid UTF-8, replacing each maximal ill-formed subsequence with
// U+FFFD (the Unicode "substitution of maximal subparts" practice, as Rust's
// String::from_utf8_lossy and Python's errors="replace" do).
std::string Utf8Lossy(std::string_view bytes);

// Unicode White_Space property (Rust's char::is_whitespace).
bool IsWhitespace(char32_t cp);
// Alphabetic or numeric (Rust's char::is_alphanumeric).
bool IsAlphanumeric(char32_t cp);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Normalizes valid UTF-8 text. Returns the input unchanged when it is already normalized.
std::string Normalize(std::string_view text, NormalForm form);
// Unicode lower-casing of each code point alone (full case mapping, locale-independent, no
// context: Hugging Face's Lowercase normalizer).
std::string ToLower(std::string_view text);

// GPT-2's reversible byte <-> character map: every byte is shown as a printable code point.
char32_t ByteToChar(uint8_t byte);
// The byte that `cp` stands for, or -1 if `cp` is not in the map.
int CharToByte(char32_t cp);
// UTF-8 of ByteToChar(b) for every byte b, precomputed.
const std::string& ByteToCharUtf8(uint8_t byte);

}  // namespace gpeserve::tokenizer
