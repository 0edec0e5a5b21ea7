// gpe train: full fine-tuning of a model folder on a parallel corpus (engine/train/trainer.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "engine/eval/dataset.h"
#include "engine/model/options.h"
#include "engine/train/trainer.h"
#include "flags/flags.h"
#include "flags/groups.h"

namespace gpeserve::cli {
namespace {

// "K" or "K1-K2" into config.wait_k and wait_k_max (0: a single K, no range).
absl::Status ParseWaitK(std::string_view text, train::TrainConfig* config) {
  const absl::string_view value(text.data(), text.size());
  const size_t dash = value.find('-');
  int low = 0, high = 0;
  const bool ok = dash == absl::string_view::npos
                      ? absl::SimpleAtoi(value, &low) && low >= 1
                      : absl::SimpleAtoi(value.substr(0, dash), &low) &&
                            absl::SimpleAtoi(value.substr(dash + 1), &high) && low >= 1 &&
                            high >= low;
  if (!ok) {
    return absl::InvalidArgumentError(
        "takes a whole number K >= 1 or a range K1-K2 with 1 <= K1 <= K2");
  }
  config->wait_k = low;
  config->wait_k_max = high;
  return absl::OkStatus();
}

// A one-line progress bar on a terminal (redrawn each step); log lines go above it. Off when
// stderr is not a terminal, where only the log lines are written.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(isatty(STDERR_FILENO) != 0) {}

  void Update(int64_t step, double seconds, double loss) {
    if (!tty_) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(total_, 1));
    const double eta = step > 0 ? seconds * (total_ - step) / step : 0;
    std::fprintf(stderr, "\r\033[K[%s%s] %lld/%lld loss %.4f %s elapsed %s left",
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 static_cast<long long>(step), static_cast<long long>(total_), loss,
                 Clock(seconds).c_str(), Clock(eta).c_str());
    drawn_ = true;
  }
  void Log(const std::string& line) {
    std::fprintf(stderr, "%s%s\n", drawn_ ? "\r\033[K" : "", line.c_str());
    drawn_ = false;
  }
  void Done() {
    if (drawn_) std::fputs("\n", stderr);
    drawn_ = false;
  }

 private:
  static std::string Clock(double seconds) {
    const int64_t s = static_cast<int64_t>(seconds);
    return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  }
  int64_t total_;
  bool tty_;
  bool drawn_ = false;
};

}  // namespace

int TrainCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe train --init DIR --data FILE.json --out DIR [options]",
      "Fine-tunes every weight of the model in --init on a data set (a JSON array of\n"
      "objects with source and target strings) with AdamW, linear warmup then linear\n"
      "decay, gradient accumulation and clipping, and writes a model folder to --out\n"
      "(plus --out/checkpoint-STEP every --save_every steps) that gpe eval and gpeserve\n"
      "load. Modes (docs/GPE.md 7): streaming (group positions, the wait-k mask with\n"
      "--wait_k, for models served with GPE), batch (plain causal, loss on the target),\n"
      "or mixed (each example batch with probability --batch_fraction, else streaming).\n"
      "--resume CHECKPOINT continues a run exactly where that checkpoint left it (same\n"
      "flags). fp32 on the CPU, or --device cuda.\n"
      "With --lora_r R only a LoRA adapter is trained (the base frozen in its stored\n"
      "dtype on the CPU, the adapter in fp32, in any mode) and --out is a PEFT adapter\n"
      "folder that peft, gpeserve --adapter and gpe eval --adapter load.");
  train::TrainConfig config;
  std::optional<std::string> init_dir, data_path, out_dir, resume, instruction;
  std::string source_key = "en", target_key = "de", profile_name = policy::kAutoProfile;
  int epochs = 1, batch_size = 8, accum = 1, save_every = 0, log_every = 10;
  uint64_t seed = 0;
  // The trainer takes fp32 weights whatever the folder holds.
  model::ModelOptions model_options{.dtype = "fp32"};
  model::DType save_dtype = model::DType::kF32;
  flags.Add("init", "DIR", "model folder to start from (make-model or a checkpoint)", &init_dir);
  model::AdapterConfig lora;
  lora.r = 32;
  lora.lora_alpha = 64;
  lora.target_list = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  flags::AddLoraFlags(flags, &lora);
  flags.Add("data", "FILE", "training data: JSON array of objects", &data_path);
  flags.Add("source_key", "KEY", "source field", &source_key);
  flags.Add("target_key", "KEY", "target field", &target_key);
  flags.Add("mode", "batch|streaming|mixed", "training mode", &config.mode);
  flags.AddCheck([&config] {
    if (config.mode == "batch" || config.mode == "streaming" || config.mode == "mixed") {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--mode takes batch|streaming|mixed (got '", config.mode, "')"));
  });
  flags.AddParsed("wait_k", "K|K1-K2",
                  "streaming: source words read before the first write (a range: drawn per "
                  "example and epoch)",
                  absl::StrCat(config.wait_k),
                  [&config](std::string_view text) { return ParseWaitK(text, &config); });
  flags.Add("batch_fraction", "P", "mixed: share of examples trained in batch mode",
            &config.batch_fraction, {.min = 0, .max = 1});
  flags.Add("resume", "DIR", "a checkpoint-STEP folder of an earlier run to continue", &resume);
  flags.Add("profile", "NAME|FILE",
            "prompt profile: auto (the model's chat format, as gpeserve serves it), a built-in "
            "one's name, or a JSON file",
            &profile_name);
  flags.Add("instruction", "TEXT", "override the profile's instruction", &instruction);
  flags.Add("epochs", "N", "passes over the data", &epochs, {.min = 1});
  flags.Add("lr", "X", "peak learning rate", &config.lr);
  // Bounds are inclusive, and 0 is no learning rate.
  flags.AddCheck([&config] {
    if (config.lr > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("--lr takes a number > 0 (got '", config.lr, "')"));
  });
  flags.Add("warmup", "N", "warmup steps", &config.warmup_steps, {.min = 0});
  flags.Add("batch_size", "N", "sequences per micro-batch", &batch_size, {.min = 1});
  flags.Add("grad_accum", "N", "micro-batches per optimizer step", &accum, {.min = 1});
  flags.Add("max_grad_norm", "X", "gradient clipping (0: none)", &config.max_grad_norm, {.min = 0});
  flags.Add("weight_decay", "X", "AdamW weight decay", &config.weight_decay, {.min = 0});
  flags.Add("seed", "N", "shuffling seed (and the LoRA adapter's initial values)", &seed);
  flags.Add("save_every", "N", "checkpoint every N steps (0: only at the end)", &save_every,
            {.min = 0});
  flags.Add("log_every", "N", "print the loss every N steps", &log_every, {.min = 1});
  flags.Add("device", "cpu|cuda", "device", &model_options.device);
  flags.Add("threads", "N", "CPU threads (0 = all cores)", &model_options.threads, {.min = 0});
  flags.AddChoice(
      "save_dtype", "dtype of the written weights", &save_dtype,
      {{"fp32", model::DType::kF32}, {"bf16", model::DType::kBF16}, {"fp16", model::DType::kF16}});
  flags.Add("out", "DIR", "output model folder", &out_dir);
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (flags.Given("lora_r") || flags.Given("lora_alpha") || flags.Given("lora_targets") ||
      flags.Given("use_rslora")) {
    if (!flags.Given("lora_r")) {
      std::cerr << "gpe: --lora_alpha, --lora_targets and --use_rslora need --lora_r\n";
      return 2;
    }
    config.lora = lora;
    config.lora_seed = seed;
    // The frozen base stays in its stored dtype on the CPU (activations are fp32 there); on
    // CUDA activations follow the weights, so the base is fp32 like the adapter.
    if (model_options.device == "cpu") model_options.dtype = "auto";
  }
  if (!init_dir || !data_path || !out_dir) {
    std::cerr << "gpe: --init, --data and --out are required\n\n" << flags.Help();
    return 2;
  }
  // A named profile is checked before the model loads; auto needs the model's type.
  if (profile_name != policy::kAutoProfile) {
    if (auto early = policy::LoadProfile(profile_name); !early.ok()) {
      std::cerr << "gpe: " << early.status().message() << "\n";
      return 1;
    }
  }
  auto data = eval::LoadDataset(*data_path, source_key, target_key);
  if (!data.ok()) {
    std::cerr << "gpe: " << data.status().message() << "\n";
    return 1;
  }
  if (data->empty()) {
    std::cerr << "gpe: " << *data_path << " has no examples\n";
    return 1;
  }
  auto model = model::Model::Load(*init_dir, model_options);
  if (!model.ok()) {
    std::cerr << "gpe: " << model.status().message() << "\n";
    return 1;
  }
  auto resolved_name = policy::ResolveProfileName(profile_name, (*model)->config().model_type(),
                                                  (*model)->chat_template());
  if (!resolved_name.ok()) {
    std::cerr << "gpe: " << resolved_name.status().message() << "\n";
    return 1;
  }
  auto profile = policy::LoadProfile(*resolved_name);
  if (!profile.ok()) {
    std::cerr << "gpe: " << profile.status().message() << "\n";
    return 1;
  }
  if (instruction) profile->instruction = *instruction;
  const int64_t micro_batches = (static_cast<int64_t>(data->size()) + batch_size - 1) / batch_size;
  config.total_steps = static_cast<int>(std::max<int64_t>(1, epochs * micro_batches / accum));
  auto trainer = train::Trainer::Create(*model, *profile, config);
  if (!trainer.ok()) {
    std::cerr << "gpe: " << trainer.status().message() << "\n";
    return 1;
  }
  int64_t skip = 0;  // micro-batches already done by the run being resumed
  if (resume) {
    if (absl::Status s = (*trainer)->LoadState(*resume); !s.ok()) {
      std::cerr << "gpe: " << s.message() << "\n";
      return 1;
    }
    skip = (*trainer)->steps() * accum;
    std::fprintf(stderr, "gpe: resuming %s at step %lld\n", resume->c_str(),
                 static_cast<long long>((*trainer)->steps()));
  }
  std::fprintf(stderr, "gpe: %zu examples, %d epochs, %d optimizer steps of %d x %d sequences\n",
               data->size(), epochs, config.total_steps, accum, batch_size);
  // The shuffle and the per-example draws (mixed mode, a wait-k range) come from the seed
  // alone, so a resumed run replays them and continues with the same batches.
  std::mt19937_64 shuffle_rng(seed), draw_rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::vector<size_t> order(data->size());
  std::vector<train::Sequence> sequences(data->size());
  Progress progress(config.total_steps);
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens = 0, micro = 0;
  double loss_sum = 0;
  int loss_count = 0;
  // Sequences are drawn anew each epoch only when there is something to draw.
  const bool draws = config.mode == "mixed" || config.wait_k_max > config.wait_k;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (size_t i = 0; i < data->size() && (epoch == 0 || draws); ++i) {
      auto s = (*trainer)->MakeSequence((*data)[i].source, (*data)[i].reference, draw_rng);
      if (!s.ok()) {
        std::cerr << "gpe: item " << i << ": " << s.status().message() << "\n";
        return 1;
      }
      sequences[i] = *std::move(s);
    }
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    for (size_t b = 0; b < order.size() && (*trainer)->steps() < config.total_steps;
         b += batch_size) {
      if (micro < skip) {
        ++micro;
        continue;
      }
      std::vector<train::Sequence> batch;
      for (size_t i = b; i < std::min(order.size(), b + batch_size); ++i) {
        batch.push_back(sequences[order[i]]);
        tokens += static_cast<int64_t>(sequences[order[i]].tokens.size());
      }
      auto loss = (*trainer)->Loss(batch, /*backward=*/true, 1.0 / accum);
      if (!loss.ok()) {
        std::cerr << "gpe: " << loss.status().message() << "\n";
        return 1;
      }
      loss_sum += *loss;
      ++loss_count;
      if (++micro % accum != 0) continue;
      const double lr = (*trainer)->OptimizerStep();
      const int64_t step = (*trainer)->steps();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress.Update(step, seconds, loss_sum / loss_count);
      if (step % log_every == 0 || step == config.total_steps) {
        progress.Log(absl::StrFormat("gpe: step %d/%d epoch %d loss %.4f lr %.2e %.0f tokens/s",
                                     step, config.total_steps, epoch + 1, loss_sum / loss_count, lr,
                                     tokens / seconds));
        loss_sum = 0;
        loss_count = 0;
      }
      if (save_every > 0 && step % save_every == 0) {
        const std::string dir = absl::StrFormat("%s/checkpoint-%d", *out_dir, step);
        absl::Status s = (*trainer)->Save(*init_dir, dir, save_dtype);
        if (s.ok()) s = (*trainer)->SaveState(dir);
        if (!s.ok()) {
          std::cerr << "gpe: " << s.message() << "\n";
          return 1;
        }
      }
    }
  }
  progress.Done();
  if (absl::Status s = (*trainer)->Save(*init_dir, *out_dir, save_dtype); !s.ok()) {
    std::cerr << "gpe: " << s.message() << "\n";
    return 1;
  }
  std::fprintf(stderr, "gpe: wrote %s\n", out_dir->c_str());
  return 0;
}

}  // namespace gpeserve::cli
