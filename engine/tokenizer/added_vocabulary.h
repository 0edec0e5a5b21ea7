// Added tokens (special tokens such as "<|im_start|>" and other tokens added on top of the
// model's vocabulary): finding them in the input text before normalization/pre-tokenization,
// with Hugging Face's leftmost-longest matching and lstrip / rstrip / single_word rules.
//
// Thread-safety: immutable after construction; Split may be called concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace gpeserve::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;      // skipped by Decode(skip_special_tokens)
  bool normalized = false;   // matched in normalized text (else in the raw input)
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool single_word = false;  // only matches when not inside a word
};

// A piece of input: either plain text still to be tokenized, or one added token.
struct TextSegment {
  std::string_view text;
  int32_t token_id = -1;  // >= 0 for an added token
};

// Finds a fixed set of patterns (the contents of added tokens) in text. Matching is
// leftmost-longest and non-overlapping, like Aho-Corasick with MatchKind::LeftmostLongest.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is matched for `tokens[i]`. Empty patterns are ignored.
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  // Splits `text` into plain-text and added-token segments (plain segments may be empty and are
  // dropped). `skip_special`: special tokens are not matched (treated as plain text).
  void Split(std::string_view text, bool skip_special, std::vector<TextSegment>* out) const;

  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    absl::flat_hash_map<unsigned char, int32_t> children;
    int32_t token = -1;  // index into tokens_ when a pattern ends here
  };
  // Longest pattern starting at text[pos]: (index into tokens_, end), or (-1, pos).
  std::pair<int32_t, size_t> LongestAt(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;  // nodes_[0] is the root
  bool first_byte_[256] = {};
};

}  // namespace gpeserve::tokenizer
