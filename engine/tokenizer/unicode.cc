#include "engine/tokenizer/unicode.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <array>

#include "absl/strings/str_cat.h"

namespace gpeserve::tokenizer {
namespace {

// Bounds of the second byte of a well-formed sequence, by lead byte (Unicode table 3-7).
struct SecondByteRange {
  unsigned char lo, hi;
};
SecondByteRange SecondRange(unsigned char lead) {
  switch (lead) {
    case 0xE0:
      return {0xA0, 0xBF};
    case 0xED:
      return {0x80, 0x9F};
    case 0xF0:
      return {0x90, 0xBF};
    case 0xF4:
      return {0x80, 0x8F};
    default:
      return {0x80, 0xBF};
  }
}

// Length of the well-formed sequence at s[pos] (1..4), or -n where n >= 1 is the length of the
// maximal ill-formed subpart there, or 0 if s ends inside a valid but incomplete sequence.
int ClassifySequence(std::string_view s, size_t pos) {
  const unsigned char lead = s[pos];
  if (lead < 0x80) return 1;
  int len;
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
  } else {
    return -1;
  }
  const SecondByteRange second = SecondRange(lead);
  for (int i = 1; i < len; ++i) {
    if (pos + i >= s.size()) return 0;
    const unsigned char c = s[pos + i];
    const bool ok = i == 1 ? (c >= second.lo && c <= second.hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return -i;
  }
  return len;
}

std::array<char32_t, 256> MakeByteToChar() {
  std::array<char32_t, 256> map{};
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
  }
  return map;
}

const std::array<char32_t, 256>& ByteToCharTable() {
  static const std::array<char32_t, 256> table = MakeByteToChar();
  return table;
}

const icu::Normalizer2* Normalizer(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  switch (form) {
    case NormalForm::kNfc:
      return icu::Normalizer2::getNFCInstance(status);
    case NormalForm::kNfd:
      return icu::Normalizer2::getNFDInstance(status);
    case NormalForm::kNfkc:
      return icu::Normalizer2::getNFKCInstance(status);
    case NormalForm::kNfkd:
      return icu::Normalizer2::getNFKDInstance(status);
  }
  return nullptr;
}

}  // namespace

char32_t NextCodePoint(std::string_view s, size_t* pos) {
  const unsigned char lead = s[*pos];
  const int len = Utf8SequenceLength(lead);
  char32_t cp = len == 1 ? lead : lead & (0x7F >> len);
  for (int i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[*pos + i]) & 0x3F);
  *pos += len;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

absl::Status ValidateUtf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const int n = ClassifySequence(s, pos);
    if (n <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8: ill-formed byte sequence at byte offset ", pos,
                       n == 0 ? " (truncated character at the end)" : ""));
    }
    pos += n;
  }
  return absl::OkStatus();
}

size_t CompleteUtf8Prefix(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const int n = ClassifySequence(s, pos);
    if (n <= 0) break;
    pos += n;
  }
  return pos;
}

bool EndsWithIncompleteUtf8(std::string_view s) {
  // An incomplete sequence is at most 3 bytes long: look at the last 3 lead positions.
  const size_t start = s.size() >= 3 ? s.size() - 3 : 0;
  for (size_t pos = s.size(); pos-- > start;) {
    const unsigned char c = s[pos];
    if ((c & 0xC0) == 0x80) continue;
    return ClassifySequence(s, pos) == 0;
  }
  return false;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    int n = ClassifySequence(bytes, pos);
    if (n > 0) {
      out.append(bytes.substr(pos, n));
      pos += n;
      continue;
    }
    if (n == 0) n = -static_cast<int>(bytes.size() - pos);  // truncated at the end: one U+FFFD
    out.append(kReplacementUtf8);
    pos += -n;
  }
  return out;
}

bool IsWhitespace(char32_t cp) { return u_hasBinaryProperty(cp, UCHAR_WHITE_SPACE); }

bool IsAlphanumeric(char32_t cp) {
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC)) return true;
  const int8_t type = u_charType(cp);
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

std::string Normalize(std::string_view text, NormalForm form) {
  bool ascii = true;
  for (unsigned char c : text) ascii &= c < 0x80;
  if (ascii) return std::string(text);  // ASCII is invariant under every normal form
  const icu::Normalizer2* normalizer = Normalizer(form);
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString source =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
  if (normalizer == nullptr || normalizer->isNormalized(source, status)) return std::string(text);
  status = U_ZERO_ERROR;
  const icu::UnicodeString normalized = normalizer->normalize(source, status);
  if (U_FAILURE(status)) return std::string(text);
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

std::string ToLower(std::string_view text) {
  const icu::UnicodeString s =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
  // Each code point on its own, as Hugging Face's Lowercase (Rust's char::to_lowercase): full
  // mappings (U+0130 gives two code points) but no context, so a word-final capital sigma
  // becomes σ, not the final form ς that ICU's string mapping picks.
  std::string out;
  out.reserve(text.size());
  for (int32_t i = 0; i < s.length();) {
    const UChar32 cp = s.char32At(i);
    const int32_t width = U16_LENGTH(cp);
    icu::UnicodeString one(s, i, width);
    one.toLower(icu::Locale::getRoot());
    one.toUTF8String(out);
    i += width;
  }
  return out;
}

char32_t ByteToChar(uint8_t byte) { return ByteToCharTable()[byte]; }

int CharToByte(char32_t cp) {
  static const std::array<int16_t, 324> reverse = [] {
    std::array<int16_t, 324> r;
    r.fill(-1);
    for (int b = 0; b < 256; ++b) r[ByteToCharTable()[b]] = static_cast<int16_t>(b);
    return r;
  }();
  return cp < reverse.size() ? reverse[cp] : -1;
}

const std::string& ByteToCharUtf8(uint8_t byte) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    for (int b = 0; b < 256; ++b) AppendUtf8(ByteToCharTable()[b], &t[b]);
    return t;
  }();
  return table[byte];
}

}  // namespace gpeserve::tokenizer
