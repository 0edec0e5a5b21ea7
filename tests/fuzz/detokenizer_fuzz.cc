// The incremental detokenizer on an arbitrary id stream (two bytes per id, over the vocabulary
// and a little beyond it): the pieces it emits, then Flush, are exactly Decode of all the ids,
// with and without clean-up and special tokens.
#include "engine/tokenizer/incremental_detokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  if (size < 1) return 0;
  const tokenizer::Tokenizer& t = fuzz::DefaultTokenizer();
  const uint8_t flags = data[0];
  const tokenizer::DecodeOptions options{.skip_special_tokens = (flags & 1) != 0,
                                         .clean_up_spaces = (flags & 2) != 0};
  std::vector<int32_t> ids;
  const int64_t range = t.vocab_size() + 8;
  for (size_t i = 1; i + 1 < size; i += 2) {
    ids.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8)) % range));
  }
  if (!t.CheckIds(ids).ok()) return 0;  // ids from a user are checked first (Decode's contract)
  tokenizer::IncrementalDetokenizer detokenizer(t, options);
  std::string pieces;
  for (int32_t id : ids) pieces += detokenizer.Push(id);
  pieces += detokenizer.Flush();
  FUZZ_CHECK(pieces == t.Decode(ids, options));
  return 0;
}
