// Normalizers: the first stage of encoding, applied to each piece of text between added tokens
// (as Hugging Face tokenizers does). Built from the "normalizer" object of tokenizer.json.
//
// Thread-safety: immutable after construction; Normalize may be called concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Returns the normalized form of valid UTF-8 `text`.
  virtual std::string Normalize(std::string_view text) const = 0;
};

// Builds the normalizer described by `json` (a JSON object with a "type"). Supported types:
// Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace (String or Regex pattern), Strip.
// Others: Unimplemented naming the JSON path.
absl::StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const nlohmann::json& json,
                                                               const JsonLocation& at);

}  // namespace gpeserve::tokenizer
