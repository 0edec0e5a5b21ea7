#include "engine/model/default_model.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

// Defined by the generated default_model_data.S.
extern "C" {
extern const char gpeserve_default_config_begin[], gpeserve_default_config_end[];
extern const char gpeserve_default_generation_config_begin[],
    gpeserve_default_generation_config_end[];
extern const char gpeserve_default_weights_begin[], gpeserve_default_weights_end[];
extern const char gpeserve_default_tokenizer_begin[], gpeserve_default_tokenizer_end[];
extern const char gpeserve_default_tokenizer_config_begin[],
    gpeserve_default_tokenizer_config_end[];
}

namespace gpeserve::model {
namespace {

std::string_view Bytes(const char* begin, const char* end) {
  return std::string_view(begin, static_cast<size_t>(end - begin));
}

}  // namespace

std::vector<EmbeddedFile> DefaultModelFiles() {
  return {
      {"config.json", Bytes(gpeserve_default_config_begin, gpeserve_default_config_end)},
      {"generation_config.json",
       Bytes(gpeserve_default_generation_config_begin, gpeserve_default_generation_config_end)},
      {"model.safetensors", Bytes(gpeserve_default_weights_begin, gpeserve_default_weights_end)},
      {"tokenizer.json", Bytes(gpeserve_default_tokenizer_begin, gpeserve_default_tokenizer_end)},
      {"tokenizer_config.json",
       Bytes(gpeserve_default_tokenizer_config_begin, gpeserve_default_tokenizer_config_end)},
  };
}

absl::Status WriteDefaultModel(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  for (const EmbeddedFile& file : DefaultModelFiles()) {
    const fs::path path = fs::path(dir) / file.name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out.write(file.bytes.data(), static_cast<std::streamsize>(file.bytes.size())) ||
        !out.flush()) {
      return absl::UnavailableError(absl::StrCat("cannot write ", path.string()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Model>> LoadDefaultModel(const ModelOptions& options) {
  namespace fs = std::filesystem;
  // A fresh private folder (mkdtemp: unique, mode 0700), never one that exists already: replicas
  // in containers share pid 1, and a shared /tmp must not let them meet.
  std::string pattern = (fs::temp_directory_path() / "gpeserve-default-model-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("the built-in default model: cannot create a folder in ",
                     fs::temp_directory_path().string(), ": ", std::strerror(errno)));
  }
  const fs::path dir = pattern;
  const absl::Status written = WriteDefaultModel(dir.string());
  absl::StatusOr<std::shared_ptr<const Model>> model =
      written.ok() ? Model::Load(dir.string(), options) : written;
  std::error_code ignored;
  fs::remove_all(dir, ignored);  // a mapping of the weights stays valid after the unlink
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("the built-in default model: ", model.status().message()));
  }
  return model;
}

}  // namespace gpeserve::model
