#include "engine/tokenizer/unicode.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace gpeserve::tokenizer {
namespace {

TEST(UnicodeTest, LossyReplacesMaximalSubparts) {
  // The example of Unicode 15, section 3.9 (U+FFFD substitution of maximal subparts).
  const std::string bytes = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(Utf8Lossy(bytes), "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd");
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate: 3 subparts
  EXPECT_EQ(Utf8Lossy("ok\xF0\x9F\x98"), "ok\uFFFD");          // truncated at the end: one
  EXPECT_EQ(Utf8Lossy("\xC0\xAF"), "\uFFFD\uFFFD");            // overlong
  EXPECT_EQ(Utf8Lossy("h\xC3\xA9llo \xF0\x9F\x98\x80"), "h\xC3\xA9llo \xF0\x9F\x98\x80");
}

TEST(UnicodeTest, ValidateNamesOffsetOfFirstBadByte) {
  EXPECT_TRUE(ValidateUtf8("plain \xE2\x82\xAC").ok());
  const absl::Status s = ValidateUtf8("abc\xFF");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("byte offset 3"), std::string::npos) << s;
  EXPECT_FALSE(ValidateUtf8("\xF4\x90\x80\x80").ok());  // past U+10FFFF
  EXPECT_FALSE(ValidateUtf8("\xE2\x82").ok());          // truncated
}

TEST(UnicodeTest, CompletePrefixStopsBeforeUnfinishedCharacter) {
  const std::string euro = "\xE2\x82\xAC";
  for (size_t cut = 0; cut <= euro.size(); ++cut) {
    const std::string s = "ab" + euro.substr(0, cut);
    EXPECT_EQ(CompleteUtf8Prefix(s), cut == 3 ? 5u : 2u);
    EXPECT_EQ(EndsWithIncompleteUtf8(s), cut == 1 || cut == 2);
  }
}

TEST(UnicodeTest, ByteMapIsABijectionOntoPrintableCharacters) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = ByteToChar(static_cast<uint8_t>(b));
    EXPECT_FALSE(IsWhitespace(c)) << b;
    EXPECT_EQ(CharToByte(c), b);
    seen.insert(c);
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(ByteToChar(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(ByteToChar('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(CharToByte(U'\u4E00'), -1);
}

TEST(UnicodeTest, NormalFormsComposeAndDecompose) {
  EXPECT_EQ(Normalize("e\xCC\x81", NormalForm::kNfc), "\xC3\xA9");
  EXPECT_EQ(Normalize("\xC3\xA9", NormalForm::kNfd), "e\xCC\x81");
  EXPECT_EQ(Normalize("\xEF\xAC\x81", NormalForm::kNfkc), "fi");  // ﬁ ligature
  EXPECT_EQ(Normalize("\xEF\xAC\x81", NormalForm::kNfc), "\xEF\xAC\x81");
}

TEST(UnicodeTest, CodePointRoundTrip) {
  for (char32_t cp : {U'\u0041', U'\u00E9', U'\u20AC', U'\U0001F600', U'\U0010FFFF'}) {
    std::string s;
    AppendUtf8(cp, &s);
    size_t pos = 0;
    EXPECT_EQ(NextCodePoint(s, &pos), cp);
    EXPECT_EQ(pos, s.size());
    EXPECT_EQ(CodePointCount(s), 1u);
  }
}

}  // namespace
}  // namespace gpeserve::tokenizer
