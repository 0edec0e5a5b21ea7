// GGUF parsing of arbitrary bytes: an error, or metadata and tensors that lie inside the file,
// aligned, whole blocks of their type, and not overlapping.
#include <algorithm>

#include "engine/formats/gguf.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  auto contents = model::ParseGguf(fuzz::Bytes(data, size), "fuzz.gguf");
  if (!contents.ok()) return 0;
  FUZZ_CHECK(contents->alignment > 0 && (contents->alignment & (contents->alignment - 1)) == 0);
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const model::GgufTensorInfo& t : contents->tensors) {
    const auto block = model::GgmlBlockOf(t.type);
    FUZZ_CHECK(block.has_value());
    FUZZ_CHECK(!t.dims.empty() && t.dims.size() <= 4 && t.dims[0] % block->elements == 0);
    FUZZ_CHECK(static_cast<int64_t>(t.size) == t.numel() / block->elements * block->bytes);
    FUZZ_CHECK(t.offset <= size && t.size <= size - t.offset);
    FUZZ_CHECK(t.offset % contents->alignment == 0);
    if (t.size > 0) ranges.emplace_back(t.offset, t.offset + t.size);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) FUZZ_CHECK(ranges[i - 1].second <= ranges[i].first);
  return 0;
}
