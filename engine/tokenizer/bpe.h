// Byte-pair-encoding model: turns one pre-tokenized word into token ids by applying the merge
// rules in rank order (Hugging Face `tokenizers` BPE semantics, dropout excluded). Covers both
// byte-level vocabularies (GPT-2 style: Qwen2, Llama 3) and sentencepiece-style vocabularies
// with byte fallback (Llama 2, Mistral, Gemma).
//
// Thread-safety: immutable after Build except for an internal word cache guarded by a mutex;
// Tokenize may be called concurrently.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/json_util.h"
#include "engine/util/mutex.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer {

class BpeModel {
 public:
  // Builds the model from the "model" object of tokenizer.json (type "BPE"). Errors name the
  // JSON path: a merge whose parts or result are not in the vocabulary, dropout > 0, etc.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& json,
                                                            const JsonLocation& at);

  // Appends the ids of `word` to *ids.
  void Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  // Empties the word cache (for benchmarks that must measure unseen text).
  void ClearCache() const;

  // Vocabulary lookups.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token string of `id`, or nullptr if the id is not in the vocabulary.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  BpeModel() = default;
  // The initial symbols of `word` (characters, byte-fallback tokens or unk), per HF merge_word.
  void InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const;
  // Applies the merges to `symbols` in (rank, position) order.
  void MergeAll(std::vector<int32_t>* symbols) const;

  // ---- Constant after construction ----
  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_fallback_ids_[256];  // id of "<0xHH>", or -1
  int32_t single_char_ids_[512];    // id of the one-character token U+0000..U+01FF, or -1

  // ---- Cache of whole words (does not change results) ----
  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable Mutex cache_mutex_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_
      ABSL_GUARDED_BY(cache_mutex_);
};

}  // namespace gpeserve::tokenizer
