#include "engine/tokenizer/regex.h"

#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::tokenizer {
namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

// The split patterns of the model tokenizers, as their tokenizer.json files spell them.
// GPT-2 (also ByteLevel's use_regex).
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3: case-insensitive contractions, digits in groups of at most three.
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen 2 / Qwen 3: as Llama 3 but one digit at a time.
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::shared_ptr<const Regex> MustCompile(std::string_view pattern) {
  auto regex = Regex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status();
  return regex.ok() ? *regex : Regex::Literal("\x01never\x01");
}

// The matched substrings, in order.
std::vector<std::string> Matches(const Regex& regex, std::string_view text) {
  std::vector<std::string> out;
  for (const auto& [begin, end] : regex.FindAll(text)) {
    out.emplace_back(text.substr(begin, end - begin));
  }
  return out;
}

bool IsCharBoundary(std::string_view text, size_t i) {
  return i == text.size() || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
}

// The documented shape of every FindAll result: non-empty, in order, non-overlapping ranges
// inside the text, starting and ending on character boundaries.
void ExpectWellFormed(const Ranges& ranges, std::string_view text) {
  size_t last_end = 0;
  for (const auto& [begin, end] : ranges) {
    EXPECT_LT(begin, end);
    EXPECT_GE(begin, last_end);
    EXPECT_LE(end, text.size());
    EXPECT_TRUE(IsCharBoundary(text, begin)) << begin;
    EXPECT_TRUE(IsCharBoundary(text, end)) << end;
    last_end = end;
  }
}

struct Case {
  std::string_view pattern;
  std::string text;
  std::vector<std::string> matches;
};

TEST(RegexTest, FindsNonOverlappingMatchesLeftToRight) {
  // Worked by hand: after "ab" the search resumes at offset 2, so the "b" inside "ab" is never
  // reported again.
  const auto re = MustCompile("ab|b");
  EXPECT_EQ(re->FindAll("abbab"), (Ranges{{0, 2}, {2, 3}, {3, 5}}));
  EXPECT_EQ(re->FindAll("xyz"), Ranges{});
  EXPECT_EQ(re->FindAll(""), Ranges{});
  // Byte offsets, not character offsets: "é" is two bytes.
  EXPECT_EQ(MustCompile("b")->FindAll("\u00e9b\u00e9b"), (Ranges{{2, 3}, {5, 6}}));
}

TEST(RegexTest, AlternativesAreTriedInOrderNotLongestFirst) {
  // Oniguruma (Hugging Face) and PCRE2 are backtracking engines: the first alternative that
  // matches wins, even when a later one would match more. The split patterns rely on it
  // (e.g. "\s+(?!\S)" before "\s+").
  EXPECT_EQ(Matches(*MustCompile("a|ab"), "ab"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(Matches(*MustCompile("ab|a"), "ab"), (std::vector<std::string>{"ab"}));
}

TEST(RegexTest, EmptyMatchesAreSkipped) {
  EXPECT_EQ(MustCompile("a*")->FindAll("baac"), (Ranges{{1, 3}}));
  EXPECT_EQ(MustCompile("x*")->FindAll("abc"), Ranges{});
  EXPECT_EQ(MustCompile(R"(\b)")->FindAll("two words"), Ranges{});
  EXPECT_EQ(MustCompile("^")->FindAll(""), Ranges{});
}

TEST(RegexTest, EmptyMatchesStepOverWholeCharacters) {
  // "\p{N}*" matches empty before every letter; the search must then resume after the whole
  // letter (2 bytes for é and ü), never inside it. Worked by hand: "é1ü22" is
  // C3 A9 '1' C3 BC '2' '2', digits at bytes [2, 3) and [5, 7).
  const std::string text = "\u00e91\u00fc22";
  const Ranges ranges = MustCompile(R"(\p{N}*)")->FindAll(text);
  EXPECT_EQ(ranges, (Ranges{{2, 3}, {5, 7}}));
  ExpectWellFormed(ranges, text);
  // Four-byte characters too.
  const std::string emoji = "\U0001F642\U0001F642x";
  EXPECT_EQ(MustCompile("x*")->FindAll(emoji), (Ranges{{8, 9}}));
}

TEST(RegexTest, UnicodeClassesMatchHuggingFace) {
  // Expected values are Hugging Face tokenizers' (0.23.3, Oniguruma): the matches of
  // Split(Regex(pattern), "removed", invert=True).pre_tokenize_str(text). Note \p{L} excludes
  // combining marks (Devanagari vowel signs), \p{N} includes other digits (Arabic-Indic,
  // fullwidth), letter numbers (Roman XII) and superscripts, and \s includes U+00A0, U+3000,
  // U+2028 and U+0085 but not U+200B.
  const std::vector<Case> cases = {
      {R"(\p{L}+)", "Hello world's 123 déjà-vu!", {"Hello", "world", "s", "déjà", "vu"}},
      {R"(\p{L}+)", "I'M   here\n\n  you'll\tsee  ", {"I", "M", "here", "you", "ll", "see"}},
      {R"(\p{L}+)", "He'S WE'LL they'Re", {"He", "S", "WE", "LL", "they", "Re"}},
      {R"(\p{L}+)", "日本語テキスト、中文：你好！", {"日本語テキスト", "中文", "你好"}},
      {R"(\p{L}+)", "Привет, мир! Ελληνικά 2024", {"Привет", "мир", "Ελληνικά"}},
      {R"(\p{L}+)", "नमस\u094Dत\u0947 द\u0941न\u093Fय\u093E", {"नमस", "त", "द", "न", "य"}},
      {R"(\p{L}+)", "مرحبا ١٢٣٤ 12345678", {"مرحبا"}},
      {R"(\p{L}+)", "x² Ⅻ ３４５６", {"x"}},
      {R"(\p{L}+)", "a\u00A0b\u3000c\u2028d\u0085e\u200Bf", {"a", "b", "c", "d", "e", "f"}},
      {R"(\p{L}+)", "🙂👍🏽 ok...\r\n\r\nend", {"ok", "end"}},
      {R"(\p{N}+)", "Hello world's 123 déjà-vu!", {"123"}},
      {R"(\p{N}+)", "I'M   here\n\n  you'll\tsee  ", {}},
      {R"(\p{N}+)", "He'S WE'LL they'Re", {}},
      {R"(\p{N}+)", "日本語テキスト、中文：你好！", {}},
      {R"(\p{N}+)", "Привет, мир! Ελληνικά 2024", {"2024"}},
      {R"(\p{N}+)", "नमस\u094Dत\u0947 द\u0941न\u093Fय\u093E", {}},
      {R"(\p{N}+)", "مرحبا ١٢٣٤ 12345678", {"١٢٣٤", "12345678"}},
      {R"(\p{N}+)", "x² Ⅻ ３４５６", {"²", "Ⅻ", "３４５６"}},
      {R"(\p{N}+)", "a\u00A0b\u3000c\u2028d\u0085e\u200Bf", {}},
      {R"(\p{N}+)", "🙂👍🏽 ok...\r\n\r\nend", {}},
      {R"(\s+)", "Hello world's 123 déjà-vu!", {" ", " ", " "}},
      {R"(\s+)", "I'M   here\n\n  you'll\tsee  ", {"   ", "\n\n  ", "\t", "  "}},
      {R"(\s+)", "He'S WE'LL they'Re", {" ", " "}},
      {R"(\s+)", "日本語テキスト、中文：你好！", {}},
      {R"(\s+)", "Привет, мир! Ελληνικά 2024", {" ", " ", " "}},
      {R"(\s+)", "नमस\u094Dत\u0947 द\u0941न\u093Fय\u093E", {" "}},
      {R"(\s+)", "مرحبا ١٢٣٤ 12345678", {" ", " "}},
      {R"(\s+)", "x² Ⅻ ３４５６", {" ", " "}},
      {R"(\s+)", "a\u00A0b\u3000c\u2028d\u0085e\u200Bf", {"\u00A0", "\u3000", "\u2028", "\u0085"}},
      {R"(\s+)", "🙂👍🏽 ok...\r\n\r\nend", {" ", "\r\n\r\n"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "pattern " << c.pattern << " text '" << c.text << "'");
    const auto re = MustCompile(c.pattern);
    EXPECT_EQ(Matches(*re, c.text), c.matches);
    ExpectWellFormed(re->FindAll(c.text), c.text);
  }
}

TEST(RegexTest, SplitPatternsMatchHuggingFace) {
  // Expected values are Hugging Face tokenizers' (0.23.3, Oniguruma), computed as above. They
  // cover: contractions ('s, 'll; case-sensitive in GPT-2, so "'S" is split there but kept in
  // Llama 3 and Qwen), whitespace runs that leave their last space to the next word
  // ("\s+(?!\S)"), newlines, CJK, Cyrillic, Greek, Devanagari, Arabic, number classes, exotic
  // spaces and emoji.
  const std::vector<Case> cases = {
      {kGpt2,
       "Hello world's 123 déjà-vu!",
       {"Hello", " world", "'s", " 123", " déjà", "-", "vu", "!"}},
      {kGpt2,
       "I'M   here\n\n  you'll\tsee  ",
       {"I", "'", "M", "  ", " here", "\n\n ", " you", "'ll", "\t", "see", "  "}},
      {kGpt2, "He'S WE'LL they'Re", {"He", "'", "S", " WE", "'", "LL", " they", "'", "Re"}},
      {kGpt2, "日本語テキスト、中文：你好！", {"日本語テキスト", "、", "中文", "：", "你好", "！"}},
      {kGpt2, "Привет, мир! Ελληνικά 2024", {"Привет", ",", " мир", "!", " Ελληνικά", " 2024"}},
      {kGpt2,
       "नमस\u094Dत\u0947 द\u0941न\u093Fय\u093E",
       {"नमस", "\u094D", "त", "\u0947", " द", "\u0941", "न", "\u093F", "य", "\u093E"}},
      {kGpt2, "مرحبا ١٢٣٤ 12345678", {"مرحبا", " ١٢٣٤", " 12345678"}},
      {kGpt2, "x² Ⅻ ３４５６", {"x", "²", " Ⅻ", " ３４５６"}},
      {kGpt2,
       "a\u00A0b\u3000c\u2028d\u0085e\u200Bf",
       {"a", "\u00A0", "b", "\u3000", "c", "\u2028", "d", "\u0085", "e", "\u200B", "f"}},
      {kGpt2,
       "🙂👍🏽 ok...\r\n\r\nend",
       {"🙂👍🏽", " ok", "...", "\r\n\r", "\n", "end"}},
      {kLlama3,
       "Hello world's 123 déjà-vu!",
       {"Hello", " world", "'s", " ", "123", " déjà", "-vu", "!"}},
      {kLlama3,
       "I'M   here\n\n  you'll\tsee  ",
       {"I", "'M", "  ", " here", "\n\n", " ", " you", "'ll", "\tsee", "  "}},
      {kLlama3, "He'S WE'LL they'Re", {"He", "'S", " WE", "'LL", " they", "'Re"}},
      {kLlama3, "日本語テキスト、中文：你好！", {"日本語テキスト", "、中文", "：你好", "！"}},
      {kLlama3,
       "Привет, мир! Ελληνικά 2024",
       {"Привет", ",", " мир", "!", " Ελληνικά", " ", "202", "4"}},
      {kLlama3,
       "नमस\u094Dत\u0947 द\u0941न\u093Fय\u093E",
       {"नमस", "\u094Dत", "\u0947", " द", "\u0941न", "\u093Fय", "\u093E"}},
      {kLlama3, "مرحبا ١٢٣٤ 12345678", {"مرحبا", " ", "١٢٣", "٤", " ", "123", "456", "78"}},
      {kLlama3, "x² Ⅻ ３４５６", {"x", "²", " ", "Ⅻ", " ", "３４５", "６"}},
      {kLlama3,
       "a\u00A0b\u3000c\u2028d\u0085e\u200Bf",
       {"a", "\u00A0b", "\u3000c", "\u2028d", "\u0085e", "\u200Bf"}},
      {kLlama3, "🙂👍🏽 ok...\r\n\r\nend", {"🙂👍🏽", " ok", "...\r\n\r\n", "end"}},
      {kQwen2,
       "Hello world's 123 déjà-vu!",
       {"Hello", " world", "'s", " ", "1", "2", "3", " déjà", "-vu", "!"}},
      {kQwen2,
       "I'M   here\n\n  you'll\tsee  ",
       {"I", "'M", "  ", " here", "\n\n", " ", " you", "'ll", "\tsee", "  "}},
      {kQwen2, "He'S WE'LL they'Re", {"He", "'S", " WE", "'LL", " they", "'Re"}},
      {kQwen2, "日本語テキスト、中文：你好！", {"日本語テキスト", "、中文", "：你好", "！"}},
      {kQwen2,
       "Привет, мир! Ελληνικά 2024",
       {"Привет", ",", " мир", "!", " Ελληνικά", " ", "2", "0", "2", "4"}},
      {kQwen2,
       "नमस\u094Dत\u0947 द\u0941न\u093Fय\u093E",
       {"नमस", "\u094Dत", "\u0947", " द", "\u0941न", "\u093Fय", "\u093E"}},
      {kQwen2,
       "مرحبا ١٢٣٤ 12345678",
       {"مرحبا", " ", "١", "٢", "٣", "٤", " ", "1", "2", "3", "4", "5", "6", "7", "8"}},
      {kQwen2, "x² Ⅻ ３４５６", {"x", "²", " ", "Ⅻ", " ", "３", "４", "５", "６"}},
      {kQwen2,
       "a\u00A0b\u3000c\u2028d\u0085e\u200Bf",
       {"a", "\u00A0b", "\u3000c", "\u2028d", "\u0085e", "\u200Bf"}},
      {kQwen2, "🙂👍🏽 ok...\r\n\r\nend", {"🙂👍🏽", " ok", "...\r\n\r\n", "end"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "pattern " << c.pattern << " text '" << c.text << "'");
    EXPECT_EQ(Matches(*MustCompile(c.pattern), c.text), c.matches);
  }
}

TEST(RegexTest, WhitespaceRunsGiveTheirLastSpaceToTheNextWord) {
  // Worked by hand (and the same in Hugging Face): "\s+(?!\S)" backs off one space before a
  // word so that the word keeps its leading space; at the end of the text the whole run is one
  // piece.
  const auto gpt2 = MustCompile(kGpt2);
  EXPECT_EQ(Matches(*gpt2, "a   b  "), (std::vector<std::string>{"a", "  ", " b", "  "}));
  EXPECT_EQ(Matches(*gpt2, "a\n\n  b"), (std::vector<std::string>{"a", "\n\n ", " b"}));
  // Llama 3 ends a run at its last newline ("\s*[\r\n]+" comes first), so the spaces after
  // the newlines are a piece of their own.
  EXPECT_EQ(Matches(*MustCompile(kLlama3), "a\n\n  b"),
            (std::vector<std::string>{"a", "\n\n", " ", " b"}));
}

TEST(RegexTest, SplitPatternsCoverEveryByte) {
  // Every character is a letter, a number, whitespace or something else, and each split
  // pattern has an alternative for each, so the matches tile the text: the pieces joined give
  // the text back (the tokenizer loses nothing). Random texts over a mixed-script alphabet.
  const std::vector<std::string> alphabet = {
      "a",  "Z",   "'",      "s",      "ll",     " ",       "  ",         "\n",     "\r\n",
      "\t", "1",   "\u0663", "\u00b2", "\u00e9", "e\u0301", "\u4e2d",     "\u0416", "\u094d",
      "!",  "...", "\u00a0", "\u3000", "\u2028", "\u200b",  "\U0001F642", "-"};
  std::mt19937 rng(17);
  for (const std::string_view pattern : {kGpt2, kLlama3, kQwen2}) {
    const auto re = MustCompile(pattern);
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      const int n = std::uniform_int_distribution<>(0, 12)(rng);
      for (int i = 0; i < n; ++i) {
        text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
      }
      const Ranges ranges = re->FindAll(text);
      ExpectWellFormed(ranges, text);
      size_t covered = 0;
      for (const auto& [begin, end] : ranges) {
        ASSERT_EQ(begin, covered) << "gap in '" << text << "' for " << pattern;
        covered = end;
      }
      ASSERT_EQ(covered, text.size()) << "uncovered tail in '" << text << "' for " << pattern;
    }
  }
}

// The naive reference for Literal: scan every offset, take a match and jump past it.
Ranges NaiveFindAll(std::string_view needle, std::string_view text) {
  Ranges out;
  if (needle.empty()) return out;
  for (size_t i = 0; i + needle.size() <= text.size();) {
    if (text.substr(i, needle.size()) == needle) {
      out.emplace_back(i, i + needle.size());
      i += needle.size();
    } else {
      ++i;
    }
  }
  return out;
}

TEST(RegexTest, LiteralMatchesItsBytesNotRegexSyntax) {
  const auto dot_star = Regex::Literal(".*");
  EXPECT_EQ(dot_star->pattern(), ".*");
  EXPECT_EQ(dot_star->FindAll("a.*b.*"), (Ranges{{1, 3}, {4, 6}}));
  EXPECT_EQ(dot_star->FindAll("ab"), Ranges{});
  // Non-overlapping: "aa" in "aaaaa" twice, not four times.
  EXPECT_EQ(Regex::Literal("aa")->FindAll("aaaaa"), (Ranges{{0, 2}, {2, 4}}));
  // The empty literal matches nothing (empty matches are skipped, as for patterns).
  EXPECT_EQ(Regex::Literal("")->FindAll("abc"), Ranges{});
  EXPECT_EQ(Regex::Literal("\u2581")->FindAll("\u2581a\u2581"), (Ranges{{0, 3}, {4, 7}}));
}

TEST(RegexTest, LiteralAgreesWithNaiveScanAndQuotedPattern) {
  // Property: on random texts, Literal(needle), a naive scan and the compiled pattern
  // \Q needle \E all give the same matches.
  const std::vector<std::string> alphabet = {"a", "b", ".", "\u00e9", "\u2581"};
  std::mt19937 rng(5);
  auto random_string = [&](int min_len, int max_len) {
    std::string s;
    const int n = std::uniform_int_distribution<>(min_len, max_len)(rng);
    for (int i = 0; i < n; ++i) {
      s += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    }
    return s;
  };
  for (int trial = 0; trial < 500; ++trial) {
    const std::string needle = random_string(1, 3);
    const std::string text = random_string(0, 14);
    const Ranges got = Regex::Literal(needle)->FindAll(text);
    EXPECT_EQ(got, NaiveFindAll(needle, text)) << "'" << needle << "' in '" << text << "'";
    EXPECT_EQ(got, MustCompile("\\Q" + needle + "\\E")->FindAll(text))
        << "'" << needle << "' in '" << text << "'";
  }
}

TEST(RegexTest, CompileKeepsThePattern) { EXPECT_EQ(MustCompile(kLlama3)->pattern(), kLlama3); }

TEST(RegexTest, InvalidPatternsNamePcre2MessageAndOffset) {
  // Messages are PCRE2's (10.42, Debian 12); offsets are in bytes of the pattern.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(unclosed", "cannot compile regex '(unclosed' at offset 9: missing closing parenthesis"},
      {"a{2,1}",
       "cannot compile regex 'a{2,1}' at offset 5: numbers out of order in {} "
       "quantifier"},
      {R"(\p{Foo})", R"(cannot compile regex '\p{Foo}' at offset 7: unknown property after \P )"
                     R"(or \p)"},
      {"[z-a]",
       "cannot compile regex '[z-a]' at offset 3: range out of order in character "
       "class"},
      {"*a",
       "cannot compile regex '*a' at offset 0: quantifier does not follow a repeatable "
       "item"},
      // Patterns are UTF-8 too: a stray byte is refused where it stands.
      {"a\xff",
       "cannot compile regex 'a\xff' at offset 1: UTF-8 error: illegal byte (0xfe or "
       "0xff)"},
  };
  for (const auto& [pattern, message] : cases) {
    const auto regex = Regex::Compile(pattern);
    ASSERT_FALSE(regex.ok()) << pattern;
    EXPECT_EQ(regex.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(regex.status().message(), message);
  }
}

TEST(RegexTest, ConcurrentFindAllAgreesWithSequential) {
  // Documented as safe to share: each call has its own match data.
  const auto re = MustCompile(kQwen2);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Hello, w\u00f6rld's 12345 \u4e2d\u6587!\n ";
  const Ranges expected = re->FindAll(text);
  std::vector<Ranges> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) {
    threads.emplace_back([&re, &text, &g] {
      for (int i = 0; i < 20; ++i) g = re->FindAll(text);
    });
  }
  for (auto& t : threads) t.join();
  for (const Ranges& g : got) EXPECT_EQ(g, expected);
}

// Invalid UTF-8 text is outside FindAll's contract ("valid UTF-8"): it matches with
// PCRE2_NO_UTF_CHECK, under which PCRE2 leaves ill-formed input undefined, so there is no
// behaviour to test here; Tokenizer::Encode rejects such text before any regex sees it.

}  // namespace
}  // namespace gpeserve::tokenizer
