#include "engine/model/default_model.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/util/remove_tree.h"

// Defined by the generated default_model_data.S.
extern "C" {
extern const char gpeserve_default_config_begin[], gpeserve_default_config_end[];
extern const char gpeserve_default_generation_config_begin[],
    gpeserve_default_generation_config_end[];
extern const char gpeserve_default_weights_begin[], gpeserve_default_weights_end[];
extern const char gpeserve_default_tokenizer_begin[], gpeserve_default_tokenizer_end[];
extern const char gpeserve_default_tokenizer_config_begin[],
    gpeserve_default_tokenizer_config_end[];
extern const char gpeserve_default_de_en_config_begin[], gpeserve_default_de_en_config_end[];
extern const char gpeserve_default_de_en_weights_begin[], gpeserve_default_de_en_weights_end[];
extern const char gpeserve_default_de_en_prompt_begin[], gpeserve_default_de_en_prompt_end[];
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
      {"de-en/adapter_config.json",
       Bytes(gpeserve_default_de_en_config_begin, gpeserve_default_de_en_config_end)},
      {"de-en/adapter_model.safetensors",
       Bytes(gpeserve_default_de_en_weights_begin, gpeserve_default_de_en_weights_end)},
      {"de-en/prompt.json",
       Bytes(gpeserve_default_de_en_prompt_begin, gpeserve_default_de_en_prompt_end)},
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
    fs::create_directories(path.parent_path(), error);
    if (error) {
      return absl::UnavailableError(
          absl::StrCat("cannot create ", path.parent_path().string(), ": ", error.message()));
    }
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out.write(file.bytes.data(), static_cast<std::streamsize>(file.bytes.size())) ||
        !out.flush()) {
      return absl::UnavailableError(absl::StrCat("cannot write ", path.string()));
    }
  }
  return absl::OkStatus();
}

namespace {

// `load` run on the default model folder written to a new private temporary folder, removed
// afterwards; errors begin with `what`.
template <typename Load>
auto LoadFromDefaultFolder(const std::string& what, Load load) -> decltype(load(std::string())) {
  namespace fs = std::filesystem;
  // A fresh private folder (mkdtemp: unique, mode 0700), never one that exists already: replicas
  // in containers share pid 1, and a shared /tmp must not let them meet.
  std::string pattern = (fs::temp_directory_path() / "gpeserve-default-model-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat(what, ": cannot create a folder in ",
                                               fs::temp_directory_path().string(), ": ",
                                               std::strerror(errno)));
  }
  const fs::path dir = pattern;
  const absl::Status written = WriteDefaultModel(dir.string());
  using Result = decltype(load(std::string()));
  Result loaded = written.ok() ? load(dir.string()) : Result(written);
  RemoveTree(dir).IgnoreError();  // a mapping of the weights stays valid after the unlink
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat(what, ": ", loaded.status().message()));
  }
  return loaded;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Model>> LoadDefaultModel(const ModelOptions& options) {
  return LoadFromDefaultFolder("the built-in default model",
                               [&](const std::string& dir) { return Model::Load(dir, options); });
}

bool IsDefaultAdapterName(std::string_view name) {
  return std::find(std::begin(kDefaultAdapterNames), std::end(kDefaultAdapterNames), name) !=
         std::end(kDefaultAdapterNames);
}

absl::StatusOr<std::shared_ptr<const Adapter>> LoadDefaultAdapter(const std::string& name,
                                                                  const Model& model) {
  if (!IsDefaultAdapterName(name)) {
    const std::vector<std::string> names(std::begin(kDefaultAdapterNames),
                                         std::end(kDefaultAdapterNames));
    return absl::NotFoundError(absl::StrCat(
        "'", name, "' is not a built-in adapter (they are: ", absl::StrJoin(names, ", "), ")"));
  }
  return LoadFromDefaultFolder(
      absl::StrCat("the built-in adapter ", name),
      [&](const std::string& dir) { return LoadAdapter(dir + "/" + name, model, name); });
}

}  // namespace gpeserve::model
