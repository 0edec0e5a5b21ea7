// gpe train: full fine-tuning of a model folder on a parallel corpus (engine/train/trainer.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/eval/dataset.h"
#include "engine/train/trainer.h"

namespace gpeserve::cli {
namespace {

// "K" or "K1-K2" into config.wait_k (and wait_k_max).
bool ParseWaitK(const std::string& text, train::TrainConfig* config) {
  const size_t dash = text.find('-');
  if (dash == std::string::npos) {
    config->wait_k_max = 0;
    return absl::SimpleAtoi(text, &config->wait_k) && config->wait_k >= 1;
  }
  return absl::SimpleAtoi(text.substr(0, dash), &config->wait_k) &&
         absl::SimpleAtoi(text.substr(dash + 1), &config->wait_k_max) && config->wait_k >= 1 &&
         config->wait_k_max >= config->wait_k;
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
  Args args("gpe train --init DIR --data FILE.json --out DIR [options]",
            "Fine-tunes every weight of the model in --init on a data set (a JSON array of\n"
            "objects with source and target strings) with AdamW, linear warmup then linear\n"
            "decay, gradient accumulation and clipping, and writes a model folder to --out\n"
            "(plus --out/checkpoint-STEP every --save_every steps) that gpe eval and gpeserve\n"
            "load. Modes (docs/GPE.md 7): streaming (group positions, the wait-k mask with\n"
            "--wait_k, for models served with GPE), batch (plain causal, loss on the target),\n"
            "or mixed (each example batch with probability --batch_fraction, else streaming).\n"
            "--resume CHECKPOINT continues a run exactly where that checkpoint left it (same\n"
            "flags). fp32 on the CPU, or --device cuda.");
  args.AddString("init", "DIR", "model folder to start from (make-model or a checkpoint)");
  args.AddString("data", "FILE", "training data: JSON array of objects");
  args.AddString("source_key", "KEY", "source field", "en");
  args.AddString("target_key", "KEY", "target field", "de");
  args.AddString("mode", "batch|streaming|mixed", "training mode", "batch");
  args.AddString("wait_k", "K|K1-K2",
                 "streaming: source words read before the first write (a range: drawn per "
                 "example and epoch)",
                 "3");
  args.AddString("batch_fraction", "P", "mixed: share of examples trained in batch mode", "0.5");
  args.AddString("resume", "DIR", "a checkpoint-STEP folder of an earlier run to continue");
  args.AddString("profile", "NAME|FILE", "prompt profile", "qwen2.5");
  args.AddString("instruction", "TEXT", "override the profile's instruction");
  args.AddString("epochs", "N", "passes over the data", "1");
  args.AddString("lr", "X", "peak learning rate", "0.0003");
  args.AddString("warmup", "N", "warmup steps", "0");
  args.AddString("batch_size", "N", "sequences per micro-batch", "8");
  args.AddString("grad_accum", "N", "micro-batches per optimizer step", "1");
  args.AddString("max_grad_norm", "X", "gradient clipping (0: none)", "1.0");
  args.AddString("weight_decay", "X", "AdamW weight decay", "0.01");
  args.AddString("seed", "N", "shuffling seed", "0");
  args.AddString("save_every", "N", "checkpoint every N steps (0: only at the end)", "0");
  args.AddString("log_every", "N", "print the loss every N steps", "10");
  args.AddString("device", "cpu|cuda", "device", "cpu");
  args.AddString("threads", "N", "CPU threads (0 = all cores)", "0");
  args.AddString("save_dtype", "fp32|bf16|fp16", "dtype of the written weights", "fp32");
  args.AddString("out", "DIR", "output model folder");
  if (auto code = args.ParseOrExit(argc, argv, first)) return *code;
  if (!args.Get("init") || !args.Get("data") || !args.Get("out")) {
    std::cerr << "gpe: --init, --data and --out are required\n\n" << args.Help();
    return 2;
  }
  int epochs = 0, warmup = 0, batch_size = 0, accum = 0, save_every = 0, log_every = 0, threads = 0;
  uint64_t seed = 0;
  train::TrainConfig config;
  config.mode = *args.Get("mode");
  if (!absl::SimpleAtoi(*args.Get("epochs"), &epochs) || epochs < 1 ||
      !absl::SimpleAtoi(*args.Get("warmup"), &warmup) || warmup < 0 ||
      !absl::SimpleAtoi(*args.Get("batch_size"), &batch_size) || batch_size < 1 ||
      !absl::SimpleAtoi(*args.Get("grad_accum"), &accum) || accum < 1 ||
      !absl::SimpleAtoi(*args.Get("save_every"), &save_every) || save_every < 0 ||
      !absl::SimpleAtoi(*args.Get("log_every"), &log_every) || log_every < 1 ||
      !absl::SimpleAtoi(*args.Get("threads"), &threads) || threads < 0 ||
      !absl::SimpleAtoi(*args.Get("seed"), &seed) || !ParseWaitK(*args.Get("wait_k"), &config) ||
      !absl::SimpleAtod(*args.Get("batch_fraction"), &config.batch_fraction) ||
      config.batch_fraction < 0 || config.batch_fraction > 1 ||
      !absl::SimpleAtod(*args.Get("lr"), &config.lr) || config.lr <= 0 ||
      !absl::SimpleAtod(*args.Get("max_grad_norm"), &config.max_grad_norm) ||
      config.max_grad_norm < 0 ||
      !absl::SimpleAtod(*args.Get("weight_decay"), &config.weight_decay) ||
      config.weight_decay < 0) {
    std::cerr
        << "gpe: --epochs, --batch_size, --grad_accum, --log_every take positive whole "
           "numbers; --wait_k a positive whole number or a range K1-K2; --warmup, "
           "--save_every, --threads, --seed whole numbers; --lr a positive number; "
           "--max_grad_norm, --weight_decay numbers >= 0; --batch_fraction a number in [0, 1]\n";
    return 2;
  }
  if (config.mode != "batch" && config.mode != "streaming" && config.mode != "mixed") {
    std::cerr << "gpe: --mode takes batch, streaming or mixed\n";
    return 2;
  }
  const std::string save_name = *args.Get("save_dtype");
  if (save_name != "fp32" && save_name != "bf16" && save_name != "fp16") {
    std::cerr << "gpe: --save_dtype takes fp32, bf16 or fp16\n";
    return 2;
  }
  const model::DType save_dtype = save_name == "fp32"   ? model::DType::kF32
                                  : save_name == "bf16" ? model::DType::kBF16
                                                        : model::DType::kF16;
  auto profile = policy::LoadProfile(*args.Get("profile"));
  if (!profile.ok()) {
    std::cerr << "gpe: " << profile.status().message() << "\n";
    return 1;
  }
  if (auto text = args.Get("instruction")) profile->instruction = *text;
  auto data =
      eval::LoadDataset(*args.Get("data"), *args.Get("source_key"), *args.Get("target_key"));
  if (!data.ok()) {
    std::cerr << "gpe: " << data.status().message() << "\n";
    return 1;
  }
  if (data->empty()) {
    std::cerr << "gpe: " << *args.Get("data") << " has no examples\n";
    return 1;
  }
  auto model = model::Model::Load(
      *args.Get("init"), {.dtype = "fp32", .device = *args.Get("device"), .threads = threads});
  if (!model.ok()) {
    std::cerr << "gpe: " << model.status().message() << "\n";
    return 1;
  }
  const int64_t micro_batches = (static_cast<int64_t>(data->size()) + batch_size - 1) / batch_size;
  config.total_steps = static_cast<int>(std::max<int64_t>(1, epochs * micro_batches / accum));
  config.warmup_steps = warmup;
  auto trainer = train::Trainer::Create(*model, *profile, config);
  if (!trainer.ok()) {
    std::cerr << "gpe: " << trainer.status().message() << "\n";
    return 1;
  }
  int64_t skip = 0;  // micro-batches already done by the run being resumed
  if (auto resume = args.Get("resume")) {
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
        const std::string dir = absl::StrFormat("%s/checkpoint-%d", *args.Get("out"), step);
        absl::Status s = (*trainer)->Save(*args.Get("init"), dir, save_dtype);
        if (s.ok()) s = (*trainer)->SaveState(dir);
        if (!s.ok()) {
          std::cerr << "gpe: " << s.message() << "\n";
          return 1;
        }
      }
    }
  }
  progress.Done();
  if (absl::Status s = (*trainer)->Save(*args.Get("init"), *args.Get("out"), save_dtype); !s.ok()) {
    std::cerr << "gpe: " << s.message() << "\n";
    return 1;
  }
  std::fprintf(stderr, "gpe: wrote %s\n", args.Get("out")->c_str());
  return 0;
}

}  // namespace gpeserve::cli
