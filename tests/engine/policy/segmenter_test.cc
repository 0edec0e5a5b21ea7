// The long-form segmenter against cuts worked out by hand: sentence marks (quotes and brackets
// after them looked through, multi-byte marks), forced cuts at max_segment_words, the client's
// boundaries, and the errors a client can cause.
#include "engine/policy/segmenter.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::policy {
namespace {

// The cut after each word of `words` ("" where none), '|' a client boundary.
std::vector<std::string> Cuts(Segmenter& s, const std::vector<std::string>& words) {
  std::vector<std::string> cuts;
  for (const std::string& w : words) {
    if (w == "|") {
      auto cut = s.Boundary();
      cuts.push_back(!cut.ok() ? "error" : *cut ? CutReasonName(**cut) : "none");
      continue;
    }
    const std::optional<CutReason> cut = s.AddWord(w);
    cuts.push_back(cut ? CutReasonName(*cut) : "");
  }
  return cuts;
}

TEST(SegmenterTest, CutsAfterSentenceMarksLookingThroughClosers) {
  auto s = Segmenter::Create({});
  ASSERT_TRUE(s.ok());
  const std::vector<std::string> words = {
      "He",  "said",  "\"stop.\"",        "Why?", "(Because", "no!)",
      "3.5", "euros", "end.\xE2\x80\x9D", "\"",   "e.g",      "."};
  const std::vector<std::string> want = {
      "", "", "sentence_mark", "sentence_mark", "", "sentence_mark", "", "", "sentence_mark",
      "", "", "sentence_mark"};
  EXPECT_EQ(Cuts(*s, words), want);
  EXPECT_EQ(s->segments(), 5);
  EXPECT_EQ(s->open_words(), 0);
}

TEST(SegmenterTest, ConfiguredMarksAndForcedCuts) {
  auto s = Segmenter::Create({.sentence_marks = {"\xE3\x80\x82", ";"}, .max_segment_words = 3});
  ASSERT_TRUE(s.ok());
  // "." is not a mark here; the CJK full stop and ';' are; every third word is forced.
  EXPECT_EQ(Cuts(*s, {"a.", "b", "c", "d\xE3\x80\x82", "e;", "f", "g", "h", "i"}),
            (std::vector<std::string>{"", "", "max_words", "sentence_mark", "sentence_mark", "", "",
                                      "max_words", ""}));
  EXPECT_EQ(s->open_words(), 1);
}

TEST(SegmenterTest, ClientBoundariesAndTheirErrors) {
  auto s = Segmenter::Create({});
  ASSERT_TRUE(s.ok());
  // A boundary before any word, or right after another boundary, is an error that changes
  // nothing; one right after a sentence mark's cut does nothing (the segment ended there).
  auto first = s->Boundary();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(first.status().message().find("start of the source"), std::string::npos);
  EXPECT_EQ(Cuts(*s, {"one", "two", "|", "|", "three.", "|", "four", "|", "five.", "six", "|"}),
            (std::vector<std::string>{"", "", "boundary", "error", "sentence_mark", "none", "",
                                      "boundary", "sentence_mark", "", "boundary"}));
  EXPECT_EQ(s->segments(), 5);
  auto again = s->Boundary();
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("last boundary"), std::string::npos);

  for (SegmenterConfig bad :
       {SegmenterConfig{.max_segment_words = 0}, SegmenterConfig{.sentence_marks = {""}},
        SegmenterConfig{.sentence_marks = {". "}}}) {
    auto refused = Segmenter::Create(bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace gpeserve::policy
