// Encoding arbitrary bytes with the built-in tokenizer: valid UTF-8 always encodes, to ids in the
// vocabulary, and decodes back to a string; invalid UTF-8 is an error, never a crash.
#include "engine/tokenizer/unicode.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  const tokenizer::Tokenizer& t = fuzz::DefaultTokenizer();
  const std::string_view text = fuzz::Bytes(data, size);
  auto ids = t.Encode(text);
  if (!tokenizer::ValidateUtf8(text).ok()) {
    FUZZ_CHECK(!ids.ok());
    return 0;
  }
  FUZZ_CHECK(ids.ok());
  FUZZ_CHECK(t.CheckIds(*ids).ok());
  (void)t.Decode(*ids);
  return 0;
}
