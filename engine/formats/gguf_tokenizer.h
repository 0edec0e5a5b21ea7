// The tokenizer a GGUF file carries (tokenizer.ggml.*), as the tokenizer.json and
// tokenizer_config.json Hugging Face would write for it, then read by the project's tokenizer.
// Byte-level BPE files (tokenizer.ggml.model "gpt2": tokens, merges, token types) with
// llama.cpp's pre-tokenizer named by tokenizer.ggml.pre: "qwen2", "llama-bpe" (Llama 3),
// "smollm", "gpt-2"/"default"; the chat template and the eos/bos tokens from the metadata.
// SentencePiece files (tokenizer.ggml.model "llama": Llama 2, Gemma) are refused.
//
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/formats/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace gpeserve::model {

// True when `file` carries a tokenizer (tokenizer.ggml.model).
bool GgufHasTokenizer(const GgufFile& file);

// (tokenizer.json, tokenizer_config.json) for `file`'s tokenizer. Errors name the file and key:
// Unimplemented for a tokenizer model or pre-tokenizer not read.
absl::StatusOr<std::pair<std::string, std::string>> GgufTokenizerJson(const GgufFile& file);

// GgufTokenizerJson read by the project's tokenizer.
absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> GgufTokenizer(const GgufFile& file);

}  // namespace gpeserve::model
