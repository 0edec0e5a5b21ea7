#include "cli/quantize.h"

#include "absl/strings/str_cat.h"
#include "engine/model/model.h"
#include "engine/model/model_folder.h"

namespace gpeserve::model {

absl::Status QuantizeModel(const std::string& model_dir, const std::string& out_dir, int threads) {
  auto loaded = Model::Load(model_dir, {.dtype = "int8", .device = "cpu", .threads = threads});
  if (!loaded.ok()) return loaded.status();
  if ((*loaded)->config().int8_weights) {
    return absl::InvalidArgumentError(absl::StrCat(model_dir, " is quantized already"));
  }
  return WriteModelFolder(
      model_dir, out_dir, (*loaded)->config(), (*loaded)->weights(),
      [](nlohmann::json& config) { config["quantization_config"] = Int8QuantizationConfig(); });
}

}  // namespace gpeserve::model
