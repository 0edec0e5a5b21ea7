// Small tokenizer.json documents built in code, for unit tests that need a Tokenizer without
// the real vocabularies.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer::testing {

// A byte-level BPE tokenizer (GPT-2 style, no regex split) over `vocab` (byte-level strings)
// plus all 256 byte characters, with `merges` in rank order and the given added tokens.
nlohmann::json ByteLevelJson(const std::vector<std::string>& extra_tokens,
                             const std::vector<std::pair<std::string, std::string>>& merges,
                             const nlohmann::json& added_tokens = nlohmann::json::array());

// A sentencepiece-style BPE with byte fallback (Llama 2 layout): Prepend("▁") + Replace(" ",
// "▁") normalizer, ByteFallback decoder, "<unk>", "<s>", "</s>" and all 256 "<0xHH>" tokens.
nlohmann::json ByteFallbackJson(const std::vector<std::string>& extra_tokens,
                                const std::vector<std::pair<std::string, std::string>>& merges);

// An added-token JSON object.
nlohmann::json Added(int id, const std::string& content, bool special, bool lstrip = false,
                     bool rstrip = false, bool single_word = false, bool normalized = false);

// Builds a tokenizer or fails the test.
std::shared_ptr<const Tokenizer> Build(const nlohmann::json& tokenizer,
                                       const nlohmann::json& config = nlohmann::json());

}  // namespace gpeserve::tokenizer::testing
