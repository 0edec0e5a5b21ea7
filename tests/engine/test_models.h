// Random-weight models for tests: a tiny Qwen2 with a byte-level tokenizer that knows the
// chat markers <|im_start|> (256) and <|im_end|> (257, the eos).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/model/model.h"

namespace gpeserve::testing {

// Written under the test temp dir, loaded (fp32, 2 threads), and the folder removed.
std::shared_ptr<const model::Model> TinyChatModel(uint64_t seed);

// Writes the same model folder to `dir` (kept) and returns its path.
std::string WriteTinyChatModel(uint64_t seed, const std::string& dir);

}  // namespace gpeserve::testing
