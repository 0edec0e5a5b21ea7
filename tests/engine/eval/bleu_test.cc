#include "engine/eval/bleu.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gpeserve::eval {
namespace {

TEST(BleuTest, Tokenize13aSplitsPunctuationButNotNumbers) {
  EXPECT_EQ(Tokenize13a("Hello, world! It's 3.14 or 1,000 (approx.)"),
            "Hello , world ! It's 3.14 or 1,000 ( approx . )");  // ' is not split
  EXPECT_EQ(Tokenize13a("ages 3-5 &amp; more&quot;  \n"), "ages 3 - 5 & more \"");
  EXPECT_EQ(Tokenize13a("Größe: 5€."), "Größe : 5€ .");
}

TEST(BleuTest, IdenticalCorpusScores100AndDisjointScores0) {
  const std::vector<std::string> refs = {"the cat sat on the mat", "a dog barked loudly today"};
  const BleuScore same = CorpusBleu(refs, refs);
  EXPECT_DOUBLE_EQ(same.score, 100.0);
  EXPECT_DOUBLE_EQ(same.brevity_penalty, 1.0);
  const BleuScore none = CorpusBleu({"x y z", "q r"}, refs);
  EXPECT_DOUBLE_EQ(none.score, 0.0);
}

TEST(BleuTest, BrevityPenaltyAndSmoothingByHand) {
  // hyp "the cat" vs ref "the cat sat": 1-grams 2/2, 2-grams 1/1, no 3-/4-grams (total 0).
  const BleuScore b = CorpusBleu({"the cat"}, {"the cat sat"});
  EXPECT_EQ(b.sys_len, 2);
  EXPECT_EQ(b.ref_len, 3);
  EXPECT_NEAR(b.brevity_penalty, std::exp(1.0 - 3.0 / 2.0), 1e-12);
  EXPECT_DOUBLE_EQ(b.precisions[0], 100.0);
  EXPECT_DOUBLE_EQ(b.precisions[1], 100.0);
  EXPECT_DOUBLE_EQ(b.precisions[2], 0.0);  // no trigrams at all: the score collapses
  EXPECT_LT(b.score, 1e-6);
  // "a b c d e" vs "a b c x e": 4/5, 2/4, 1/3... 4-grams 0/2 -> exp smoothing 100/(2*2).
  const BleuScore s = CorpusBleu({"a b c d e"}, {"a b c x e"});
  EXPECT_DOUBLE_EQ(s.precisions[3], 100.0 / (2 * 2));
  EXPECT_EQ(BleuScore::Signature(), "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0");
}

}  // namespace
}  // namespace gpeserve::eval
