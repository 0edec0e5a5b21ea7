#include "engine/model/quantize.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"
#include "nlohmann/json.hpp"

namespace gpeserve::model {

absl::Status QuantizeModel(const std::string& model_dir, const std::string& out_dir, int threads) {
  namespace fs = std::filesystem;
  auto loaded = Model::Load(model_dir, {.dtype = "int8", .device = "cpu", .threads = threads});
  if (!loaded.ok()) return loaded.status();
  if ((*loaded)->config().int8_weights) {
    return absl::InvalidArgumentError(absl::StrCat(model_dir, " is quantized already"));
  }
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) return absl::UnavailableError(absl::StrCat(out_dir, ": ", error.message()));
  if (fs::equivalent(model_dir, out_dir, error)) {
    return absl::InvalidArgumentError("--out must be another folder than --model");
  }
  for (const char* name : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const fs::path from = fs::path(model_dir) / name;
    if (!fs::exists(from)) continue;
    fs::copy_file(from, fs::path(out_dir) / name, fs::copy_options::overwrite_existing, error);
    if (error) return absl::UnavailableError(absl::StrCat(from.string(), ": ", error.message()));
  }
  {
    // The original config with the quantization added (fields we do not read are kept).
    const fs::path from = fs::path(model_dir) / "config.json";
    std::ifstream in(from);
    nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(from.string(), ": not a JSON object"));
    }
    config["quantization_config"] = Int8QuantizationConfig();
    std::ofstream out(fs::path(out_dir) / "config.json");
    if (!(out << config.dump(2) << "\n")) {
      return absl::UnavailableError(absl::StrCat(out_dir, "/config.json: cannot write"));
    }
  }
  std::vector<torch::Tensor> keep;
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, t] : NamedWeights((*loaded)->config(), (*loaded)->weights())) {
    const DType dtype = t.scalar_type() == torch::kChar ? DType::kI8 : DType::kF32;
    if (t.scalar_type() != torch::kChar && t.scalar_type() != torch::kFloat32) {
      return absl::InternalError(absl::StrCat(name, ": unexpected dtype after quantization"));
    }
    keep.push_back(t.contiguous());
    tensors.push_back({name, dtype, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                       keep.back().data_ptr()});
  }
  const std::string path = (fs::path(out_dir) / "model.safetensors").string();
  if (absl::Status s = WriteSafetensors(path + ".tmp", tensors, {{"format", "pt"}}); !s.ok()) {
    return s;
  }
  fs::rename(path + ".tmp", path, error);
  if (error) return absl::UnavailableError(absl::StrCat(path, ": ", error.message()));
  return absl::OkStatus();
}

}  // namespace gpeserve::model
