// The default model: the small English-to-German translator that scripts/train-default-model
// trains from scratch (models/default/, docs/training.md), compiled into the binaries that link
// gpeserve::default_model so that `gpeserve` and `gpe` work with no model folder and no
// download. Served with the qwen2.5 profile, whose instruction is "Translate the following
// English paragraph to German". Its built-in LoRA adapters ride along: `de-en`, German to
// English, trained on it by scripts/train-de-en-adapter (models/default/de-en/,
// docs/adapters.md).
//
// Thread-safety: pure functions; the embedded bytes are read-only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/adapter.h"
#include "engine/model/model.h"

namespace gpeserve::model {

// The name servers and reports give the default model.
inline constexpr char kDefaultModelName[] = "gpeserve-en-de-small";
// The profile it was trained with.
inline constexpr char kDefaultModelProfile[] = "qwen2.5";

// The built-in adapters' names: each is the folder of its files in the model folder.
inline constexpr std::string_view kDefaultAdapterNames[] = {"de-en"};
// Whether `name` is one of kDefaultAdapterNames.
bool IsDefaultAdapterName(std::string_view name);

struct EmbeddedFile {
  std::string_view name;  // path in the model folder ("config.json", "de-en/prompt.json")
  std::string_view bytes;
};
// The embedded model folder's files, the adapters' included.
std::vector<EmbeddedFile> DefaultModelFiles();

// Writes the default model folder, with its adapters' folders, to `dir` (created if missing).
absl::Status WriteDefaultModel(const std::string& dir);

// Loads the default model: its files are written to a new private temporary folder ($TMPDIR),
// loaded (the weights are copied or mapped), and the folder is removed.
absl::StatusOr<std::shared_ptr<const Model>> LoadDefaultModel(const ModelOptions& options = {});

// Loads the built-in adapter `name` (one of kDefaultAdapterNames; NotFound otherwise) for
// `model`, the default model as LoadDefaultModel loaded it, under that name.
absl::StatusOr<std::shared_ptr<const Adapter>> LoadDefaultAdapter(const std::string& name,
                                                                  const Model& model);

}  // namespace gpeserve::model
