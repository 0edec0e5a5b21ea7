#include "engine/model/model_folder.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/formats/safetensors.h"

namespace gpeserve::model {

absl::Status WriteModelFolder(const std::string& from_dir, const std::string& out_dir,
                              const ModelConfig& config, const Weights& weights,
                              const std::function<void(nlohmann::json&)>& edit_config) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) return absl::UnavailableError(absl::StrCat(out_dir, ": ", error.message()));
  if (fs::equivalent(from_dir, out_dir, error)) {
    return absl::InvalidArgumentError("--out must be another folder than --model");
  }
  for (const char* name : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const fs::path from = fs::path(from_dir) / name;
    if (!fs::exists(from)) continue;
    fs::copy_file(from, fs::path(out_dir) / name, fs::copy_options::overwrite_existing, error);
    if (error) return absl::UnavailableError(absl::StrCat(from.string(), ": ", error.message()));
  }
  {
    const fs::path from = fs::path(from_dir) / "config.json";
    std::ifstream in(from);
    nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!json.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(from.string(), ": not a JSON object"));
    }
    edit_config(json);
    std::ofstream out(fs::path(out_dir) / "config.json");
    if (!(out << json.dump(2) << "\n")) {
      return absl::UnavailableError(absl::StrCat(out_dir, "/config.json: cannot write"));
    }
  }
  std::vector<torch::Tensor> keep;
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, t] : NamedWeights(config, weights)) {
    auto dtype = SafetensorsDType(t.scalar_type());
    if (!dtype.ok()) return absl::InternalError(absl::StrCat(name, ": ", dtype.status().message()));
    keep.push_back(t.to(torch::kCPU).contiguous());
    tensors.push_back({name, *dtype, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
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
