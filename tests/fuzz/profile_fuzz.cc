// Prompt profile JSON: a profile or an error; a profile's instruction can be replaced.
#include "engine/policy/profile.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  const nlohmann::json json = fuzz::ParseJson(fuzz::Bytes(data, size));
  if (json.is_discarded()) return 0;
  auto profile = policy::Profile::FromJson(json, "profile.json");
  if (profile.ok()) (void)profile->WithInstruction("Translate {instruction} now");
  return 0;
}
