// Trains a byte-level BPE vocabulary (Qwen2-style pre-tokenization: NFC, the Qwen2 split regex,
// GPT-2 byte mapping) on a text corpus and writes it as a Hugging Face tokenizer.json that both
// gpeserve's Tokenizer and Hugging Face `tokenizers` load.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer {

struct BpeTrainerConfig {
  // Size of the result, special tokens included; at least 256 + special tokens.
  int vocab_size = 4000;
  // A pair seen fewer times than this is never merged (training may stop below vocab_size).
  int min_frequency = 2;
  // Added as special tokens after the learned vocabulary, in this order.
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  // tokenizer_config.json's eos_token (must be one of special_tokens, or empty for none).
  std::string eos_token = "<|im_end|>";
  // tokenizer_config.json's pad_token (must be one of special_tokens, or empty for none).
  std::string pad_token = "<|endoftext|>";
};

struct TrainedTokenizer {
  nlohmann::json tokenizer;  // tokenizer.json
  nlohmann::json config;     // tokenizer_config.json
  int merges = 0;            // merges learned
};

// Learns merges from `texts` (valid UTF-8), most frequent pair first; ties are broken by the
// smaller (left, right) token strings so the result is deterministic.
absl::StatusOr<TrainedTokenizer> TrainByteLevelBpe(const std::vector<std::string>& texts,
                                                   const BpeTrainerConfig& config);

}  // namespace gpeserve::tokenizer
