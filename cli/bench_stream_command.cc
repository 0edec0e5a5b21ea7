// gpe bench-stream: what one read costs in group streaming (GPE) and in batch-streaming
// (re-encode) as the source grows. Both run the same session loop; the target is scripted
// (every write emits the same number of tokens per source word) so that the two paradigms do
// the same reads and writes and differ only in what they compute.

#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "engine/session/runner.h"
#include "flags/groups.h"

namespace gpeserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct ReadCost {
  double seconds = 0;  // the read and the first forward of the write after it
  int64_t tokens = 0;  // tokens computed in them
};

// The read of median time among reads [first, first + 5).
ReadCost MedianRead(const std::vector<ReadCost>& reads, int first) {
  std::vector<ReadCost> window(reads.begin() + first, reads.begin() + first + 5);
  std::sort(window.begin(), window.end(),
            [](const ReadCost& a, const ReadCost& b) { return a.seconds < b.seconds; });
  return window[2];
}

struct Run {
  std::vector<ReadCost> reads;  // one per source word read after the first write
  double seconds = 0;
  int64_t forward_tokens = 0;
  int64_t output_tokens = 0;
};

// Runs one session over `words` with a scripted target: each write emits `per_word` tokens
// (" mot", then "x"s), then a token that starts a new word (stop rule a); once the source is
// complete, end-of-sequence.
absl::StatusOr<Run> RunScripted(const model::Model& model, const session::SessionOptions& options,
                                const std::vector<std::string>& words, int per_word,
                                kv::KvPool& pool, kv::BlockAllocator& allocator) {
  const tokenizer::Tokenizer& tok = *model.tokenizer();
  auto word = tok.Encode(" mot", {.add_special_tokens = false});
  auto cont = tok.Encode("x", {.add_special_tokens = false});
  const std::optional<int32_t> eos = tok.eos_id();
  if (!word.ok() || !cont.ok() || word->empty() || cont->empty() || !eos) {
    return absl::FailedPreconditionError(
        "the tokenizer must encode \" mot\" and \"x\" and have an eos token");
  }
  auto session = session::CreateOfflineSession(model, options, words);
  if (!session.ok()) return session.status();
  session::StreamSession& s = **session;
  Run run;
  int in_write = 0;
  bool after_read = false, started = false;
  const auto begin = Clock::now();
  while (s.state() == session::StreamSession::State::kRunnable) {
    auto work = s.Prepare(1 << 30, allocator);
    if (!work.ok()) return work.status();
    const auto start = Clock::now();
    auto logits = session::RunWorks(model, pool, {&*work, 1});
    if (!logits.ok()) return logits.status();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::optional<int32_t> token;
    if (work->sample) {
      token = s.source_complete()   ? *eos
              : in_write == 0       ? word->front()
              : in_write < per_word ? cont->front()
                                    : word->front();
      ++in_write;
      if (after_read) run.reads.back().seconds += seconds;
      if (after_read) run.reads.back().tokens += static_cast<int64_t>(work->tokens.size());
      after_read = false;
      started = true;
    } else if (started) {
      run.reads.push_back({seconds, static_cast<int64_t>(work->tokens.size())});
      after_read = true;
    }
    const session::StepResult step = s.Complete(token, allocator);
    if (step.word_complete || step.unit_read) in_write = 0;
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  run.forward_tokens = s.counters().forward_tokens;
  run.output_tokens = static_cast<int64_t>(s.output().size());
  s.Release(allocator);
  return run;
}

}  // namespace

int BenchStreamCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe bench-stream (--preset NAME | --model DIR) [options]",
      "Streams sources of --words lengths through a session in the gpe and the reencode\n"
      "paradigm with a scripted target (--target_tokens tokens per source word) and\n"
      "prints, per paradigm, the cost of a read (the read and the first forward of the\n"
      "write after it; the median of 5 reads from word --at, and of the last 5 words)\n"
      "and the total time, with its ratio to gpe's.");
  std::string preset = "qwen2.5-0.5b";
  flags.Add("preset", "NAME", "make a random-weight model of this preset", &preset);
  flags::ModelFlags model_flags;
  flags::AddModelFlags(flags, &model_flags, "an existing model folder instead of --preset",
                       /*with_device=*/false);
  std::vector<int> lengths = {60, 200};
  flags.AddParsed("words", "N,N", "source lengths in words", absl::StrJoin(lengths, ","),
                  [&lengths](std::string_view text) { return ParsePositiveList(text, &lengths); });
  session::SessionOptions options;
  options.policy.wait_k = 5;
  flags::AddWaitKFlag(flags, &options.policy.wait_k);
  int at = 5, per_word = 2, block_size = 16;
  flags.Add("at", "N", "the early read to compare the last one with (word number)", &at,
            {.min = 1});
  flags.Add("target_tokens", "N", "target tokens written per source word", &per_word, {.min = 1});
  flags.Add("block_size", "N", "tokens per KV block", &block_size, {.min = 1});
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  const int wait_k = options.policy.wait_k;

  auto loaded = LoadBenchModel(model_flags.dir, preset, model_flags.options);
  if (!loaded.ok()) {
    std::cerr << "gpe: " << loaded.status().message() << "\n";
    return 1;
  }
  const model::Model& m = **loaded;
  if (m.tokenizer() == nullptr) {
    std::cerr << "gpe: the model folder has no tokenizer.json\n";
    return 1;
  }
  const model::ModelConfig& c = m.config();
  const int max_words = *std::max_element(lengths.begin(), lengths.end());
  const int64_t blocks = 4 * (max_words * (per_word + 3) + 256) / block_size + 16;
  kv::BlockAllocator allocator({.block_size = block_size, .num_blocks = static_cast<int>(blocks)});
  auto pool = kv::KvPool::Create({.block_size = block_size, .num_blocks = static_cast<int>(blocks)},
                                 {c.num_layers, c.num_kv_heads, c.head_dim}, m.dtype(), m.device());
  if (!pool.ok()) {
    std::cerr << "gpe: " << pool.status().message() << "\n";
    return 1;
  }
  auto profile = policy::LoadProfile("qwen2.5");
  if (!profile.ok()) return 1;
  options.profile = *profile;
  options.policy.max_new_tokens = 1 << 20;

  std::cout << absl::StrFormat(
      "model %s %s, %d layers, dtype %s, %d threads; wait_k %d, %d target tokens per word\n",
      c.architecture_name, model_flags.dir.value_or(preset), c.num_layers, m.weight_dtype_name(),
      torch::get_num_threads(), wait_k, per_word);
  {  // Warm-up: one short session.
    const std::vector<std::string> words = BenchSource(8);
    auto warm = RunScripted(m, options, words, per_word, *pool, allocator);
    if (!warm.ok()) {
      std::cerr << "gpe: " << warm.status().message() << "\n";
      return 1;
    }
  }
  std::cout << absl::StrFormat("%-9s %6s %23s %23s %11s %9s %9s %8s\n", "paradigm", "words",
                               "early reads ms (tokens)", "last reads ms (tokens)", "last/early",
                               "total s", "fwd tok", "vs gpe");
  for (int n : lengths) {
    const std::vector<std::string> words = BenchSource(n);
    double gpe_seconds = 0;
    for (session::Paradigm paradigm : {session::Paradigm::kGpe, session::Paradigm::kReencode}) {
      options.paradigm = paradigm;
      auto run = RunScripted(m, options, words, per_word, *pool, allocator);
      if (!run.ok()) {
        std::cerr << "gpe: " << run.status().message() << "\n";
        return 1;
      }
      // reads[i] is the read of unit wait_k + 1 + i (the first write follows unit wait_k); the
      // last one reads the end segment, not a word. A read's cost is the median of 5 reads.
      const int word_reads = static_cast<int>(run->reads.size()) - 1;
      if (word_reads < 5) {
        std::cerr << "gpe: --words must exceed --wait_k by at least 5\n";
        return 2;
      }
      const int early = std::clamp(at - wait_k - 1, 0, word_reads - 5);
      const int late = word_reads - 5;
      const ReadCost e = MedianRead(run->reads, early), last = MedianRead(run->reads, late);
      if (paradigm == session::Paradigm::kGpe) gpe_seconds = run->seconds;
      std::cout << absl::StrFormat(
          "%-9s %6d  w%-3d %10.1f (%4d)  w%-3d %10.1f (%4d) %10.2fx %9.2f %9d %7.2fx\n",
          std::string(session::ParadigmName(paradigm)), n, wait_k + 1 + early, e.seconds * 1e3,
          e.tokens, wait_k + 1 + late, last.seconds * 1e3, last.tokens, last.seconds / e.seconds,
          run->seconds, run->forward_tokens, run->seconds / gpe_seconds);
      std::cout.flush();
    }
  }
  return 0;
}

}  // namespace gpeserve::cli
