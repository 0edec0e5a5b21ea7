// gpe bench: throughput and latency of the engine (continuous batching) as the number of
// concurrent sessions grows. Every session streams the same kind of source (--words words,
// all available at once) through the wait-k policy and writes --target_tokens tokens (greedy,
// end-of-sequence ignored) so that every row does the same work per session. With --pace:
// capacity at speech pace instead (bench_pace.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/bench_pace.h"
#include "cli/bench_rows.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/eval/latency.h"
#include "engine/model/adapter.h"
#include "engine/model/model.h"
#include "engine/util/remove_tree.h"
#include "flags/groups.h"

namespace gpeserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One session whose prompt (the instruction) has at least `tokens` tokens, reading it while the
// short sessions come and go: its read is done at its first token.
class LongPrompt {
 public:
  LongPrompt(engine::Engine& eng, engine::SessionConfig config, int64_t tokens) : eng_(eng) {
    const tokenizer::Tokenizer& tok = *eng.model().tokenizer();
    // Words of the instruction: grown until the prompt has `tokens` tokens.
    auto prompt_tokens = [&](int words) {
      std::string instruction;
      for (const std::string& w : BenchSource(words)) absl::StrAppend(&instruction, w, " ");
      config.options.profile.instruction = instruction;
      return static_cast<int64_t>(tok.Encode(config.options.profile.Prefix())->size());
    };
    int words = 1;
    while (prompt_tokens(words) < tokens) words *= 2;
    int low = words / 2;  // too few
    while (low + 1 < words) {
      const int middle = (low + words) / 2;
      (prompt_tokens(middle) < tokens ? low : words) = middle;
    }
    prompt_tokens(words);
    config.options.policy.max_new_tokens = 2;
    config_ = config;
    prompt_tokens_ = static_cast<int64_t>(tok.Encode(config.options.profile.Prefix())->size());
  }
  int64_t prompt_tokens() const { return prompt_tokens_; }

  // Opens the session; Read() then tells whether its prompt has been read.
  absl::Status Start() {
    read_ = done_ = false;
    start_ = Clock::now();
    auto handle = eng_.Open(config_, [this](const engine::SessionEvent& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!read_) read_at_ = Clock::now();
      read_ = true;
      if (e.kind != engine::SessionEvent::Kind::kTokens) done_ = true;
      cv_.notify_all();
      return true;
    });
    if (!handle.ok()) return handle.status();
    (*handle)->Push({"hello", "world"});
    (*handle)->EndSource();
    return absl::OkStatus();
  }
  bool Read() {
    std::lock_guard<std::mutex> lock(mu_);
    return read_;
  }
  // Waits for the session's end; returns ms from Start to the end of its read.
  double Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    return Ms(read_at_ - start_);
  }

 private:
  engine::Engine& eng_;
  engine::SessionConfig config_;
  int64_t prompt_tokens_ = 0;
  Clock::time_point start_, read_at_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool read_ = false, done_ = false;  // guarded by mu_
};

// --long_prompt: the latency of short sessions alone and while one long prompt is being read.
int RunLongPromptRows(engine::Engine& eng, const engine::SessionConfig& config,
                      const std::vector<std::string>& source, const std::vector<int>& counts,
                      int64_t long_tokens, int rounds) {
  LongPrompt long_prompt(eng, config, long_tokens);
  if (absl::Status s = long_prompt.Start(); !s.ok()) {
    std::cerr << "gpe: " << s.message() << "\n";
    return 1;
  }
  const double alone_ms = long_prompt.Wait();
  std::cout << absl::StrFormat("long prompt: %d tokens, read in %.0f ms alone (%.0f tokens/s)\n",
                               long_prompt.prompt_tokens(), alone_ms,
                               long_prompt.prompt_tokens() / (alone_ms / 1e3));
  std::cout << absl::StrFormat("%8s %8s %11s %11s %8s %11s %11s %11s %10s\n", "sessions", "rounds",
                               "p50 alone", "p50 loaded", "ratio", "p90 alone", "p90 loaded",
                               "TTFT loaded", "long read");
  for (int n : counts) {
    std::vector<double> alone, loaded, ttft;
    for (int r = 0; r < rounds; ++r) {
      auto row = RunRow(eng, config, source, n);
      if (!row.ok()) {
        std::cerr << "gpe: " << row.status().message() << "\n";
        return 1;
      }
      alone.insert(alone.end(), row->latencies.begin(), row->latencies.end());
    }
    if (absl::Status s = long_prompt.Start(); !s.ok()) {
      std::cerr << "gpe: " << s.message() << "\n";
      return 1;
    }
    int loaded_rounds = 0;
    while (loaded_rounds < rounds) {
      auto row = RunRow(eng, config, source, n);
      if (!row.ok()) {
        std::cerr << "gpe: " << row.status().message() << "\n";
        return 1;
      }
      if (long_prompt.Read()) break;  // this round ended after the read: it does not count
      ++loaded_rounds;
      loaded.insert(loaded.end(), row->latencies.begin(), row->latencies.end());
      ttft.push_back(row->ttft_p50);
    }
    const double read_ms = long_prompt.Wait();
    const double p50_alone = eval::Percentile(alone, 50), p50_loaded = eval::Percentile(loaded, 50);
    if (loaded.empty()) {  // not one round ended while the long prompt was read
      std::cout << absl::StrFormat("%8d %8d %9.1fms %11s %8s %9.1fms %11s %11s %8.0fms\n", n, 0,
                                   p50_alone, "starved", "-", eval::Percentile(alone, 90), "-", "-",
                                   read_ms);
      continue;
    }
    std::cout << absl::StrFormat("%8d %8d %9.1fms %9.1fms %7.2fx %9.1fms %9.1fms %9.1fms %8.0fms\n",
                                 n, loaded_rounds, p50_alone, p50_loaded,
                                 p50_alone > 0 ? p50_loaded / p50_alone : 0.0,
                                 eval::Percentile(alone, 90), eval::Percentile(loaded, 90),
                                 eval::Percentile(ttft, 50), read_ms);
    std::cout.flush();
  }
  return 0;
}

// --sequential N: sessions arriving one after another (each opened when the one before ends),
// all with the same instruction of about `instruction_tokens` tokens, on an engine with the
// prefix cache and one without, alternating session by session so that both see the same
// machine: TTFT (Open to the first token) p50 and p90, and the prefix-cache hit rate after the
// first session (prompt blocks found / looked up).
int RunSequentialRows(const std::shared_ptr<const model::Model>& m,
                      engine::EngineConfig engine_config, engine::SessionConfig config,
                      const std::vector<std::string>& source, int sessions,
                      int instruction_tokens) {
  if (m->tokenizer() == nullptr) {
    std::cerr << "gpe: --sequential needs a model with a tokenizer\n";
    return 1;
  }
  std::string instruction = "Translate the following English speech into German.";
  while (true) {
    auto ids = m->tokenizer()->Encode(instruction);
    if (!ids.ok() || static_cast<int>(ids->size()) >= instruction_tokens) break;
    instruction +=
        " Keep names, numbers and dates as they are, and render each sentence faithfully.";
  }
  config.options.profile.instruction = instruction;
  const int64_t prompt = instruction_tokens + 64;
  engine_config.kv_blocks = 4 *
                                (prompt + 8 * static_cast<int64_t>(source.size()) +
                                 config.options.policy.max_new_tokens) /
                                engine_config.block_size +
                            32;
  engine_config.max_sessions = 2;
  std::vector<std::shared_ptr<engine::Engine>> engines;
  for (bool cache : {true, false}) {
    engine_config.prefix_cache = cache;
    auto eng = engine::Engine::Create(m, engine_config);
    if (!eng.ok()) {
      std::cerr << "gpe: " << eng.status().message() << "\n";
      return 1;
    }
    engines.push_back(*std::move(eng));
  }
  std::vector<double> ttft[2];
  engine::EngineStats after_first[2];
  for (int i = 0; i < sessions; ++i) {
    for (int e = 0; e < 2; ++e) {
      auto row = RunRow(*engines[e], config, source, 1);
      if (!row.ok()) {
        std::cerr << "gpe: " << row.status().message() << "\n";
        return 1;
      }
      if (i == 0) after_first[e] = engines[e]->stats();
      ttft[e].push_back(row->ttft_p50);
    }
  }
  std::cout << absl::StrFormat("%d sessions one after another, instruction %d tokens\n", sessions,
                               instruction_tokens);
  std::cout << absl::StrFormat("%14s %10s %10s %10s\n", "prefix cache", "TTFT p50", "TTFT p90",
                               "hit rate");
  for (int e = 0; e < 2; ++e) {
    const engine::EngineStats end = engines[e]->stats();
    const int64_t hits = end.kv.prefix_hits - after_first[e].kv.prefix_hits;
    const int64_t queries = hits + end.kv.prefix_misses - after_first[e].kv.prefix_misses;
    std::cout << absl::StrFormat(
        "%14s %8.1fms %8.1fms %10s\n", e == 0 ? "on" : "off", eval::Percentile(ttft[e], 50),
        eval::Percentile(ttft[e], 90),
        queries > 0 ? absl::StrFormat("%.3f", 1.0 * hits / queries) : std::string("-"));
    engines[e]->Shutdown();
  }
  const double on = eval::Percentile(ttft[0], 50), off = eval::Percentile(ttft[1], 50);
  std::cout << absl::StrFormat("TTFT p50 without the cache / with it: %.2fx\n",
                               on > 0 ? off / on : 0.0);
  return 0;
}

// Random adapters of rank `rank` (alpha 2 * rank) on every projection of `m`, written to a
// temporary folder and loaded as "a0", "a1", ...
absl::StatusOr<std::vector<std::shared_ptr<const model::Adapter>>> BenchAdapters(
    const model::Model& m, int count, int rank) {
  namespace fs = std::filesystem;
  model::AdapterConfig config;
  config.r = rank;
  config.lora_alpha = 2.0 * rank;
  config.target_list = {"all-linear"};
  const fs::path temp = fs::temp_directory_path() / absl::StrCat("gpe-bench-adapters-", ::getpid());
  std::vector<std::shared_ptr<const model::Adapter>> adapters;
  for (int i = 0; i < count; ++i) {
    const std::string dir = (temp / absl::StrCat("a", i)).string();
    auto tensors = model::RandomAdapterTensors(m, config, 1 + i, 0.02);
    if (!tensors.ok()) return tensors.status();
    if (absl::Status s = model::WriteAdapterFolder(dir, config, *tensors); !s.ok()) return s;
    auto adapter = model::LoadAdapter(dir, m, absl::StrCat("a", i));
    if (!adapter.ok()) return adapter.status();
    adapters.push_back(*std::move(adapter));
  }
  std::error_code ignored;
  model::RemoveTree(temp).IgnoreError();  // loaded adapters hold copies
  return adapters;
}

// --adapters N: per count, the base alone, the sessions spread over N adapters (one engine, so
// every step mixes them) and the base with one adapter merged (another engine), each the median
// of `rounds` interleaved runs: throughput and ms per forward step, and the ratios to the base.
int RunAdapterRows(const std::shared_ptr<const model::Model>& m,
                   const engine::EngineConfig& engine_config, const engine::SessionConfig& config,
                   const std::vector<std::string>& source, const std::vector<int>& counts,
                   int adapter_count, int rank, int rounds) {
  auto adapters = BenchAdapters(*m, adapter_count, rank);
  if (!adapters.ok()) {
    std::cerr << "gpe: " << adapters.status().message() << "\n";
    return 1;
  }
  std::vector<std::string> names;
  for (const auto& a : *adapters) names.push_back(a->name);
  auto merged_model = m->WithMergedAdapter(*adapters->front());
  if (!merged_model.ok()) {
    std::cerr << "gpe: " << merged_model.status().message() << "\n";
    return 1;
  }
  auto eng = engine::Engine::Create(m, engine_config, *adapters);
  auto merged = engine::Engine::Create(*merged_model, engine_config);
  if (!eng.ok() || !merged.ok()) {
    std::cerr << "gpe: " << (eng.ok() ? merged.status() : eng.status()).message() << "\n";
    return 1;
  }
  std::cout << absl::StrFormat(
      "%d adapters of rank %d on every projection (%d parameters each); median of %d rounds\n",
      adapter_count, rank, adapters->front()->parameters, rounds);
  std::cout << absl::StrFormat("%8s %10s %11s %7s %10s %11s %10s %10s %7s\n", "sessions",
                               "base tok/s", "mixed tok/s", "ratio", "base ms/st", "mixed ms/st",
                               "lora ms/st", "merged t/s", "ratio");
  for (int n : counts) {
    std::vector<double> base_rate, mixed_rate, merged_rate, base_step, mixed_step;
    for (int round = 0; round < rounds; ++round) {
      auto base = RunRow(**eng, config, source, n);
      auto mixed = RunRow(**eng, config, source, n, names);
      auto folded = RunRow(**merged, config, source, n);
      for (const auto* row : {&base, &mixed, &folded}) {
        if (!row->ok()) {
          std::cerr << "gpe: " << row->status().message() << "\n";
          return 1;
        }
      }
      base_rate.push_back(base->target_tokens / base->seconds);
      mixed_rate.push_back(mixed->target_tokens / mixed->seconds);
      merged_rate.push_back(folded->target_tokens / folded->seconds);
      base_step.push_back(1e3 * base->seconds / std::max<int64_t>(1, base->steps));
      mixed_step.push_back(1e3 * mixed->seconds / std::max<int64_t>(1, mixed->steps));
    }
    const double b = eval::Percentile(base_rate, 50), x = eval::Percentile(mixed_rate, 50),
                 f = eval::Percentile(merged_rate, 50), bs = eval::Percentile(base_step, 50),
                 xs = eval::Percentile(mixed_step, 50);
    std::cout << absl::StrFormat("%8d %10.1f %11.1f %6.2fx %10.2f %11.2f %10.2f %10.1f %6.2fx\n", n,
                                 b, x, x / b, bs, xs, xs - bs, f, f / b);
    std::cout.flush();
  }
  (*eng)->Shutdown();
  (*merged)->Shutdown();
  return 0;
}

}  // namespace

int BenchCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe bench (--preset NAME | --model DIR) [options]",
      "Runs --sessions concurrent streaming sessions on one engine for each count and\n"
      "prints aggregate target and source tokens/s, time to first token and inter-token\n"
      "latency (p50, p99), average tokens and sessions per forward step, and each row's\n"
      "target throughput relative to the first row. Each session gets --words source\n"
      "words at once (wait-k reads them as the policy asks) and writes --target_tokens\n"
      "tokens, greedy, end-of-sequence ignored.\n"
      "With --long_prompt N: for each count, the session latency (Open to end) of rounds\n"
      "of short sessions alone, then while one session reads a prompt of N tokens (only\n"
      "rounds that end before that read does count), and the ratio of the two medians.\n"
      "With --pace W: capacity at speech pace. For each count N, N speakers each stream\n"
      "corpus sentences at W words/s, a session per sentence (a new one when one ends;\n"
      "--long_form: one long-form session each), for --seconds; prints the p50 and p99\n"
      "word lag (from the arrival of the source word a target word needed to its\n"
      "delivery), the lag split into waiting for a step and computing, steps per word,\n"
      "and the largest N whose p99 lag is within --lag_slo (docs/streaming.md).\n"
      "With --sequential N: N sessions one after another sharing an instruction of\n"
      "--instruction_tokens tokens, on an engine with the prefix cache and one without\n"
      "(alternating): TTFT p50 and p90 and the cache's hit rate after the first session.");
  std::string preset = "qwen2.5-0.5b";
  flags.Add("preset", "NAME",
            "make a random-weight model of this preset ('default': the built-in model)", &preset);
  flags::ModelFlags model_flags;
  flags::AddModelFlags(flags, &model_flags, "an existing model folder instead of --preset");
  std::vector<int> counts = {1, 8, 32, 64};
  const std::vector<int> pace_counts = {1, 2, 4, 8, 16, 32};
  flags.AddParsed("sessions", "N,N",
                  "concurrent sessions per row (--pace: speakers; default 1,2,4,8,16,32)",
                  absl::StrJoin(counts, ","),
                  [&counts](std::string_view text) { return ParsePositiveList(text, &counts); });
  int words = 40;
  flags.Add("words", "N", "source words per session", &words, {.min = 1});
  engine::SessionConfig config;
  config.options.policy.wait_k = 3;
  flags::AddWaitKFlag(flags, &config.options.policy.wait_k);
  std::optional<int> target_tokens;
  flags.Add("target_tokens", "N", "target tokens per session (default: 2 per word)", &target_tokens,
            {.min = 1});
  // kv_blocks and max_sessions follow from the rows (below), not from flags.
  engine::EngineConfig engine_config;
  flags.Add("block_size", "N", "tokens per KV block", &engine_config.block_size, {.min = 1});
  flags.AddChoice("prefix_cache", "keep prompt-prefix blocks cached after their session ends",
                  &engine_config.prefix_cache, {{"on", true}, {"off", false}});
  flags::AddKvCacheDtypeFlag(flags, &engine_config);
  flags.Add("max_batch_tokens", "N", "tokens in one forward pass",
            &engine_config.scheduler.max_batch_tokens, {.min = 1});
  flags.Add("max_sessions_per_step", "N", "sessions in one forward pass",
            &engine_config.scheduler.max_sessions_per_step, {.min = 1});
  flags.AddChoice("fuse_reads", "run a read and the write it allows in one forward pass",
                  &engine_config.fuse_reads, {{"on", true}, {"off", false}});
  int long_prompt = 0, rounds = 5;
  flags.Add("long_prompt", "N", "tokens of the long prompt read meanwhile (0: off)", &long_prompt,
            {.min = 0});
  flags.Add("rounds", "N", "--long_prompt: rounds of short sessions per count", &rounds,
            {.min = 1});
  flags.Add("long_read_slowdown", "F",
            "engine: pace long reads to slow the others' steps at most F times (0: off)",
            &engine_config.long_read_slowdown, {.min = 0});
  int adapter_count = 0, adapter_rank = 32;
  flags.Add("adapters", "N",
            "LoRA: per count, sessions spread over N random adapters vs the base alone vs one "
            "adapter merged (median of --rounds interleaved runs each; 0: off)",
            &adapter_count, {.min = 0});
  flags.Add("adapter_rank", "R", "--adapters: rank of each (alpha 2R, every projection)",
            &adapter_rank, {.min = 1});
  PaceOptions pace;
  pace.words_per_second = 0;
  flags.Add("pace", "W", "capacity at speech pace: each speaker's words per second (0: off)",
            &pace.words_per_second, {.min = 0});
  flags.Add("lag_slo", "S", "--pace: the p99 word lag the capacity allows, in seconds",
            &pace.lag_slo_seconds, {.min = 0});
  flags.Add("seconds", "T", "--pace: seconds of arrivals per row", &pace.seconds, {.min = 0});
  flags.Add("long_form", "--pace: one long-form session per speaker, not one per sentence",
            &pace.long_form);
  flags.Add("seed", "N", "--pace: the corpus seed", &pace.seed);
  int sequential = 0, instruction_tokens = 300;
  flags.Add("sequential", "N",
            "N sessions one after another with one long instruction, prefix cache on vs off "
            "(0: off)",
            &sequential, {.min = 0});
  flags.Add("instruction_tokens", "T", "--sequential: tokens of the shared instruction",
            &instruction_tokens, {.min = 1});
  flags.AddCheck([&pace, &adapter_count, &long_prompt] {
    if (pace.words_per_second > 0 && (adapter_count > 0 || long_prompt > 0)) {
      return absl::InvalidArgumentError("--pace runs alone: drop --adapters and --long_prompt");
    }
    if (pace.words_per_second == 0 && pace.long_form) {
      return absl::InvalidArgumentError("--long_form is a --pace option: add --pace W");
    }
    return absl::OkStatus();
  });
  flags.AddCheck([&engine_config] {
    const double slowdown = engine_config.long_read_slowdown;
    if (slowdown > 0 && slowdown < 1) {
      return absl::InvalidArgumentError("--long_read_slowdown takes 0 (off) or a number >= 1");
    }
    return absl::OkStatus();
  });
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  const int wait_k = config.options.policy.wait_k;
  // --pace: sessions as a server runs them (end-of-sequence and the lag limit apply), 24 target
  // tokens at most by default.
  const int target = target_tokens.value_or(pace.words_per_second > 0 ? 24 : 2 * words);
  const int threads = model_flags.options.threads;
  const int block_size = engine_config.block_size;
  auto loaded = LoadBenchModel(model_flags.dir, preset, model_flags.options);
  if (!loaded.ok()) {
    std::cerr << "gpe: " << loaded.status().message() << "\n";
    return 1;
  }
  const std::shared_ptr<const model::Model> m = *loaded;
  auto profile = policy::LoadProfile("qwen2.5");
  if (!profile.ok()) return 1;
  config.options.profile = *profile;
  config.options.policy.max_new_tokens = target;
  const model::ModelConfig& c = m->config();
  const std::string model_line = absl::StrFormat(
      "model %s %s, %d layers, dtype %s, %d threads; ", c.architecture_name,
      model_flags.dir.value_or(preset), c.num_layers, m->weight_dtype_name(),
      threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()));
  const std::string engine_line =
      absl::StrFormat("max_batch_tokens %d; device %s; CPU %s\n",
                      engine_config.scheduler.max_batch_tokens, m->device().str(), CpuName());
  if (pace.words_per_second > 0) {
    // A random model's greedy output repeats itself and never ends; sampled, it is words of
    // about two tokens (LoadBenchModel), and it stops at a translation's length, as many words
    // as the sentence has.
    const bool random_weights = !model_flags.dir && preset != "default";
    if (random_weights) {
      config.sampling.temperature = 1;
      pace.target_tokens_per_word = 2;
    }
    std::cout << model_line << (random_weights ? "random weights, sampled at temperature 1; " : "")
              << engine_line;
    return RunPaceRows(m, engine_config, config, flags.Given("sessions") ? counts : pace_counts,
                       pace);
  }
  config.options.policy.ignore_eos = true;
  config.options.policy.max_lag_words = 1 << 20;
  if (sequential > 0) {
    std::cout << model_line
              << absl::StrFormat("%d words, wait_k %d, %d target tokens per session; ", words,
                                 wait_k, target)
              << engine_line;
    return RunSequentialRows(m, engine_config, config, BenchSource(words), sequential,
                             instruction_tokens);
  }

  // Room for every session of the largest row: prompt, source and target with slack.
  const std::vector<std::string> source = BenchSource(words);
  const int most = *std::max_element(counts.begin(), counts.end());
  const int64_t per_session = (64 + 4 * words + target) / block_size + 6;
  engine_config.kv_blocks = most * per_session + 16 + 2 * long_prompt / block_size;
  engine_config.max_sessions = most + 1;
  auto eng = engine::Engine::Create(m, engine_config);
  if (!eng.ok()) {
    std::cerr << "gpe: " << eng.status().message() << "\n";
    return 1;
  }
  std::cout << model_line
            << absl::StrFormat("%d words, wait_k %d, %d target tokens per session; ", words, wait_k,
                               target)
            << engine_line;
  if (auto warm = RunRow(**eng, config, BenchSource(std::min(words, 8)), 2); !warm.ok()) {
    std::cerr << "gpe: " << warm.status().message() << "\n";
    return 1;
  }
  if (adapter_count > 0) {
    (*eng)->Shutdown();
    return RunAdapterRows(m, engine_config, config, source, counts, adapter_count, adapter_rank,
                          rounds);
  }
  if (long_prompt > 0) {
    const int code = RunLongPromptRows(**eng, config, source, counts, long_prompt, rounds);
    (*eng)->Shutdown();
    return code;
  }
  std::cout << absl::StrFormat("%8s %9s %9s %9s %9s %9s %9s %8s %8s %8s %8s\n", "sessions",
                               "tgt tok/s", "src tok/s", "TTFT p50", "TTFT p99", "ITL p50",
                               "ITL p99", "p99/p50", "tok/step", "ses/step", "vs first");
  double first_rate = 0;
  for (int n : counts) {
    auto row = RunRow(**eng, config, source, n);
    if (!row.ok()) {
      std::cerr << "gpe: " << row.status().message() << "\n";
      return 1;
    }
    const double rate = row->target_tokens / row->seconds;
    if (first_rate == 0) first_rate = rate;
    std::cout << absl::StrFormat(
        "%8d %9.1f %9.1f %7.0fms %7.0fms %7.1fms %7.1fms %7.2fx %8.1f %8.1f %7.2fx\n", n, rate,
        row->source_tokens / row->seconds, row->ttft_p50, row->ttft_p99, row->itl_p50, row->itl_p99,
        row->itl_p50 > 0 ? row->itl_p99 / row->itl_p50 : 0.0, row->tokens_per_step,
        row->sessions_per_step, rate / first_rate);
    std::cout.flush();
  }
  (*eng)->Shutdown();
  return 0;
}

}  // namespace gpeserve::cli
