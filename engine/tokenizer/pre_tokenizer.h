// Pre-tokenizers: split normalized text into the "words" that the model tokenizes one at a time
// (and, for byte-level models, map each byte to its printable stand-in). Built from the
// "pre_tokenizer" object of tokenizer.json.
//
// Thread-safety: immutable after construction; PreTokenize may be called concurrently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer {

// How a Split pre-tokenizer treats the matched delimiters (Hugging Face SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece of *pieces by its sub-pieces, in order; empty pieces are dropped.
  // `first_piece_is_text_start` is true when pieces->front() begins the input text (Metaspace's
  // prepend_scheme "first" needs it).
  virtual void PreTokenize(std::vector<std::string>* pieces,
                           bool first_piece_is_text_start) const = 0;
};

// Supported types: Sequence, Split, ByteLevel, Metaspace, Digits, WhitespaceSplit. Others:
// Unimplemented naming the JSON path.
absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const nlohmann::json& json,
                                                                   const JsonLocation& at);

}  // namespace gpeserve::tokenizer
