#include "engine/tokenizer/added_vocabulary.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gpeserve::tokenizer {
namespace {

AddedToken Token(int id, std::string content, bool special = true) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  t.special = special;
  return t;
}

AddedTokenMatcher Matcher(const std::vector<AddedToken>& tokens) {
  std::vector<std::string> patterns;
  for (const auto& t : tokens) patterns.push_back(t.content);
  return AddedTokenMatcher(tokens, patterns);
}

// "text|<id>|text" rendering of a split, for readable expectations.
std::string Render(const std::vector<TextSegment>& segments) {
  std::string out;
  for (const auto& s : segments) {
    if (!out.empty()) out += "|";
    out += s.token_id >= 0 ? absl::StrCat("<", s.token_id, ">") : std::string(s.text);
  }
  return out;
}

std::string Split(const AddedTokenMatcher& m, std::string_view text, bool skip_special = false) {
  std::vector<TextSegment> out;
  m.Split(text, skip_special, &out);
  return Render(out);
}

TEST(AddedTokenMatcherTest, LeftmostLongestMatch) {
  const auto m = Matcher({Token(1, "<a>"), Token(2, "<a><b>"), Token(3, "b>")});
  EXPECT_EQ(Split(m, "x<a><b>y<a>z"), "x|<2>|y|<1>|z");
  EXPECT_EQ(Split(m, "<a>b>"), "<1>|<3>");
  EXPECT_EQ(Split(m, "no tokens"), "no tokens");
  EXPECT_EQ(Split(m, ""), "");
}

TEST(AddedTokenMatcherTest, StripFlagsSwallowWhitespace) {
  AddedToken t = Token(7, "<m>");
  t.lstrip = true;
  t.rstrip = true;
  const auto m = Matcher({t});
  EXPECT_EQ(Split(m, "a  <m> \t b"), "a|<7>|b");
  std::vector<TextSegment> out;
  m.Split("a  <m> \t b", false, &out);
  EXPECT_EQ(out[1].text, "  <m> \t ");  // the whitespace belongs to the token
}

TEST(AddedTokenMatcherTest, SingleWordOnlyMatchesOutsideWords) {
  AddedToken t = Token(5, "cat", false);
  t.single_word = true;
  const auto m = Matcher({t});
  EXPECT_EQ(Split(m, "a cat sat"), "a |<5>| sat");
  EXPECT_EQ(Split(m, "concatenate"), "concatenate");
  EXPECT_EQ(Split(m, "cat_"), "cat_");
}

TEST(AddedTokenMatcherTest, SkipSpecialLeavesSpecialTokensAsText) {
  const auto m = Matcher({Token(1, "<s>", true), Token(2, "<x>", false)});
  EXPECT_EQ(Split(m, "a<s>b<x>c", true), "a<s>b|<2>|c");
}

TEST(AddedTokenMatcherTest, MatchesNaiveReferenceOnRandomText) {
  const std::vector<std::string> contents = {"ab", "abc", "b", "cab", "ca", "aaaa"};
  std::vector<AddedToken> tokens;
  for (size_t i = 0; i < contents.size(); ++i) tokens.push_back(Token(i, contents[i]));
  const auto m = Matcher(tokens);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    for (int i = 0, n = rng() % 20; i < n; ++i) text.push_back("abcx"[rng() % 4]);
    // Reference: at each position take the longest token starting there, else move on.
    std::vector<TextSegment> want;
    size_t pos = 0, plain = 0;
    while (pos < text.size()) {
      int best = -1;
      for (size_t i = 0; i < contents.size(); ++i) {
        if (text.compare(pos, contents[i].size(), contents[i]) == 0 &&
            (best < 0 || contents[i].size() > contents[best].size())) {
          best = static_cast<int>(i);
        }
      }
      if (best < 0) {
        ++pos;
        continue;
      }
      if (plain < pos) want.push_back({std::string_view(text).substr(plain, pos - plain), -1});
      want.push_back({std::string_view(text).substr(pos, contents[best].size()), best});
      pos += contents[best].size();
      plain = pos;
    }
    if (plain < text.size()) want.push_back({std::string_view(text).substr(plain), -1});
    EXPECT_EQ(Split(m, text), Render(want)) << text;
  }
}

}  // namespace
}  // namespace gpeserve::tokenizer
