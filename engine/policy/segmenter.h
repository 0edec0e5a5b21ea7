// Where a long-form session's unbounded source word stream is cut into segments (issue 20;
// docs/GPE.md): after a word that ends in a sentence mark (". ? !" by default, configurable;
// closing quotes and brackets after the mark are looked through, so `end."` and `(so!)` end a
// sentence), at an explicit boundary from the client (upstream speech endpointing), or when a
// segment reaches max_segment_words (a forced cut). Each segment then runs as a one-sentence
// session does. Abbreviations ("Dr.") end a segment too: the client that knows better sends
// words without a mark or its own boundaries. Plain C++.
//
// Thread-safety: not thread-safe; one instance per session.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gpeserve::policy {

struct SegmenterConfig {
  // Marks that end a sentence when a word ends in one (each a UTF-8 string, e.g. "。").
  std::vector<std::string> sentence_marks = {".", "?", "!"};
  int64_t max_segment_words = 200;  // a segment is cut after this many words (>= 1)
};

// Why a segment ended.
enum class CutReason { kSentenceMark, kBoundary, kMaxWords, kEndOfSource };
// "sentence_mark", "boundary", "max_words", "end_of_source".
const char* CutReasonName(CutReason reason);

class Segmenter {
 public:
  // InvalidArgument: max_segment_words < 1, or an empty or whitespace-containing mark.
  static absl::StatusOr<Segmenter> Create(SegmenterConfig config);

  // The next word of the stream; the reason when the segment ends with it.
  std::optional<CutReason> AddWord(std::string_view word);
  // The client's boundary after the words so far: ends the open segment (kBoundary); nothing
  // when the segment was cut right there already (the last word ended a sentence, or reached
  // max_segment_words: an ASR endpoint after a full stop is no error). InvalidArgument when no
  // word arrived since the last boundary (or the start): an empty segment is a client error.
  absl::StatusOr<std::optional<CutReason>> Boundary();
  // Words of the open segment (0 right after a cut).
  int64_t open_words() const { return open_words_; }
  // Segments cut so far.
  int64_t segments() const { return segments_; }
  // Whether `word` ends in one of the marks (quotes and brackets after it looked through).
  bool EndsSentence(std::string_view word) const;

 private:
  explicit Segmenter(SegmenterConfig config) : config_(std::move(config)) {}
  CutReason Cut(CutReason reason);

  SegmenterConfig config_;
  int64_t open_words_ = 0;
  int64_t segments_ = 0;
  int64_t since_boundary_ = 0;  // words since the last boundary (or the start)
  int64_t boundaries_ = 0;
};

}  // namespace gpeserve::policy
