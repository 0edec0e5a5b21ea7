// safetensors parsing of arbitrary bytes: an error, or tensors that lie inside the file, do not
// overlap, and whose sizes match their shapes.
#include <algorithm>

#include "engine/formats/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  auto tensors = model::ParseSafetensors(fuzz::Bytes(data, size), "fuzz.safetensors");
  if (!tensors.ok()) return 0;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const model::TensorInfo& t : *tensors) {
    FUZZ_CHECK(t.offset <= size && t.size <= size - t.offset);
    FUZZ_CHECK(t.numel() >= 0);
    ranges.emplace_back(t.offset, t.offset + t.size);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    FUZZ_CHECK(ranges[i - 1].second <= ranges[i].first || ranges[i - 1].first == ranges[i].second);
  }
  return 0;
}
