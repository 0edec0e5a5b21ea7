#include "engine/tokenizer/bpe.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_tokenizers.h"

namespace gpeserve::tokenizer {
namespace {

using testing::Build;
using testing::ByteFallbackJson;
using testing::ByteLevelJson;

// Reference BPE: repeatedly merge the adjacent pair with the lowest rank (leftmost on ties),
// rescanning the whole word each time.
std::vector<std::string> NaiveBpe(const std::string& word,
                                  const std::map<std::pair<std::string, std::string>, int>& ranks) {
  std::vector<std::string> symbols;
  for (char c : word) symbols.emplace_back(1, c);
  while (true) {
    int best = -1, best_rank = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = ranks.find({symbols[i], symbols[i + 1]});
      if (it != ranks.end() && (best < 0 || it->second < best_rank)) {
        best = static_cast<int>(i);
        best_rank = it->second;
      }
    }
    if (best < 0) return symbols;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
}

TEST(BpeTest, MergesMatchNaiveReferenceOnRandomVocabularies) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::string> tokens = {"a", "b", "c", "d"};
    std::vector<std::pair<std::string, std::string>> merges;
    std::map<std::pair<std::string, std::string>, int> ranks;
    for (int k = 0; k < 40; ++k) {
      const std::string& x = tokens[rng() % tokens.size()];
      const std::string& y = tokens[rng() % tokens.size()];
      if (x.size() + y.size() > 6 || ranks.contains({x, y})) continue;
      ranks[{x, y}] = static_cast<int>(merges.size());
      merges.emplace_back(x, y);
      tokens.push_back(x + y);
    }
    auto tok = Build(ByteLevelJson(tokens, merges));
    ASSERT_NE(tok, nullptr);
    for (int w = 0; w < 200; ++w) {
      std::string word;
      const int len = 1 + static_cast<int>(rng() % 30);
      for (int i = 0; i < len; ++i) word.push_back("abcd"[rng() % 4]);
      std::vector<int32_t> want;
      for (const std::string& s : NaiveBpe(word, ranks)) want.push_back(*tok->TokenToId(s));
      auto got = tok->Encode(word);
      ASSERT_TRUE(got.ok());
      ASSERT_EQ(*got, want) << "trial " << trial << " word " << word;
    }
  }
}

TEST(BpeTest, LowerRankWinsOverLeftmost) {
  // "abc": (b,c) has rank 0, (a,b) rank 1 -> a + bc, not ab + c.
  auto tok = Build(ByteLevelJson({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(*tok->Encode("abc"), (std::vector<int32_t>{'a', *tok->TokenToId("bc")}));
}

TEST(BpeTest, IgnoreMergesTakesWholeWordFromVocabulary) {
  // "abc" is in the vocabulary but no merge sequence reaches it.
  nlohmann::json json = ByteLevelJson({"ab", "abc"}, {{"a", "b"}});
  EXPECT_EQ(Build(json)->Encode("abc")->size(), 2u);
  json["model"]["ignore_merges"] = true;
  auto tok = Build(json);
  EXPECT_EQ(*tok->Encode("abc"), std::vector<int32_t>{*tok->TokenToId("abc")});
}

TEST(BpeTest, ByteFallbackSplitsUnknownCharactersIntoByteTokens) {
  auto tok = Build(ByteFallbackJson({"\u2581", "h", "i", "\u2581h"}, {{"\u2581", "h"}}));
  // "hi€": ▁h i <0xE2> <0x82> <0xAC>
  const std::vector<int32_t> want = {*tok->TokenToId("\u2581h"), *tok->TokenToId("i"),
                                     *tok->TokenToId("<0xE2>"), *tok->TokenToId("<0x82>"),
                                     *tok->TokenToId("<0xAC>")};
  EXPECT_EQ(*tok->Encode("hi\u20ac"), want);
  EXPECT_EQ(tok->Decode(want), "hi\u20ac");
}

TEST(BpeTest, UnknownCharactersFuseIntoOneUnkWithoutByteFallback) {
  nlohmann::json json = ByteFallbackJson({"\u2581", "x"}, {});
  json["model"]["byte_fallback"] = false;
  auto tok = Build(json);
  // "x€€x" -> ▁ x <unk> x  (the two unknown characters fuse)
  EXPECT_EQ(*tok->Encode("x\u20ac\u20acx"),
            (std::vector<int32_t>{*tok->TokenToId("\u2581"), *tok->TokenToId("x"), 0,
                                  *tok->TokenToId("x")}));
  json["model"]["fuse_unk"] = false;
  EXPECT_EQ(Build(json)->Encode("x\u20ac\u20acx")->size(), 5u);
}

TEST(BpeTest, ContinuingSubwordPrefixIsUsedForNonInitialCharacters) {
  nlohmann::json json = ByteLevelJson({"##b", "a##b"}, {});
  json["model"]["continuing_subword_prefix"] = "##";
  json["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "##b"})});
  json["model"]["vocab"]["ab"] = 300;  // result of merging a + ##b is "ab"
  auto tok = Build(json);
  EXPECT_EQ(*tok->Encode("ab"), std::vector<int32_t>{300});
}

TEST(BpeTest, RejectsMergeWithUnknownToken) {
  nlohmann::json json = ByteLevelJson({}, {{"a", "b"}});  // "ab" is not in the vocabulary
  auto tok = Tokenizer::FromJson(json.dump(), "t.json", "", "");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("t.json: /model/merges/0"), std::string::npos)
      << tok.status();
}

}  // namespace
}  // namespace gpeserve::tokenizer
