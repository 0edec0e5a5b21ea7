#include "engine/tokenizer/incremental_detokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/unicode.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_tokenizers.h"

namespace gpeserve::tokenizer {
namespace {

using testing::Added;
using testing::Build;
using testing::ByteFallbackJson;
using testing::ByteLevelJson;

// Streams `ids` and checks every piece is valid UTF-8 and that the pieces add up to Decode.
void ExpectStreamEqualsDecode(const Tokenizer& tok, const std::vector<int32_t>& ids,
                              const DecodeOptions& options) {
  IncrementalDetokenizer detok(tok, options);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = detok.Push(id);
    ASSERT_TRUE(ValidateUtf8(piece).ok());
    streamed += piece;
  }
  streamed += detok.Flush();
  EXPECT_EQ(streamed, tok.Decode(ids, options));
}

TEST(IncrementalDetokenizerTest, HoldsBackSplitCharacterUntilComplete) {
  auto tok = Build(ByteLevelJson({}, {}));
  // "€" is E2 82 AC: three byte-level tokens.
  IncrementalDetokenizer detok(*tok);
  EXPECT_EQ(detok.Push('a'), "a");
  EXPECT_EQ(detok.Push(0xE2), "");
  EXPECT_EQ(detok.Push(0x82), "");
  EXPECT_EQ(detok.Push(0xAC), "\u20ac");
  EXPECT_EQ(detok.Push('b'), "b");
  EXPECT_EQ(detok.Flush(), "");
}

TEST(IncrementalDetokenizerTest, ByteFallbackRunIsReleasedWhenItEnds) {
  auto tok = Build(ByteFallbackJson({"\u2581", "x"}, {}));
  const int32_t x = *tok->TokenToId("x"), e2 = *tok->TokenToId("<0xE2>"),
                b82 = *tok->TokenToId("<0x82>"), ac = *tok->TokenToId("<0xAC>");
  IncrementalDetokenizer detok(*tok);
  EXPECT_EQ(detok.Push(x), "x");
  EXPECT_EQ(detok.Push(e2), "");
  EXPECT_EQ(detok.Push(b82), "");
  EXPECT_EQ(detok.Push(ac), "");
  EXPECT_EQ(detok.Push(x), "\u20acx");
  // A run cut short decodes to one U+FFFD per byte, as Decode does.
  IncrementalDetokenizer cut(*tok);
  std::string text = cut.Push(e2);
  text += cut.Push(b82);
  text += cut.Flush();
  EXPECT_EQ(text, "\uFFFD\uFFFD");
}

TEST(IncrementalDetokenizerTest, CleanUpHoldsBackSpaceBeforePunctuation) {
  auto tok = Build(ByteLevelJson({}, {}), {{"clean_up_tokenization_spaces", true}});
  const std::vector<int32_t> ids = *tok->Encode("Yes , it is n't .");
  IncrementalDetokenizer detok(*tok);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.Push(id);
  streamed += detok.Flush();
  EXPECT_EQ(streamed, "Yes, it isn't.");
}

TEST(IncrementalDetokenizerTest, RandomIdsStreamEqualsDecode) {
  nlohmann::json byte_level =
      ByteLevelJson({"\u0120a", "\u0120."}, {{"\u0120", "a"}, {"\u0120", "."}},
                    nlohmann::json::array({Added(400, "<|end|>", true)}));
  auto byte_tok = Build(byte_level);
  auto fallback_tok =
      Build(ByteFallbackJson({"\u2581", "a", "n", "'", "t", ".", "\u2581a"}, {{"\u2581", "a"}}));
  std::mt19937 rng(3);
  for (const auto* tok : {byte_tok.get(), fallback_tok.get()}) {
    std::vector<int32_t> interesting;
    for (const char* s : {"a", ".", "'", "n", "t", "\u0120", "\u2581", "\u0120a", "\u2581a",
                          "<0xE2>", "<0x82>", "<0xAC>", "<0xF0>", "<|end|>", "<s>", "</s>"}) {
      if (auto id = tok->TokenToId(s)) interesting.push_back(*id);
    }
    for (int trial = 0; trial < 2000; ++trial) {
      std::vector<int32_t> ids;
      for (int i = 0, n = 1 + rng() % 12; i < n; ++i) {
        ids.push_back(rng() % 3 == 0 ? static_cast<int32_t>(rng() % 256)
                                     : interesting[rng() % interesting.size()]);
      }
      for (bool skip : {false, true}) {
        for (bool clean : {false, true}) {
          ExpectStreamEqualsDecode(*tok, ids,
                                   {.skip_special_tokens = skip, .clean_up_spaces = clean});
        }
      }
      if (HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace gpeserve::tokenizer
