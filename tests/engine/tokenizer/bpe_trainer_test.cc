#include "engine/tokenizer/bpe_trainer.h"

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace gpeserve::tokenizer {
namespace {

std::shared_ptr<const Tokenizer> Load(const TrainedTokenizer& trained) {
  auto tok = Tokenizer::FromJson(trained.tokenizer.dump(), "trained/tokenizer.json",
                                 trained.config.dump(), "trained/tokenizer_config.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *tok : nullptr;
}

TEST(BpeTrainerTest, MergesMostFrequentPairFirst) {
  // "ab" occurs 6 times, "cd" 3 times: the first merge is a+b.
  const std::vector<std::string> texts = {"ab ab ab ab ab ab cd cd cd"};
  auto trained = TrainByteLevelBpe(texts, {.vocab_size = 300, .min_frequency = 2});
  ASSERT_TRUE(trained.ok()) << trained.status();
  const auto& merges = trained->tokenizer["model"]["merges"];
  ASSERT_GE(merges.size(), 2u);
  EXPECT_EQ(merges[0], nlohmann::json::array({"a", "b"}));
  // Space-prefixed words come next: " ab" (5 times) before " cd" (3 times).
  EXPECT_EQ(merges[1], nlohmann::json::array({"\u0120", "ab"}));
}

TEST(BpeTrainerTest, TrainedTokenizerCompressesAndRoundTrips) {
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) {
    texts.push_back("the dog sees the cat, weil der Hund die Katze sieht " + std::to_string(i));
  }
  auto trained = TrainByteLevelBpe(texts, {.vocab_size = 400});
  ASSERT_TRUE(trained.ok()) << trained.status();
  auto tok = Load(*trained);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 256 + trained->merges + 3);
  const std::string sentence = "the dog sees the cat";
  auto ids = tok->Encode(sentence);
  ASSERT_TRUE(ids.ok());
  EXPECT_LE(ids->size(), 5u);  // whole words were learned
  EXPECT_EQ(tok->Decode(*ids), sentence);
  EXPECT_EQ(*tok->Encode("<|im_start|>"), std::vector<int32_t>{*tok->TokenToId("<|im_start|>")});
  EXPECT_EQ(tok->eos_id(), tok->TokenToId("<|im_end|>"));
  // Unseen text still encodes (byte level) and round-trips.
  EXPECT_EQ(tok->Decode(*tok->Encode("Überraschung 😀")), "Überraschung 😀");
}

TEST(BpeTrainerTest, IsDeterministic) {
  const std::vector<std::string> texts = {"aa bb aa bb cc dd cc dd ee", "ff aa ff bb"};
  auto first = TrainByteLevelBpe(texts, {.vocab_size = 280, .min_frequency = 1});
  auto second = TrainByteLevelBpe(texts, {.vocab_size = 280, .min_frequency = 1});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->tokenizer.dump(), second->tokenizer.dump());
}

TEST(BpeTrainerTest, RejectsBadConfig) {
  EXPECT_EQ(TrainByteLevelBpe({"x"}, {.vocab_size = 100}).status().code(),
            absl::StatusCode::kInvalidArgument);
  BpeTrainerConfig config;
  config.eos_token = "</s>";
  EXPECT_EQ(TrainByteLevelBpe({"x"}, config).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainByteLevelBpe({"bad \xFF"}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpeserve::tokenizer
