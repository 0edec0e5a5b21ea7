// gpe make-adapter / gpe merge-adapter: random-weight PEFT LoRA adapter folders (tests,
// benchmarks) and a base model with an adapter folded in, as a Hugging Face folder.
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "engine/model/adapter.h"
#include "engine/model/model.h"
#include "flags/groups.h"

namespace gpeserve::cli {
namespace {

// "a,b,c" -> {"a", "b", "c"} (empty parts dropped).
std::vector<std::string> SplitList(std::string_view text) {
  return absl::StrSplit(absl::string_view(text.data(), text.size()), ',', absl::SkipEmpty());
}

int Fail(const absl::Status& status, int code = 1) {
  std::cerr << "gpe: " << status.message() << "\n";
  return code;
}

}  // namespace

int MakeAdapterCommand(int argc, char** argv, int first) {
  flags::FlagSet flags("gpe", "gpe make-adapter --model DIR --out DIR [options]",
                       "Writes a PEFT LoRA adapter folder (adapter_config.json,\n"
                       "adapter_model.safetensors) with random weights for the model in --model:\n"
                       "for tests and benchmarks of adapter serving. Unlike PEFT's initialization\n"
                       "B is random too, so the adapter changes the model's output.");
  flags::ModelFlags model_flags;
  flags::AddModelFlags(flags, &model_flags, "base model folder", /*with_device=*/false);
  model::AdapterConfig config;
  config.r = 8;
  config.lora_alpha = 16;
  config.target_list = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                        "gate_proj", "up_proj", "down_proj"};
  flags::AddLoraFlags(flags, &config);
  flags.AddParsed("modules_to_save", "NAMES",
                  "comma-separated modules saved whole (lm_head, embed_tokens)", "",
                  [&config](std::string_view text) {
                    config.modules_to_save = SplitList(text);
                    return absl::OkStatus();
                  });
  flags.AddParsed("layers_to_transform", "LAYERS", "comma-separated layer indices (default: all)",
                  "", [&config](std::string_view text) {
                    for (const std::string& part : SplitList(text)) {
                      int64_t layer;
                      if (!absl::SimpleAtoi(part, &layer) || layer < 0) {
                        return absl::InvalidArgumentError("takes layer indices >= 0");
                      }
                      config.layers_to_transform.push_back(layer);
                    }
                    return absl::OkStatus();
                  });
  uint64_t seed = 1;
  double init_std = 0.02;
  flags.Add("seed", "N", "random seed", &seed);
  flags.Add("init_std", "X", "standard deviation of the random weights", &init_std, {.min = 0});
  std::optional<std::string> out;
  flags.Add("out", "DIR", "output folder", &out);
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (!model_flags.dir || !out) {
    std::cerr << "gpe: --model and --out are required\n\n" << flags.Help();
    return 2;
  }
  auto model = model::Model::Load(*model_flags.dir, model_flags.options);
  if (!model.ok()) return Fail(model.status());
  config.base_model_name_or_path = *model_flags.dir;
  auto tensors = model::RandomAdapterTensors(**model, config, seed, init_std);
  if (!tensors.ok()) return Fail(tensors.status(), 2);
  if (absl::Status s = model::WriteAdapterFolder(*out, config, *tensors); !s.ok()) return Fail(s);
  std::cerr << "gpe: wrote a rank-" << config.r << " adapter with " << tensors->size()
            << " tensors to " << *out << "\n";
  return 0;
}

int MergeAdapterCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe merge-adapter --model DIR --adapter DIR --out DIR",
      "Folds a PEFT LoRA adapter into its base model (W + scale * B A; modules\n"
      "saved whole replace the base's) and writes the result as a Hugging Face\n"
      "folder in the base's stored dtype (computed in fp32, rounded once). A tied\n"
      "embedding that the adapter changes is written untied, as PEFT computes\n"
      "it unmerged.");
  std::optional<std::string> model_dir, adapter_dir, out;
  int threads = 0;
  flags.Add("model", "DIR", "base model folder", &model_dir);
  flags.Add("adapter", "DIR",
            "PEFT adapter folder (adapter_config.json, "
            "adapter_model.safetensors)",
            &adapter_dir);
  flags.Add("out", "DIR", "output folder", &out);
  flags.Add("threads", "N", "CPU threads (0 = all cores)", &threads, {.min = 0});
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (!model_dir || !adapter_dir || !out) {
    std::cerr << "gpe: --model, --adapter and --out are required\n\n" << flags.Help();
    return 2;
  }
  if (absl::Status s = model::MergeAdapterFolder(*model_dir, *adapter_dir, *out, threads);
      !s.ok()) {
    return Fail(s);
  }
  std::cerr << "gpe: wrote " << *out << "\n";
  return 0;
}

}  // namespace gpeserve::cli
