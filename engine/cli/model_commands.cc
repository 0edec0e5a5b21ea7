// gpe make-model / gpe quantize / gpe logits: random-weight model folders, int8 copies and
// golden logits.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/model/default_model.h"
#include "engine/model/make_model.h"
#include "engine/model/model.h"
#include "engine/model/npy.h"
#include "engine/model/quantize.h"

namespace gpeserve::cli {
namespace {

// "1,2,3" -> {1, 2, 3}.
absl::StatusOr<std::vector<int64_t>> ParseIntList(const std::string& flag,
                                                  const std::string& text) {
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", std::string(part), "' is not an integer"));
    }
    values.push_back(v);
  }
  return values;
}

absl::StatusOr<bool> ParseBool(const std::string& flag, const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " takes true or false"));
}

int Fail(const absl::Status& status, int code = 1) {
  std::cerr << "gpe: " << status.message() << "\n";
  return code;
}

}  // namespace

int MakeModelCommand(int argc, char** argv, int first) {
  Args args("gpe make-model --tokenizer DIR --out DIR [options]",
            "Writes a random-weight model folder that Hugging Face transformers loads:\n"
            "config.json, model.safetensors, generation_config.json and the tokenizer files.\n"
            "Presets: " +
                absl::StrJoin(model::PresetNames(), ", ") + ".");
  args.AddString("arch", "qwen2|llama|mistral", "architecture", "qwen2");
  args.AddString("preset", "NAME", "layer shapes", "tiny");
  args.AddString("tokenizer", "DIR", "folder with tokenizer.json to copy (fixes the vocabulary)");
  args.AddString("seed", "N", "random seed", "0");
  args.AddString("dtype", "fp32|bf16|fp16", "stored dtype of the weights", "fp32");
  args.AddString("init_std", "X", "standard deviation of the random weights", "0.02");
  args.AddString("num_layers", "N", "override: decoder layers");
  args.AddString("hidden_size", "N", "override: model width");
  args.AddString("intermediate_size", "N", "override: MLP width");
  args.AddString("num_heads", "N", "override: attention (query) heads");
  args.AddString("head_dim", "N", "override: width of one head");
  args.AddString("max_position_embeddings", "N", "override: positions the model supports");
  args.AddString("num_kv_heads", "N", "override: key/value heads (= heads for MHA)");
  args.AddString("tie_word_embeddings", "true|false", "override: share embedding and LM head");
  args.AddString("rope_scaling", "none|linear|llama3", "override: rotary scaling");
  args.AddString("attention_bias", "true|false", "override (llama, mistral): q/k/v/o biases");
  args.AddString("mlp_bias", "true|false", "override (llama, mistral): MLP biases");
  args.AddString("out", "DIR", "output folder");
  if (auto code = args.ParseOrExit(argc, argv, first)) return *code;
  if (!args.Get("tokenizer") || !args.Get("out")) {
    std::cerr << "gpe: --tokenizer and --out are required\n\n" << args.Help();
    return 2;
  }
  model::MakeModelOptions o;
  o.arch = *args.Get("arch");
  o.preset = *args.Get("preset");
  o.tokenizer_dir = *args.Get("tokenizer");
  if (!absl::SimpleAtoi(*args.Get("seed"), &o.seed) ||
      !absl::SimpleAtod(*args.Get("init_std"), &o.init_std) || o.init_std <= 0) {
    return Fail(absl::InvalidArgumentError("--seed takes an integer, --init_std a positive number"),
                2);
  }
  const std::string dtype = *args.Get("dtype");
  if (dtype == "fp32") {
    o.dtype = model::DType::kF32;
  } else if (dtype == "bf16") {
    o.dtype = model::DType::kBF16;
  } else if (dtype == "fp16") {
    o.dtype = model::DType::kF16;
  } else {
    return Fail(absl::InvalidArgumentError("--dtype takes fp32, bf16 or fp16"), 2);
  }
  for (const auto& [flag, target] :
       {std::pair{"num_layers", &o.num_layers}, std::pair{"hidden_size", &o.hidden_size},
        std::pair{"intermediate_size", &o.intermediate_size}, std::pair{"num_heads", &o.num_heads},
        std::pair{"head_dim", &o.head_dim}, std::pair{"num_kv_heads", &o.num_kv_heads},
        std::pair{"max_position_embeddings", &o.max_position_embeddings}}) {
    if (auto v = args.Get(flag)) {
      int64_t n;
      if (!absl::SimpleAtoi(*v, &n) || n <= 0) {
        return Fail(absl::InvalidArgumentError(
                        absl::StrCat("--", flag, " takes a positive integer, got '", *v, "'")),
                    2);
      }
      *target = n;
    }
  }
  for (const auto& [flag, target] :
       {std::pair{"tie_word_embeddings", &o.tie_word_embeddings},
        std::pair{"attention_bias", &o.attention_bias}, std::pair{"mlp_bias", &o.mlp_bias}}) {
    if (auto v = args.Get(flag)) {
      auto b = ParseBool(flag, *v);
      if (!b.ok()) return Fail(b.status(), 2);
      *target = *b;
    }
  }
  if (auto v = args.Get("rope_scaling")) o.rope_scaling = *v;
  if (absl::Status s = model::MakeModel(o, *args.Get("out")); !s.ok()) return Fail(s);
  std::cerr << "gpe: wrote " << o.arch << " " << o.preset << " model to " << *args.Get("out")
            << "\n";
  return 0;
}

int DefaultModelCommand(int argc, char** argv, int first) {
  Args args("gpe default-model --out DIR",
            "Writes the built-in default model (the English-to-German translator that gpeserve\n"
            "and gpe eval use without --model; made by scripts/train-default-model) as a\n"
            "Hugging Face model folder.");
  args.AddString("out", "DIR", "output folder (created if missing)");
  if (auto code = args.ParseOrExit(argc, argv, first)) return *code;
  if (!args.Get("out")) {
    std::cerr << "gpe: --out is required\n\n" << args.Help();
    return 2;
  }
  if (absl::Status s = model::WriteDefaultModel(*args.Get("out")); !s.ok()) return Fail(s);
  std::cerr << "gpe: wrote " << model::kDefaultModelName << " to " << *args.Get("out") << "\n";
  return 0;
}

int QuantizeCommand(int argc, char** argv, int first) {
  Args args("gpe quantize --model DIR --out DIR [options]",
            "Writes an int8 copy of a model folder: every matrix (embedding included) as int8\n"
            "with one float32 scale per output row, symmetric; norms and biases in fp32. A\n"
            "quarter of fp32's bytes; serving it equals serving the original with --dtype int8.");
  args.AddString("model", "DIR", "model folder to quantize (fp32, bf16 or fp16 weights)");
  args.AddString("out", "DIR", "output folder");
  args.AddString("threads", "N", "CPU threads (0 = all cores)", "0");
  if (auto code = args.ParseOrExit(argc, argv, first)) return *code;
  if (!args.Get("model") || !args.Get("out")) {
    std::cerr << "gpe: --model and --out are required\n\n" << args.Help();
    return 2;
  }
  int threads = 0;
  if (!absl::SimpleAtoi(*args.Get("threads"), &threads) || threads < 0) {
    return Fail(absl::InvalidArgumentError("--threads takes a whole number"), 2);
  }
  if (absl::Status s = model::QuantizeModel(*args.Get("model"), *args.Get("out"), threads);
      !s.ok()) {
    return Fail(s);
  }
  std::cerr << "gpe: wrote " << *args.Get("out") << "\n";
  return 0;
}

int LogitsCommand(int argc, char** argv, int first) {
  Args args("gpe logits --model DIR --tokens 1,2,3 --out FILE.npy [options]",
            "Runs the model over the tokens and writes float32 logits [T, vocab] as a NumPy\n"
            "file. Attention is causal within each segment (--segments splits the tokens into\n"
            "independent sequences, batched in one forward pass).");
  args.AddString("model", "DIR", "model folder");
  args.AddString("tokens", "IDS", "comma-separated token ids");
  args.AddString("positions", "IDS", "comma-separated position ids (default: 0.. per segment)");
  args.AddString("segments", "LENS", "lengths of independent sequences (default: one)");
  args.AddString("dtype", model::kServingDtypeChoices, model::kServingDtypeHelp, "auto");
  args.AddString("device", "cpu|cuda", "device", "cpu");
  args.AddString("threads", "N", "CPU threads (0 = all cores)", "0");
  args.AddString("out", "FILE", "output .npy file");
  if (auto code = args.ParseOrExit(argc, argv, first)) return *code;
  if (!args.Get("model") || !args.Get("tokens") || !args.Get("out")) {
    std::cerr << "gpe: --model, --tokens and --out are required\n\n" << args.Help();
    return 2;
  }
  auto tokens = ParseIntList("tokens", *args.Get("tokens"));
  if (!tokens.ok()) return Fail(tokens.status(), 2);
  const int64_t t = static_cast<int64_t>(tokens->size());
  std::vector<int64_t> segments = {t};
  if (auto s = args.Get("segments")) {
    auto parsed = ParseIntList("segments", *s);
    if (!parsed.ok()) return Fail(parsed.status(), 2);
    segments = *parsed;
  }
  int64_t total = 0;
  for (int64_t len : segments) total += len > 0 ? len : -1 - t;  // a bad length fails the sum
  if (t == 0 || total != t) {
    return Fail(absl::InvalidArgumentError("--segments must be positive lengths adding up to the "
                                           "number of tokens"),
                2);
  }
  std::vector<int64_t> positions;
  if (auto p = args.Get("positions")) {
    auto parsed = ParseIntList("positions", *p);
    if (!parsed.ok()) return Fail(parsed.status(), 2);
    positions = *parsed;
  } else {
    for (int64_t len : segments) {
      for (int64_t i = 0; i < len; ++i) positions.push_back(i);
    }
  }
  if (static_cast<int64_t>(positions.size()) != t) {
    return Fail(absl::InvalidArgumentError("--positions needs one id per token"), 2);
  }
  int threads = 0;
  if (!absl::SimpleAtoi(*args.Get("threads"), &threads)) {
    return Fail(absl::InvalidArgumentError("--threads takes an integer"), 2);
  }
  auto loaded = model::Model::Load(
      *args.Get("model"),
      {.dtype = *args.Get("dtype"), .device = *args.Get("device"), .threads = threads});
  if (!loaded.ok()) return Fail(loaded.status());
  const model::Model& m = **loaded;
  std::cerr << "gpe: " << m.kernel_path() << "\n";

  // Block-diagonal causal mask: each token sees the earlier tokens of its own segment.
  torch::Tensor allowed = torch::zeros({t, t}, torch::kBool);
  int64_t start = 0;
  for (int64_t len : segments) {
    allowed.slice(0, start, start + len)
        .slice(1, start, start + len)
        .copy_(model::DenseAttention::CausalMask(len));
    start += len;
  }
  model::DenseAttention attention({}, {}, allowed);
  auto logits =
      m.Forward(torch::tensor(*tokens, torch::kInt64), torch::tensor(positions, torch::kInt64),
                torch::arange(t, torch::kInt64), attention);
  if (!logits.ok()) return Fail(logits.status());
  const torch::Tensor out = logits->contiguous();
  if (absl::Status s = model::WriteNpyFloat32(*args.Get("out"), {out.size(0), out.size(1)},
                                              out.data_ptr<float>());
      !s.ok()) {
    return Fail(s);
  }
  return 0;
}

}  // namespace gpeserve::cli
