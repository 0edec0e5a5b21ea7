// config.json parsing: arbitrary JSON is a configuration or an error; a configuration written
// back (ToJson) parses again to one.
#include "engine/formats/config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  const nlohmann::json json = fuzz::ParseJson(fuzz::Bytes(data, size));
  if (json.is_discarded()) return 0;
  auto config = model::ModelConfig::FromJson(json, "config.json");
  if (!config.ok()) return 0;
  FUZZ_CHECK(model::ModelConfig::FromJson(config->ToJson(), "written").ok());
  return 0;
}
