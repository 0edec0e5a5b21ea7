// tokenizer.json loading: any bytes either load or give an error; a tokenizer that loads encodes
// and decodes a sentence without failing in another way than an error status.
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  auto tokenizer = tokenizer::Tokenizer::FromJson(fuzz::Bytes(data, size), "fuzz.json", "", "");
  if (!tokenizer.ok()) return 0;
  auto ids = (*tokenizer)->Encode("Hello, world! Grüße aus 東京.");
  if (ids.ok()) (void)(*tokenizer)->Decode(*ids);
  return 0;
}
