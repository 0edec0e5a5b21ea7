// The model gpeserve serves when no --model is given: until the trainer's default model
// replaces it, a `tiny` random-weight Qwen2 with a byte-level BPE tokenizer trained on a small
// built-in English text (ChatML special tokens, so the qwen2.5 profile fits). Its output is
// noise; it exists so that the server, the client and the API work out of the box.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace gpeserve::server {

// Writes the default model folder to `dir` (created if missing). Deterministic.
absl::Status WriteDefaultModel(const std::string& dir);

}  // namespace gpeserve::server
