#include "engine/tokenizer/tokenizer.h"

#include <cstdio>
#include <fstream>
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

TEST(TokenizerTest, ByteLevelRoundTripsAnyText) {
  auto tok = Build(ByteLevelJson({"he", "hel", "hell", "hello"},
                                 {{"h", "e"}, {"he", "l"}, {"hel", "l"}, {"hell", "o"}}));
  const std::string text = "hello, w\u00f6rld \xF0\x9F\x98\x80\n\ttabs";
  auto ids = tok->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*ids)[0], *tok->TokenToId("hello"));
  EXPECT_EQ(tok->Decode(*ids), text);
}

TEST(TokenizerTest, RecognisesAddedTokensAndSkipsSpecialOnesWhenDecoding) {
  auto tok =
      Build(ByteLevelJson({}, {}, {Added(300, "<|im_start|>", true), Added(301, "<tool>", false)}));
  auto ids = tok->Encode("a<|im_start|>b<tool>");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{'a', 300, 'b', 301}));
  EXPECT_EQ(tok->Decode(*ids), "a<|im_start|>b<tool>");
  EXPECT_EQ(tok->Decode(*ids, {.skip_special_tokens = true}), "ab<tool>");
  EXPECT_TRUE(tok->IsSpecial(300));
  EXPECT_FALSE(tok->IsSpecial(301));
  // Untrusted text can be kept from producing control tokens.
  auto plain = tok->Encode("<|im_start|>", {.split_special_tokens = true});
  EXPECT_EQ(plain->size(), std::string("<|im_start|>").size());
}

TEST(TokenizerTest, NormalizedAddedTokensMatchAfterNormalization) {
  nlohmann::json json = ByteFallbackJson({"\u2581", "x"}, {});
  json["added_tokens"].push_back(Added(400, "yo", false, false, false, false, true));
  auto tok = Build(json);
  // The token's pattern is its normalized content "▁yo", found in the normalized "▁x▁yo".
  EXPECT_EQ(*tok->Encode("x yo"),
            (std::vector<int32_t>{*tok->TokenToId("\u2581"), *tok->TokenToId("x"), 400}));
}

TEST(TokenizerTest, AddSpecialTokensFollowsConfigThenTemplate) {
  nlohmann::json json = ByteFallbackJson({"\u2581", "a"}, {});
  json["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  const std::vector<int32_t> body = *Build(json)->Encode("a");
  EXPECT_EQ(*Build(json)->Encode("a", {.add_special_tokens = true}),
            (std::vector<int32_t>{1, body[0], body[1]}));
  const nlohmann::json config = {{"bos_token", "<s>"},
                                 {"eos_token", {{"content", "</s>"}}},
                                 {"add_bos_token", false},
                                 {"add_eos_token", true}};
  auto tok = Build(json, config);
  EXPECT_EQ(*tok->Encode("a", {.add_special_tokens = true}),
            (std::vector<int32_t>{body[0], body[1], 2}));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
}

TEST(TokenizerTest, CleanUpFollowsConfigUnlessOverridden) {
  auto plain = Build(ByteLevelJson({}, {}));
  const std::vector<int32_t> ids = *plain->Encode("Is n't it ? Yes .");
  EXPECT_EQ(plain->Decode(ids), "Is n't it ? Yes .");
  EXPECT_EQ(plain->Decode(ids, {.clean_up_spaces = true}), "Isn't it? Yes.");
  auto cleaning = Build(ByteLevelJson({}, {}), {{"clean_up_tokenization_spaces", true}});
  EXPECT_EQ(cleaning->Decode(ids), "Isn't it? Yes.");
  EXPECT_EQ(cleaning->Decode(ids, {.clean_up_spaces = false}), "Is n't it ? Yes .");
}

TEST(TokenizerTest, InvalidUtf8IsRejectedWithOffset) {
  auto tok = Build(ByteLevelJson({}, {}));
  auto ids = tok->Encode("ok\xC3(");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("byte offset 2"), std::string::npos) << ids.status();
}

TEST(TokenizerTest, ArbitraryBytesNeverCrashAndValidTextRoundTrips) {
  auto byte_level = Build(ByteLevelJson({"ab", "abc"}, {{"a", "b"}, {"ab", "c"}},
                                        nlohmann::json::array({Added(300, "<x>", true)})));
  auto fallback = Build(ByteFallbackJson({"\u2581", "a", "b", "\u2581a"}, {{"\u2581", "a"}}));
  std::mt19937 rng(11);
  const std::string alphabet = "abc <x>\n\t\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xFF\x80";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    for (int i = 0, n = rng() % 24; i < n; ++i) text.push_back(alphabet[rng() % alphabet.size()]);
    const bool valid = ValidateUtf8(text).ok();
    for (const auto* tok : {byte_level.get(), fallback.get()}) {
      auto ids = tok->Encode(text);
      ASSERT_EQ(ids.ok(), valid) << text;
      if (!valid) {
        EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
        continue;
      }
      const std::string decoded = tok->Decode(*ids);
      EXPECT_TRUE(ValidateUtf8(decoded).ok());
      if (tok == byte_level.get()) EXPECT_EQ(decoded, text);
    }
  }
}

TEST(TokenizerTest, CheckIdsNamesFirstUnknownId) {
  auto tok = Build(ByteLevelJson({}, {}));
  EXPECT_TRUE(tok->CheckIds(std::vector<int32_t>{0, 255}).ok());
  const absl::Status s = tok->CheckIds(std::vector<int32_t>{1, 9999});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token id 9999 at index 1"), std::string::npos) << s;
}

struct LoadErrorCase {
  std::string name;
  nlohmann::json patch;  // merged into a valid tokenizer.json (null values erase keys)
  absl::StatusCode code;
  std::string message_part;
};

TEST(TokenizerTest, LoadErrorsNameFileAndJsonPath) {
  using nlohmann::json;
  const std::vector<LoadErrorCase> cases = {
      {"unknown model", json::parse(R"({"model": {"type": "WordPiece"}})"),
       absl::StatusCode::kUnimplemented, "t.json: /model/type: unsupported model type 'WordPiece'"},
      {"missing model", json::parse(R"({"model": null})"), absl::StatusCode::kInvalidArgument,
       "t.json: /model: missing"},
      {"normalizer", json::parse(R"({"normalizer": {"type": "Precompiled"}})"),
       absl::StatusCode::kUnimplemented, "t.json: /normalizer/type: unsupported normalizer"},
      {"nested decoder", json::parse(R"({"decoder": {"type": "Sequence",
                                   "decoders": [{"type": "Fuse"}, {"type": "CTC"}]}})"),
       absl::StatusCode::kUnimplemented, "t.json: /decoder/decoders/1/type: unsupported decoder"},
      {"bad regex",
       json::parse(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"},
                                         "behavior": "Isolated"}})"),
       absl::StatusCode::kInvalidArgument, "t.json: /pre_tokenizer/pattern/Regex: cannot compile"},
      {"added token without id", json::parse(R"({"added_tokens": [{"content": "<x>"}]})"),
       absl::StatusCode::kInvalidArgument, "t.json: /added_tokens/0/id"},
      {"post processor", json::parse(R"({"post_processor": {"type": "BertProcessing"}})"),
       absl::StatusCode::kUnimplemented, "t.json: /post_processor/type"},
      {"dropout", json::parse(R"({"model": {"type": "BPE", "dropout": 0.1}})"),
       absl::StatusCode::kUnimplemented, "t.json: /model/dropout"},
  };
  for (const LoadErrorCase& c : cases) {
    nlohmann::json json = ByteLevelJson({}, {});
    if (c.patch.contains("model") && c.patch["model"].is_object()) {
      json["model"].update(c.patch["model"]);
    } else {
      json.merge_patch(c.patch);
    }
    auto tok = Tokenizer::FromJson(json.dump(), "t.json", "", "");
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_EQ(tok.status().code(), c.code) << c.name << ": " << tok.status();
    EXPECT_NE(tok.status().message().find(c.message_part), std::string::npos)
        << c.name << ": " << tok.status();
  }
}

// A fuzz finding (tests/fuzz/corpus/tokenizer_json/number_overflow.json): a number beyond a
// double's range made the JSON parser throw out_of_range, which escaped as a crash.
TEST(TokenizerTest, NumberBeyondDoubleRangeIsAnError) {
  auto tok = Tokenizer::FromJson(R"({"version": 1e99999})", "t.json", "", "");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << tok.status();
  EXPECT_NE(tok.status().message().find("t.json: "), std::string::npos) << tok.status();
  EXPECT_NE(tok.status().message().find("number overflow"), std::string::npos) << tok.status();
}

TEST(TokenizerTest, FileErrorsNameTheFile) {
  auto missing = Tokenizer::Load("/nonexistent/model");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/model/tokenizer.json"),
            std::string::npos);

  const std::string path = ::testing::TempDir() + "/broken_tokenizer.json";
  std::ofstream(path) << "{\"model\": [1, 2";
  auto broken = Tokenizer::LoadFiles(path, "");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(broken.status().message().find(path + ": not valid JSON"), std::string::npos)
      << broken.status();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gpeserve::tokenizer
