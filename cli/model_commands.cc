// gpe make-model / gpe quantize / gpe logits: random-weight model folders, int8 copies and
// golden logits.
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/make_model.h"
#include "cli/quantize.h"
#include "engine/formats/npy.h"
#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "flags/groups.h"

namespace gpeserve::cli {
namespace {

// "1,2,3" -> {1, 2, 3}; a list flag's parser (flags::FlagSet::AddParsed).
absl::Status ParseIntList(std::string_view text, std::optional<std::vector<int64_t>>* values) {
  std::vector<int64_t> parsed;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError("takes whole numbers separated by commas");
    }
    parsed.push_back(v);
  }
  *values = std::move(parsed);
  return absl::OkStatus();
}

// An override that is unset unless given: true|false (or 1|0).
void AddBoolOverride(flags::FlagSet& flags, std::string name, std::string help,
                     std::optional<bool>* field) {
  flags.AddParsed(std::move(name), "true|false", std::move(help), "",
                  [field](std::string_view text) {
                    if (text == "true" || text == "1") {
                      *field = true;
                    } else if (text == "false" || text == "0") {
                      *field = false;
                    } else {
                      return absl::InvalidArgumentError("takes true or false");
                    }
                    return absl::OkStatus();
                  });
}

int Fail(const absl::Status& status, int code = 1) {
  std::cerr << "gpe: " << status.message() << "\n";
  return code;
}

}  // namespace

int MakeModelCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe make-model --tokenizer DIR --out DIR [options]",
      "Writes a random-weight model folder that Hugging Face transformers loads:\n"
      "config.json, model.safetensors, generation_config.json and the tokenizer files.\n"
      "Presets: " +
          absl::StrJoin(model::PresetNames(), ", ") + ".");
  model::MakeModelOptions o;
  flags.Add("arch", "qwen2|llama|mistral|gemma2|gemma3|qwen3|phi3",
            "architecture (default: the preset's, qwen2 for tiny and small)", &o.arch);
  flags.Add("preset", "NAME", "layer shapes", &o.preset);
  flags.Add("tokenizer", "DIR", "folder with tokenizer.json to copy (fixes the vocabulary)",
            &o.tokenizer_dir);
  flags.Add("seed", "N", "random seed", &o.seed);
  flags.AddChoice(
      "dtype", "stored dtype of the weights", &o.dtype,
      {{"fp32", model::DType::kF32}, {"bf16", model::DType::kBF16}, {"fp16", model::DType::kF16}});
  flags.Add("init_std", "X", "standard deviation of the random weights", &o.init_std);
  // Bounds are inclusive; the standard deviation must exceed 0.
  flags.AddCheck([&o] {
    if (o.init_std > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("--init_std takes a number > 0 (got '", o.init_std, "')"));
  });
  flags.Add("num_layers", "N", "override: decoder layers", &o.num_layers, {.min = 1});
  flags.Add("hidden_size", "N", "override: model width", &o.hidden_size, {.min = 1});
  flags.Add("intermediate_size", "N", "override: MLP width", &o.intermediate_size, {.min = 1});
  flags.Add("num_heads", "N", "override: attention (query) heads", &o.num_heads, {.min = 1});
  flags.Add("head_dim", "N", "override: width of one head", &o.head_dim, {.min = 1});
  flags.Add("max_position_embeddings", "N", "override: positions the model supports",
            &o.max_position_embeddings, {.min = 1});
  flags.Add("num_kv_heads", "N", "override: key/value heads (= heads for MHA)", &o.num_kv_heads,
            {.min = 1});
  AddBoolOverride(flags, "tie_word_embeddings", "override: share embedding and LM head",
                  &o.tie_word_embeddings);
  flags.Add("rope_scaling", "none|linear|llama3|longrope",
            "override: rotary scaling (longrope: phi3)", &o.rope_scaling);
  AddBoolOverride(flags, "attention_bias",
                  "override (llama, gemma2, gemma3, qwen3): q/k/v/o biases", &o.attention_bias);
  AddBoolOverride(flags, "mlp_bias", "override (llama): MLP biases", &o.mlp_bias);
  flags.Add("sliding_window", "N",
            "override: sliding-window width, 0 = none (mistral, phi3, gemma2's even layers, "
            "gemma3's local layers; qwen2/qwen3 from --max_window_layers on)",
            &o.sliding_window, {.min = 0});
  flags.Add("sliding_window_pattern", "N",
            "override (gemma3): every N-th layer is global, the others local (windowed, "
            "rotating with base 10000); 6 as Gemma 3",
            &o.sliding_window_pattern, {.min = 1});
  flags.Add("max_window_layers", "N", "override (qwen2, qwen3): first windowed layer",
            &o.max_window_layers, {.min = 0});
  flags.Add("attn_logit_softcapping", "X", "override (gemma2): attention-score soft cap, 0 = none",
            &o.attn_logit_softcapping, {.min = 0});
  flags.Add("final_logit_softcapping", "X",
            "override (gemma2, gemma3): final-logit soft cap, 0 = none", &o.final_logit_softcapping,
            {.min = 0});
  flags.Add("partial_rotary_factor", "X", "override (phi3): share of head_dim that rotates",
            &o.partial_rotary_factor);
  flags.Add("original_max_position_embeddings", "N",
            "override (phi3 longrope): positions below it take the short factors",
            &o.original_max_position_embeddings, {.min = 1});
  std::optional<std::string> out;
  flags.Add("out", "DIR", "output folder", &out);
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (!flags.Given("tokenizer") || !out) {
    std::cerr << "gpe: --tokenizer and --out are required\n\n" << flags.Help();
    return 2;
  }
  if (absl::Status s = model::MakeModel(o, *out); !s.ok()) return Fail(s);
  std::cerr << "gpe: wrote " << (o.arch.empty() ? "" : o.arch + " ") << o.preset << " model to "
            << *out << "\n";
  return 0;
}

int DefaultModelCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe default-model --out DIR",
      "Writes the built-in default model (the English-to-German translator that gpeserve\n"
      "and gpe eval use without --model; made by scripts/train-default-model) as a\n"
      "Hugging Face model folder, with its German-to-English LoRA adapter in DIR/de-en\n"
      "(a PEFT folder: gpe eval --model DIR --adapter DIR/de-en).");
  std::optional<std::string> out;
  flags.Add("out", "DIR", "output folder (created if missing)", &out);
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (!out) {
    std::cerr << "gpe: --out is required\n\n" << flags.Help();
    return 2;
  }
  if (absl::Status s = model::WriteDefaultModel(*out); !s.ok()) return Fail(s);
  std::cerr << "gpe: wrote " << model::kDefaultModelName << " to " << *out << "\n";
  return 0;
}

int QuantizeCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe quantize --model DIR --out DIR [options]",
      "Writes an int8 copy of a model folder: every matrix (embedding included) as int8\n"
      "with one float32 scale per output row, symmetric; norms and biases in fp32. A\n"
      "quarter of fp32's bytes; serving it equals serving the original with --dtype int8.");
  std::optional<std::string> model_dir, out;
  int threads = 0;
  flags.Add("model", "DIR", "model folder to quantize (fp32, bf16 or fp16 weights)", &model_dir);
  flags.Add("out", "DIR", "output folder", &out);
  flags.Add("threads", "N", "CPU threads (0 = all cores)", &threads, {.min = 0});
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (!model_dir || !out) {
    std::cerr << "gpe: --model and --out are required\n\n" << flags.Help();
    return 2;
  }
  if (absl::Status s = model::QuantizeModel(*model_dir, *out, threads); !s.ok()) return Fail(s);
  std::cerr << "gpe: wrote " << *out << "\n";
  return 0;
}

int LogitsCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe logits --model DIR --tokens 1,2,3 --out FILE.npy [options]",
      "Runs the model over the tokens and writes float32 logits [T, vocab] as a NumPy\n"
      "file. Attention is causal within each segment (--segments splits the tokens into\n"
      "independent sequences, batched in one forward pass).");
  flags::ModelFlags model_flags;
  flags::AddModelFlags(flags, &model_flags, "model folder, or a GGUF file");
  flags::AddAdapterFlags(flags, &model_flags);
  std::optional<std::vector<int64_t>> tokens, positions, segments;
  flags.AddParsed("tokens", "IDS", "comma-separated token ids", "",
                  [&tokens](std::string_view text) { return ParseIntList(text, &tokens); });
  flags.AddParsed("positions", "IDS", "comma-separated position ids (default: 0.. per segment)", "",
                  [&positions](std::string_view text) { return ParseIntList(text, &positions); });
  flags.AddParsed("segments", "LENS", "lengths of independent sequences (default: one)", "",
                  [&segments](std::string_view text) { return ParseIntList(text, &segments); });
  std::optional<std::string> out;
  flags.Add("out", "FILE", "output .npy file", &out);
  flags.AddCheck([&] {
    if (!tokens) return absl::OkStatus();  // required: said after parsing
    const int64_t t = static_cast<int64_t>(tokens->size());
    int64_t total = 0;
    for (int64_t len : segments.value_or(std::vector<int64_t>{t})) {
      total += len > 0 ? len : -1 - t;  // a bad length fails the sum
    }
    if (t == 0 || total != t) {
      return absl::InvalidArgumentError(
          "--segments must be positive lengths adding up to the number of tokens");
    }
    if (positions && static_cast<int64_t>(positions->size()) != t) {
      return absl::InvalidArgumentError("--positions needs one id per token");
    }
    return absl::OkStatus();
  });
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (!model_flags.dir || !tokens || !out) {
    std::cerr << "gpe: --model, --tokens and --out are required\n\n" << flags.Help();
    return 2;
  }
  const int64_t t = static_cast<int64_t>(tokens->size());
  if (!segments) segments = std::vector<int64_t>{t};
  if (!positions) {
    positions.emplace();
    for (int64_t len : *segments) {
      for (int64_t i = 0; i < len; ++i) positions->push_back(i);
    }
  }
  auto loaded = LoadCommandModel(model_flags);
  if (!loaded.ok()) return Fail(loaded.status());
  const model::Model& m = *loaded->model;
  std::cerr << "gpe: " << m.kernel_path() << "\n";

  // Block-diagonal causal mask: each token sees the earlier tokens of its own segment.
  torch::Tensor allowed = torch::zeros({t, t}, torch::kBool);
  int64_t start = 0;
  for (int64_t len : *segments) {
    allowed.slice(0, start, start + len)
        .slice(1, start, start + len)
        .copy_(model::DenseAttention::CausalMask(len));
    start += len;
  }
  model::DenseAttention attention({}, {}, allowed);
  std::vector<model::AdapterSpan> adapters;
  if (loaded->adapter) adapters.push_back({loaded->adapter.get(), 0, t});
  auto logits =
      m.Forward(torch::tensor(*tokens, torch::kInt64), torch::tensor(*positions, torch::kInt64),
                torch::arange(t, torch::kInt64), attention, adapters);
  if (!logits.ok()) return Fail(logits.status());
  const torch::Tensor logits_out = logits->contiguous();
  if (absl::Status s = model::WriteNpyFloat32(*out, {logits_out.size(0), logits_out.size(1)},
                                              logits_out.data_ptr<float>());
      !s.ok()) {
    return Fail(s);
  }
  return 0;
}

}  // namespace gpeserve::cli
