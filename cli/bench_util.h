// Shared by the benchmark subcommands (bench-stream, bench): the benchmark's source words and
// the model they run, either a folder the user names or a random-weight preset written to a
// temporary folder with a small tokenizer trained on those words.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/options.h"

namespace gpeserve::model {
class Model;
struct Adapter;
}  // namespace gpeserve::model
namespace gpeserve::flags {
struct ModelFlags;
}

namespace gpeserve::cli {

// A fixed sentence of plain English words; sources repeat it.
const std::vector<std::string>& BenchWords();

// `count` source words: BenchWords() repeated.
std::vector<std::string> BenchSource(int count);

// Loads `model_dir`, or the built-in default model when `preset` is "default", or writes a
// random `preset` model whose tokenizer is a 1000-token byte-level BPE trained on BenchWords()
// and the corpus's English sentences to a temporary folder, loads it and removes the folder (the
// mapping stays valid); with `options` (the preset's weights are stored in fp32 when options.dtype
// is fp32, else bf16). Logs the model's kernel path on stderr. The model keeps the preset's full
// vocabulary (its LM head costs what the real checkpoint's does); the ids beyond the small
// tokenizer decode to made-up word starts (even ids) and word pieces (odd ids), so that random
// output has words.
absl::StatusOr<std::shared_ptr<const model::Model>> LoadBenchModel(
    const std::optional<std::string>& model_dir, const std::string& preset,
    const model::ModelOptions& options);

// What a model command runs: the model (the built-in default one when no folder is named) and
// the adapter of --adapter, unless --merge_adapter folded it into the model (then null).
struct CommandModel {
  std::shared_ptr<const model::Model> model;
  std::shared_ptr<const model::Adapter> adapter;
  std::optional<std::string> instruction;  // the adapter's (prompt.json), merged or not
};
absl::StatusOr<CommandModel> LoadCommandModel(const flags::ModelFlags& flags);

// The CPU's model name and its vector features that matter here (from /proc/cpuinfo), to print
// next to every benchmark figure.
std::string CpuName();

// Parses "1,8,32" into positive whole numbers; for a list flag (flags::FlagSet::AddParsed), so
// the error reads as the rest of "--flag ...".
absl::Status ParsePositiveList(std::string_view text, std::vector<int>* values);

}  // namespace gpeserve::cli
