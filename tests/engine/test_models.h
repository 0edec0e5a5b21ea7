// Random-weight models for tests: a tiny Qwen2 with a byte-level tokenizer that knows the
// chat markers <|im_start|> (256) and <|im_end|> (257, the eos).
#pragma once

#include <cstdint>
#include <memory>

#include "engine/model/model.h"

namespace gpeserve::testing {

// Written once per seed under the test temp dir, then loaded (fp32, 2 threads).
std::shared_ptr<const model::Model> TinyChatModel(uint64_t seed);

}  // namespace gpeserve::testing
