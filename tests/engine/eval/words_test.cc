#include "engine/eval/words.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::eval {
namespace {

std::vector<std::string> Words(std::string_view text) {
  std::vector<std::string> words;
  for (std::string_view w : SplitWords(text)) words.emplace_back(w);
  return words;
}

// Python's str.split(): any run of whitespace separates, none at the ends, Unicode spaces too.
TEST(WordsTest, SplitsLikePythonStrSplit) {
  EXPECT_EQ(Words(""), std::vector<std::string>{});
  EXPECT_EQ(Words(" \t\n "), std::vector<std::string>{});
  EXPECT_EQ(Words("assistant\nDas ist gut."),
            (std::vector<std::string>{"assistant", "Das", "ist", "gut."}));
  EXPECT_EQ(Words("  a\t\tb\r\nc\x0b"
                  "d\x0c"
                  "e\x1c"
                  "f "),
            (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
  // No-break space, ideographic space, line separator, narrow no-break space: separators.
  EXPECT_EQ(Words("a\u00a0b\u3000c\u2028d\u202f"
                  "e"),
            (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  // Zero-width space and word joiner are not whitespace in Python; accents stay inside words.
  EXPECT_EQ(Words("a\u200bb \u00fcber\u2060x"),
            (std::vector<std::string>{"a\u200bb", "\u00fcber\u2060x"}));
}

TEST(WordsTest, InvalidBytesStayInsideWords) {
  EXPECT_EQ(Words("a\xff"
                  "b c\xc2"),
            (std::vector<std::string>{"a\xff"
                                      "b",
                                      "c\xc2"}));
}

TEST(WordsTest, IsOneWord) {
  EXPECT_TRUE(IsOneWord("K\u00e4se"));
  EXPECT_FALSE(IsOneWord(""));
  EXPECT_FALSE(IsOneWord("a b"));
  EXPECT_FALSE(IsOneWord("a\tb"));
  EXPECT_FALSE(IsOneWord("a\u3000"));
  EXPECT_FALSE(IsOneWord(" a"));
}

// Text cut into pieces anywhere between characters gives the words of the whole text: the
// server's `text` chunks and gpe eval's data set cut words the same way.
TEST(WordsTest, AStreamOfPiecesGivesTheWordsOfTheWhole) {
  const std::vector<std::string> characters = {"a",      "b",      " ", "\t", "\u00fc",
                                               "\u3000", "\u00a0", "x", "\n", "\u2060"};
  uint64_t state = 12345;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    std::vector<size_t> cuts;  // byte offsets between characters
    const size_t length = next(30);
    for (size_t i = 0; i < length; ++i) {
      text += characters[next(characters.size())];
      if (next(3) == 0) cuts.push_back(text.size());
    }
    WordStream stream;
    std::vector<std::string> got;
    size_t begin = 0;
    cuts.push_back(text.size());
    for (size_t cut : cuts) {
      for (std::string& w : stream.Add(std::string_view(text).substr(begin, cut - begin))) {
        got.push_back(std::move(w));
      }
      begin = cut;
    }
    for (std::string& w : stream.Finish()) got.push_back(std::move(w));
    EXPECT_EQ(got, Words(text)) << "text '" << text << "'";
    EXPECT_EQ(stream.partial(), "");
  }
}

}  // namespace
}  // namespace gpeserve::eval
