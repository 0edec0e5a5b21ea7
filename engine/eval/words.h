// Words of a text as evaluation counts them: |Y| for AL and LAAL is the number of words of a
// session's output. Whitespace is what Python's str.split() splits on (ASCII whitespace, the
// separators U+001C..U+001F, and Unicode's spaces and line separators), because the reference
// evaluation code and SimulEval count words that way; a gpe eval and a gpe-client eval of the
// same outputs then give the same latency as they do.
//
// Every place that counts or cuts words uses these: source words in gpe eval, gpe-client and
// the server's `text` chunks, and |Y| for latency.
//
// Thread-safety: pure functions; a WordStream is used by one thread at a time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpeserve::eval {

// The words of UTF-8 `text`, in order (views into it). Invalid bytes are kept inside words.
std::vector<std::string_view> SplitWords(std::string_view text);

// True when `text` is exactly one word (non-empty, no whitespace).
bool IsOneWord(std::string_view text);

// The words of text that arrives in pieces, each of whole UTF-8 characters: a word that runs
// to the end of a piece waits for the next piece (or Finish), so the words are those
// SplitWords finds in all the pieces joined.
class WordStream {
 public:
  // The words completed by `piece`.
  std::vector<std::string> Add(std::string_view piece);
  // The word cut at the end of the last piece, if any; the stream is empty after.
  std::vector<std::string> Finish();
  // The word waiting for more text ("" when none).
  const std::string& partial() const { return partial_; }

 private:
  std::string partial_;
};

}  // namespace gpeserve::eval
