// PEFT adapter_config.json parsing: arbitrary JSON is an adapter configuration or an error; one
// written back (ToJson) parses again to one.
#include "engine/formats/adapter_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpeserve;
  const nlohmann::json json = fuzz::ParseJson(fuzz::Bytes(data, size));
  if (json.is_discarded()) return 0;
  auto config = model::AdapterConfig::FromJson(json, "adapter_config.json");
  if (!config.ok()) return 0;
  FUZZ_CHECK(model::AdapterConfig::FromJson(config->ToJson(), "written").ok());
  (void)config->Targets("model.layers.0.self_attn.q_proj");
  return 0;
}
