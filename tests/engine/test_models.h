// Random-weight models for tests: tiny models (Qwen2 unless a family is given) with a byte-level
// tokenizer that knows the chat markers <|im_start|> (256) and <|im_end|> (257, the eos).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/make_model.h"
#include "engine/model/model.h"

namespace gpeserve::testing {

// The device test models load on: $GPESERVE_TEST_DEVICE, default "cpu" (the cuda-labelled
// tests run the engine's invariant tests again with "cuda").
std::string TestDevice();

// Written under the test temp dir, loaded (fp32, 2 threads, on TestDevice()), and the folder
// removed. `family`: the architecture and its options (make-model's; seed, tokenizer and init
// are set here).
std::shared_ptr<const model::Model> TinyChatModel(uint64_t seed,
                                                  model::MakeModelOptions family = {});

// Writes the same model folder to `dir` (kept) and returns its path.
std::string WriteTinyChatModel(uint64_t seed, const std::string& dir,
                               model::MakeModelOptions family = {});

// Every architecture's tiny variant for the engine invariants, as the sessions of these tests
// stress them: sliding windows shorter than a session's prompt (so a window cuts source and
// target keys), Gemma 2's soft-capping active, Phi-3's longrope switching from the short to
// the long factors inside a session, Qwen 3's windowed upper layer.
std::vector<model::MakeModelOptions> TestFamilies();

}  // namespace gpeserve::testing
