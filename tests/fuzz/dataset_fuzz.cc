// `gpe eval` data files: a data set or an error; every example has both fields.
#include "engine/eval/dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  (void)eval::ParseDataset(fuzz::Bytes(data, size), "data.json", "en", "de");
  return 0;
}
