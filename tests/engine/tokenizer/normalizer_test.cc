#include "engine/tokenizer/normalizer.h"

#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer {
namespace {

using nlohmann::json;

const JsonLocation kAt{"t.json", "/normalizer"};

std::unique_ptr<Normalizer> MustBuild(const json& j) {
  auto n = NormalizerFromJson(j, kAt);
  EXPECT_TRUE(n.ok()) << n.status() << " for " << j.dump();
  return n.ok() ? *std::move(n) : nullptr;
}

struct Group {
  std::string normalizer;                                  // the "normalizer" object, as JSON text
  std::vector<std::pair<std::string, std::string>> cases;  // input, expected output
};

TEST(NormalizerTest, EveryTypeMatchesHuggingFace) {
  // Expected values are Hugging Face tokenizers' (0.23.3): the same JSON loaded as a
  // tokenizer.json "normalizer" and run with normalizer.normalize_str(input).
  const std::vector<Group> groups = {
      {R"({"type": "NFC"})",
       {{"e\u0301", "\u00E9"},
        {"\u212B", "\u00C5"},
        {"\u1100\u1161\u11A8", "\uAC01"},
        {"\uFB01", "\uFB01"},
        {"A\u0308\u0323", "\u1EA0\u0308"},
        {"plain ascii", "plain ascii"}}},
      {R"({"type": "NFD"})",
       {{"\u00E9", "e\u0301"},
        {"\uAC01", "\u1100\u1161\u11A8"},
        {"\uFB01", "\uFB01"},
        {"\u1E69", "s\u0323\u0307"}}},
      {R"({"type": "NFKC"})",
       {{"\uFB01", "fi"},
        {"\u2460", "1"},
        {"\u216B", "XII"},
        {"\uFF21\uFF22\uFF23", "ABC"},
        {"x\u00B2", "x2"},
        {"\uFF76\uFF9E", "\u30AC"},
        {"e\u0301", "\u00E9"}}},
      {R"({"type": "NFKD"})",
       {{"\uFB01\u00E9", "fie\u0301"}, {"\u2460", "1"}, {"\uAC00", "\u1100\u1161"}}},
      {R"({"type": "Lowercase"})",
       {{"HELLO W\u00DCRLD", "hello w\u00FCrld"},
        {"\u0130stanbul", "i\u0307stanbul"},
        {"\u1E9E", "\u00DF"},
        {"\u0410\u0411\u0412", "\u0430\u0431\u0432"},
        {"\uFB01 \u00DF", "\uFB01 \u00DF"},
        {"\u2160\u216B", "\u2170\u217B"},
        {"\U00010400", "\U00010428"},
        {"\u00C9t\u00C9", "\u00E9t\u00E9"}}},
      {R"({"type": "Prepend", "prepend": "\u2581"})",
       {{"hello", "\u2581hello"}, {"", ""}, {" a", "\u2581 a"}}},
      {R"({"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"})",
       {{"a b  c ", "a\u2581b\u2581\u2581c\u2581"}, {"", ""}}},
      {R"({"type": "Replace", "pattern": {"String": "aa"}, "content": "b"})",
       {{"aaa", "ba"}, {"aaaa", "bb"}}},
      {R"({"type": "Replace", "pattern": {"String": "."}, "content": "!"})",
       {{"a.b.c", "a!b!c"}, {"abc", "abc"}}},
      {R"({"type": "Replace", "pattern": {"String": "-"}, "content": ""})", {{"a-b--c", "abc"}}},
      {R"({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "})",
       {{"a \t\n b\u3000\u00A0c", "a b c"}}},
      {R"({"type": "Replace", "pattern": {"Regex": "\\p{N}+"}, "content": "#"})",
       {{"x12 y\u0663\u0664 \u216B", "x# y# #"}}},
      {R"({"type": "Strip", "strip_left": true, "strip_right": true})",
       {{"  hi  ", "hi"},
        {"\u00A0\u3000hi\u2028\u0085", "hi"},
        {"\u200Bhi\u200B", "\u200Bhi\u200B"},
        {"   ", ""},
        {"", ""},
        {"\ta b\n", "a b"},
        {"\u00E9 ", "\u00E9"}}},
      {R"({"type": "Strip", "strip_left": true, "strip_right": false})",
       {{"  hi  ", "hi  "}, {"\u00A0\u3000hi\u2028\u0085", "hi\u2028\u0085"}, {"   ", ""}}},
      {R"({"type": "Strip", "strip_left": false, "strip_right": true})",
       {{"  hi  ", "  hi"},
        {"\u00A0\u3000hi\u2028\u0085", "\u00A0\u3000hi"},
        {"   ", ""},
        {"\u00E9\u3000", "\u00E9"}}},
      {R"({"type": "Sequence", "normalizers": [)"
       R"({"type": "Prepend", "prepend": "\u2581"}, )"
       R"({"type": "Replace", "pattern": {"String": " "}, )"
       R"("content": "\u2581"}]})",
       {{"Hello world", "\u2581Hello\u2581world"}, {"", ""}}},
      {R"({"type": "Sequence", "normalizers": [)"
       R"({"type": "Lowercase"}, )"
       R"({"type": "Replace", "pattern": {"String": "a"}, )"
       R"("content": "X"}]})",
       {{"Aa", "XX"}}},
      {R"({"type": "Sequence", "normalizers": [)"
       R"({"type": "Replace", "pattern": {"String": "a"}, )"
       R"("content": "X"}, )"
       R"({"type": "Lowercase"}]})",
       {{"Aa", "ax"}}},
      {R"({"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]})",
       {{"\uFF21\u216B\uFB01", "axiifi"}}},
      {R"({"type": "Sequence", "normalizers": []})", {{"Abc ", "Abc "}}},
  };
  for (const Group& g : groups) {
    SCOPED_TRACE(g.normalizer);
    const auto n = MustBuild(json::parse(g.normalizer));
    ASSERT_NE(n, nullptr);
    for (const auto& [input, expected] : g.cases) {
      EXPECT_EQ(n->Normalize(input), expected) << "input '" << input << "'";
    }
  }
}

// Hugging Face lower-cases character by character (Rust's char::to_lowercase): full mappings
// (U+0130 gives two code points) without context, so every capital sigma becomes U+03C3, also
// word-finally where ICU's string mapping would pick the final form U+03C2. Expected values are
// Hugging Face's (0.23.3).
TEST(NormalizerTest, LowercaseMapsEachCharacterAloneAsHuggingFace) {
  const auto n = MustBuild({{"type", "Lowercase"}});
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->Normalize("\u03a3\u0391\u03a3 \u039f\u0394\u039f\u03a3"),
            "\u03c3\u03b1\u03c3 \u03bf\u03b4\u03bf\u03c3");
  EXPECT_EQ(n->Normalize("ABC\u03a3."), "abc\u03c3.");
  EXPECT_EQ(n->Normalize("\u0130stanbul"), "i\u0307stanbul");
  EXPECT_EQ(n->Normalize("\u1e9eTRASSE"), "\u00dftrasse");
}

TEST(NormalizerTest, Llama2NormalizerMarksEverySpace) {
  // The normalizer of Llama 2's tokenizer.json (a SentencePiece conversion), worked by hand:
  // prepend one U+2581 and turn every space into U+2581.
  const auto n = MustBuild(json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})"));
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->Normalize("Hey  you"), "\u2581Hey\u2581\u2581you");
  EXPECT_EQ(n->Normalize(" "), "\u2581\u2581");
  EXPECT_EQ(n->Normalize(""), "");  // Prepend leaves empty text empty
}

TEST(NormalizerTest, SequenceIsCompositionInOrder) {
  // Property: Sequence[a, b] on any text equals b applied to a's output (a naive composition),
  // for every ordered pair of these steps, on random mixed-script texts.
  const std::vector<json> steps = {
      {{"type", "NFC"}},
      {{"type", "NFD"}},
      {{"type", "NFKC"}},
      {{"type", "Lowercase"}},
      {{"type", "Prepend"}, {"prepend", "\u2581"}},
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}},
      {{"type", "Replace"}, {"pattern", {{"Regex", R"(\p{Lu})"}}}, {"content", "U"}},
      {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
  };
  const std::vector<std::string> alphabet = {
      "A", "b", " ", "  ", "\u00c9", "e\u0301", "\ufb01", "\u3000", "\u2581", "\u0130", "1"};
  std::mt19937 rng(3);
  for (const json& a : steps) {
    for (const json& b : steps) {
      const auto first = MustBuild(a);
      const auto second = MustBuild(b);
      const auto seq = MustBuild({{"type", "Sequence"}, {"normalizers", {a, b}}});
      ASSERT_TRUE(first && second && seq);
      for (int trial = 0; trial < 20; ++trial) {
        std::string text;
        const int n = std::uniform_int_distribution<>(0, 6)(rng);
        for (int i = 0; i < n; ++i) {
          text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
        }
        EXPECT_EQ(seq->Normalize(text), second->Normalize(first->Normalize(text)))
            << a.dump() << " then " << b.dump() << " on '" << text << "'";
      }
    }
  }
}

TEST(NormalizerTest, UnicodeFormsAreIdempotent) {
  // Normalizing twice changes nothing (the second pass sees normalized text).
  const std::vector<std::string> texts = {"e\u0301\u212b", "\ufb01\u2460\uac01", "A\u0308\u0323",
                                          "\u1e69 \uff76\uff9e"};
  for (const char* form : {"NFC", "NFD", "NFKC", "NFKD"}) {
    const auto n = MustBuild({{"type", form}});
    ASSERT_NE(n, nullptr);
    for (const std::string& t : texts) {
      const std::string once = n->Normalize(t);
      EXPECT_EQ(n->Normalize(once), once) << form << " on '" << t << "'";
    }
  }
}

struct ErrorCase {
  std::string normalizer;  // JSON text
  absl::StatusCode code;
  std::string message;
};

TEST(NormalizerTest, BadJsonNamesThePathAndTheProblem) {
  const std::vector<ErrorCase> cases = {
      {R"("NFC")", absl::StatusCode::kInvalidArgument,
       "t.json: /normalizer: expected a normalizer object"},
      {R"({})", absl::StatusCode::kInvalidArgument, "t.json: /normalizer/type: expected a string"},
      {R"({"type": 3})", absl::StatusCode::kInvalidArgument,
       "t.json: /normalizer/type: expected a string"},
      {R"({"type": "BertNormalizer"})", absl::StatusCode::kUnimplemented,
       "t.json: /normalizer/type: unsupported normalizer 'BertNormalizer'"},
      {R"({"type": "Sequence"})", absl::StatusCode::kInvalidArgument,
       "t.json: /normalizer/normalizers: expected an array"},
      {R"({"type": "Sequence", "normalizers": {"type": "NFC"}})",
       absl::StatusCode::kInvalidArgument, "t.json: /normalizer/normalizers: expected an array"},
      {R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Precompiled"}]})",
       absl::StatusCode::kUnimplemented,
       "t.json: /normalizer/normalizers/1/type: unsupported normalizer 'Precompiled'"},
      {R"({"type": "Sequence", "normalizers": [
          {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Prepend"}]}]})",
       absl::StatusCode::kInvalidArgument,
       "t.json: /normalizer/normalizers/0/normalizers/1/prepend: expected a string"},
      {R"({"type": "Prepend", "prepend": 1})", absl::StatusCode::kInvalidArgument,
       "t.json: /normalizer/prepend: expected a string"},
      {R"({"type": "Replace", "content": "x"})", absl::StatusCode::kInvalidArgument,
       "t.json: /normalizer/pattern: expected an object"},
      {R"({"type": "Replace", "pattern": {"Glob": "*"}, "content": "x"})",
       absl::StatusCode::kInvalidArgument,
       R"(t.json: /normalizer/pattern: expected {"String": ...} or {"Regex": ...})"},
      {R"({"type": "Replace", "pattern": {"Regex": "(a"}, "content": "x"})",
       absl::StatusCode::kInvalidArgument,
       "t.json: /normalizer/pattern/Regex: cannot compile regex '(a' at offset 2: missing "
       "closing parenthesis"},
      {R"({"type": "Replace", "pattern": {"String": "a"}})", absl::StatusCode::kInvalidArgument,
       "t.json: /normalizer/content: expected a string"},
      // Hugging Face requires both Strip fields as booleans ("missing field", "invalid type").
      {R"({"type": "Strip", "strip_right": true})", absl::StatusCode::kInvalidArgument,
       "t.json: /normalizer/strip_left: expected a boolean"},
      {R"({"type": "Strip", "strip_left": true, "strip_right": "no"})",
       absl::StatusCode::kInvalidArgument, "t.json: /normalizer/strip_right: expected a boolean"},
  };
  for (const ErrorCase& c : cases) {
    const auto n = NormalizerFromJson(json::parse(c.normalizer), kAt);
    ASSERT_FALSE(n.ok()) << c.normalizer;
    EXPECT_EQ(n.status().code(), c.code) << c.normalizer;
    EXPECT_EQ(n.status().message(), c.message) << c.normalizer;
  }
}

TEST(NormalizerTest, ErrorAtTheRootNamesTheRoot) {
  const auto n = NormalizerFromJson(json::parse(R"([])"), {"t.json", ""});
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), "t.json: /: expected a normalizer object");
}

}  // namespace
}  // namespace gpeserve::tokenizer
