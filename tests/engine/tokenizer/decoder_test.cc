#include "engine/tokenizer/decoder.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::tokenizer {
namespace {

std::string Apply(const nlohmann::json& json, std::vector<std::string> tokens) {
  auto decoder = DecoderFromJson(json, {"t.json", "/decoder"});
  EXPECT_TRUE(decoder.ok()) << decoder.status();
  (*decoder)->DecodeChain(&tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

TEST(DecoderTest, ByteFallbackJoinsValidRunsAndReplacesEachByteOfInvalidOnes) {
  const nlohmann::json d = {{"type", "ByteFallback"}};
  EXPECT_EQ(Apply(d, {"a", "<0xE2>", "<0x82>", "<0xAC>", "b"}), "a\u20acb");
  EXPECT_EQ(Apply(d, {"a", "<0xE2>", "<0x82>", "b"}), "a\uFFFD\uFFFDb");
  EXPECT_EQ(Apply(d, {"<0x41>", "<0xZZ>"}), "A<0xZZ>");
}

TEST(DecoderTest, ByteLevelMapsBackAndPassesPlainAddedTokens) {
  const nlohmann::json d = {{"type", "ByteLevel"}};
  EXPECT_EQ(Apply(d, {"Hello", "\u0120w\u00c3\u00b6rld", "<|im_end|>", "\u010A"}),
            "Hello w\u00f6rld<|im_end|>\n");
  EXPECT_EQ(Apply(d, {"\u00e2\u0124"}), "\uFFFD");  // E2 82: truncated euro sign
}

TEST(DecoderTest, LlamaSequenceStripsOneLeadingSpace) {
  const nlohmann::json d = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(Apply(d, {"\u2581\u2581Hi", "\u2581there"}), " Hi there");
}

TEST(DecoderTest, MetaspaceDropsPrefixOnlyInFirstToken) {
  const nlohmann::json d = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(Apply(d, {"\u2581Hey", "\u2581friend"}), "Hey friend");
}

TEST(DecoderTest, UnsupportedTypeNamesJsonPath) {
  auto d = DecoderFromJson({{"type", "WordPiece"}}, {"t.json", "/decoder"});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "t.json: /decoder/type: unsupported decoder 'WordPiece'");
}

}  // namespace
}  // namespace gpeserve::tokenizer
