#include "engine/tokenizer/pre_tokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace gpeserve::tokenizer {
namespace {

std::string Apply(const nlohmann::json& json, std::string text, bool first = true) {
  auto pre = PreTokenizerFromJson(json, {"t.json", "/pre_tokenizer"});
  EXPECT_TRUE(pre.ok()) << pre.status();
  std::vector<std::string> pieces = {std::move(text)};
  (*pre)->PreTokenize(&pieces, first);
  return absl::StrJoin(pieces, "|");
}

nlohmann::json SplitOn(const std::string& literal, const std::string& behavior,
                       bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"String", literal}}},
          {"behavior", behavior},
          {"invert", invert}};
}

TEST(PreTokenizerTest, SplitBehaviors) {
  EXPECT_EQ(Apply(SplitOn("-", "Removed"), "a-b--c-"), "a|b|c");
  EXPECT_EQ(Apply(SplitOn("-", "Isolated"), "a-b--c-"), "a|-|b|-|-|c|-");
  EXPECT_EQ(Apply(SplitOn("-", "MergedWithPrevious"), "-a-b--c"), "-|a-|b-|-|c");
  EXPECT_EQ(Apply(SplitOn("-", "MergedWithNext"), "a-b--c-"), "a|-b|-|-c|-");
  EXPECT_EQ(Apply(SplitOn("-", "Contiguous"), "a-b--c"), "a|-|b|--|c");
  EXPECT_EQ(Apply(SplitOn("-", "Removed", true), "a-b--c"), "-|-|-");  // each match kept alone
}

TEST(PreTokenizerTest, RegexSplitUsesUnicodeClasses) {
  const nlohmann::json split = {{"type", "Split"},
                                {"pattern", {{"Regex", R"(\p{L}+|\p{N}|\s+)"}}},
                                {"behavior", "Isolated"},
                                {"invert", false}};
  EXPECT_EQ(Apply(split, "Größe 42"), "Größe| |4|2");
  EXPECT_EQ(Apply(split, "你好\u3000世界"), "你好|\u3000|世界");
}

TEST(PreTokenizerTest, ByteLevelMapsBytesAndOptionallySplits) {
  const nlohmann::json plain = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  EXPECT_EQ(Apply(plain, "a b\n"), "a\u0120b\u010A");
  const nlohmann::json gpt2 = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(Apply(gpt2, "Hello world's"), "\u0120Hello|\u0120world|'s");
}

TEST(PreTokenizerTest, MetaspacePrependSchemes) {
  nlohmann::json meta = {{"type", "Metaspace"},
                         {"replacement", "\u2581"},
                         {"prepend_scheme", "always"},
                         {"split", true}};
  EXPECT_EQ(Apply(meta, "Hey friend"), "\u2581Hey|\u2581friend");
  meta["prepend_scheme"] = "first";
  EXPECT_EQ(Apply(meta, "Hey", false), "Hey");
  EXPECT_EQ(Apply(meta, "Hey", true), "\u2581Hey");
  meta["split"] = false;
  meta["prepend_scheme"] = "never";
  EXPECT_EQ(Apply(meta, "Hey friend"), "Hey\u2581friend");
}

TEST(PreTokenizerTest, SequenceAppliesStepsInOrder) {
  const nlohmann::json seq = {
      {"type", "Sequence"}, {"pretokenizers", {SplitOn(" ", "Removed"), SplitOn("b", "Isolated")}}};
  EXPECT_EQ(Apply(seq, "abc abc"), "a|b|c|a|b|c");
}

TEST(PreTokenizerTest, UnsupportedTypeNamesJsonPath) {
  const nlohmann::json seq = {
      {"type", "Sequence"},
      {"pretokenizers", {SplitOn(" ", "Removed"), {{"type", "BertPreTokenizer"}}}}};
  auto pre = PreTokenizerFromJson(seq, {"t.json", "/pre_tokenizer"});
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(pre.status().message(),
            "t.json: /pre_tokenizer/pretokenizers/1/type: unsupported pre-tokenizer "
            "'BertPreTokenizer'");
}

}  // namespace
}  // namespace gpeserve::tokenizer
