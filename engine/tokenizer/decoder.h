// Decoders: turn a sequence of token strings back into text (the "decoder" object of
// tokenizer.json). Each stage maps a list of token strings to a new list; the final text is
// their concatenation.
//
// Thread-safety: immutable after construction; DecodeChain may be called concurrently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
  // True if a ByteFallback stage is part of this decoder: then the text of a run of "<0xHH>"
  // tokens depends on the whole run (an ill-formed run becomes one U+FFFD per token).
  virtual bool HasByteFallback() const { return false; }
};

// Supported types: Sequence, ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace.
// Others: Unimplemented naming the JSON path.
absl::StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const nlohmann::json& json,
                                                         const JsonLocation& at);

}  // namespace gpeserve::tokenizer
