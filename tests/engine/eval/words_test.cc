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

}  // namespace
}  // namespace gpeserve::eval
