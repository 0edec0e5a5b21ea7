// The default model: the small English-to-German translator that scripts/train-default-model
// trains from scratch (models/default/, docs/training.md), compiled into the binaries that link
// gpeserve::default_model so that `gpeserve` and `gpe` work with no model folder and no
// download. Served with the qwen2.5 profile, whose instruction is "Translate the following
// English paragraph to German".
//
// Thread-safety: pure functions; the embedded bytes are read-only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/model.h"

namespace gpeserve::model {

// The name servers and reports give the default model.
inline constexpr char kDefaultModelName[] = "gpeserve-en-de-small";
// The profile it was trained with.
inline constexpr char kDefaultModelProfile[] = "qwen2.5";

struct EmbeddedFile {
  std::string_view name;  // file name in the model folder
  std::string_view bytes;
};
// The embedded model folder's files.
std::vector<EmbeddedFile> DefaultModelFiles();

// Writes the default model folder to `dir` (created if missing).
absl::Status WriteDefaultModel(const std::string& dir);

// Loads the default model: its files are written to a new private temporary folder ($TMPDIR),
// loaded (the weights are copied or mapped), and the folder is removed.
absl::StatusOr<std::shared_ptr<const Model>> LoadDefaultModel(const ModelOptions& options = {});

}  // namespace gpeserve::model
