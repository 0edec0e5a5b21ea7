// A Hugging Face tokenizer (tokenizer.json + tokenizer_config.json) reimplemented to give the
// same ids as the `tokenizers` library: added/special tokens, normalizer, pre-tokenizer, BPE
// model (byte-level or with byte fallback), post-processor (BOS/EOS) and decoder.
//
// Input text must be valid UTF-8: Encode returns InvalidArgument naming the byte offset of the
// first ill-formed sequence (it never guesses a repair). Decode always returns valid UTF-8;
// ill-formed byte sequences produced by byte tokens decode to U+FFFD, as in `tokenizers`.
//
// Thread-safety: a loaded Tokenizer is immutable (apart from an internal, locked cache) and is
// shared as std::shared_ptr<const Tokenizer>; every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/added_vocabulary.h"

namespace gpeserve::tokenizer {

class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;

struct EncodeOptions {
  // Add the tokens the model expects around a sequence (e.g. Llama 2's "<s>"), from
  // tokenizer_config.json's add_bos_token/add_eos_token when set, else from tokenizer.json's
  // post_processor template.
  bool add_special_tokens = false;
  // Treat the text of special tokens as plain text instead of recognising them (for untrusted
  // input that must not inject control tokens).
  bool split_special_tokens = false;
};

struct DecodeOptions {
  // Leave out special tokens (BOS, EOS, chat-template markers).
  bool skip_special_tokens = false;
  // Apply transformers' clean_up_tokenization (" ." -> ".", " n't" -> "n't", ...). Unset: the
  // tokenizer's own clean_up_tokenization_spaces setting.
  std::optional<bool> clean_up_spaces;
};

class Tokenizer {
 public:
  // Loads `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json.
  static absl::StatusOr<std::shared_ptr<const Tokenizer>> Load(const std::string& dir);
  // Loads the given files; `config_path` may be empty.
  static absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadFiles(
      const std::string& tokenizer_path, const std::string& config_path);
  // Builds from file contents; `*_name` are used in error messages.
  static absl::StatusOr<std::shared_ptr<const Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                                   std::string_view tokenizer_name,
                                                                   std::string_view config_json,
                                                                   std::string_view config_name);

  ~Tokenizer();

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              const EncodeOptions& options = {}) const;

  // Text of `ids`. Ids outside the vocabulary are left out (check them with CheckIds first when
  // they come from a user).
  std::string Decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
  // Decode without the clean-up step.
  std::string DecodeRaw(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // transformers' clean_up_tokenization, applied to decoded text.
  static std::string CleanUpSpaces(std::string_view text);

  // Empties the internal word cache; results never depend on it (for benchmarks).
  void ClearCache() const;

  // OK if every id names a token; else InvalidArgument naming the first bad id and its index.
  absl::Status CheckIds(std::span<const int32_t> ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token's string (byte-level or sentencepiece form), or nullptr for an unknown id.
  const std::string* IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // True for a "<0xHH>" token when the decoder has a ByteFallback stage: the text of such a
  // token is only known once the run of byte tokens it belongs to has ended.
  bool IsByteFallbackToken(int32_t id) const { return byte_fallback_ids_.contains(id); }
  // One past the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  bool clean_up_spaces() const { return clean_up_spaces_; }
  // tokenizer_config.json's chat_template (the "default" one of named templates); empty if none.
  const std::string& chat_template() const { return chat_template_; }

 private:
  Tokenizer();
  // Appends the ids of a plain-text segment (no added tokens inside) to *ids.
  void EncodeText(std::string_view text, bool starts_input, bool split_special,
                  std::vector<int32_t>* ids) const;

  // ---- Constant after construction ----
  std::unique_ptr<Normalizer> normalizer_;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer_;  // may be null
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;      // may be null
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized = true
  absl::flat_hash_map<int32_t, AddedToken> added_by_id_;
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  absl::flat_hash_set<int32_t> byte_fallback_ids_;
  std::vector<int32_t> prefix_ids_;  // added around a sequence by add_special_tokens
  std::vector<int32_t> suffix_ids_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  bool clean_up_spaces_ = false;
  std::string chat_template_;
  int32_t vocab_size_ = 0;
};

}  // namespace gpeserve::tokenizer
