// Streaming detokenization: feed token ids one at a time as a model produces them, get text
// pieces whose concatenation equals Tokenizer::Decode(all ids) with the same options. A piece
// never ends inside a UTF-8 character: bytes are held back until the character is complete
// (and when clean-up is on, up to three characters after a space are held back until it is
// known whether " n't", " ." ... will drop that space).
//
// Cost per Push is proportional to the tokens since the last emitted piece, not to the whole
// sequence.
//
// Thread-safety: not thread-safe; one instance per stream. The Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace gpeserve::tokenizer {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, const DecodeOptions& options = {});

  // Adds one id; returns the text that became final (possibly empty).
  std::string Push(int32_t id);
  // End of stream: returns everything still held back.
  std::string Flush();

 private:
  // Raw (not cleaned-up) text made final by the ids so far.
  std::string PushRaw(int32_t id);
  // Passes raw text through the streaming clean-up; `final` releases everything.
  std::string CleanUp(const std::string& raw, bool final);

  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool clean_up_;
  // Window of ids: the ids of the last emitted piece (context, so that decoder rules applying
  // to the first token behave as in a full decode) followed by ids not yet emitted.
  std::vector<int32_t> window_;
  size_t emitted_in_window_ = 0;  // window_[0, emitted_in_window_) are emitted
  std::string emitted_text_;      // DecodeRaw(window_[0, emitted_in_window_))
  std::string pending_clean_;     // raw text held back by the clean-up stage
};

}  // namespace gpeserve::tokenizer
