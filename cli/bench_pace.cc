#include "cli/bench_pace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/eval/latency.h"
#include "engine/eval/word_lag.h"
#include "engine/eval/words.h"
#include "engine/model/model.h"
#include "engine/train/corpus.h"

namespace gpeserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

// One target word: when the source unit it needed arrived and when it was delivered, in seconds
// since the run's origin.
struct WordTimes {
  double arrived = 0;
  double delivered = 0;
};

// What the engine's loop thread reports to the driver: steps, words, finished sessions.
class Recorder {
 public:
  Recorder(Clock::time_point origin, int speakers) : origin_(origin), tallies_(speakers) {}

  double Since(Clock::time_point t) const {
    return std::chrono::duration<double>(t - origin_).count();
  }

  void Step(const engine::StepReport& step) {
    std::lock_guard<std::mutex> lock(mu_);
    steps_.push_back({Since(step.start), Since(step.end)});
    step_tokens_.push_back(step.tokens);
  }

  // The event callback of speaker `slot`'s sessions.
  engine::EventCallback Callback(int slot) {
    return [this, slot](const engine::SessionEvent& e) {
      using Kind = engine::SessionEvent::Kind;
      const double now = Since(Clock::now());
      std::lock_guard<std::mutex> lock(mu_);
      Tally& s = tallies_[slot];
      switch (e.kind) {
        case Kind::kTokens:
          if (!e.ids.empty()) s.last_token = now;
          target_tokens_ += static_cast<int64_t>(e.ids.size());
          if (e.word_complete) {
            words_.push_back({now - e.lag_ms / 1e3, now});
            ++s.words;
          }
          break;
        case Kind::kWaiting:
          break;
        case Kind::kSegment:
        case Kind::kDone:
          // The words that completed without a word_complete event (at the target's end) came
          // with the last token.
          for (size_t i = s.words; i < e.lags_ms.size(); ++i) {
            words_.push_back({s.last_token - e.lags_ms[i] / 1e3, s.last_token});
          }
          s.words = 0;
          if (e.kind == Kind::kDone) Finished(slot);
          break;
        case Kind::kError:
          if (error_.ok()) error_ = e.status;
          Finished(slot);
          break;
      }
      return true;
    };
  }

  // Waits until a session has finished or `until`; returns the speakers whose sessions finished.
  std::vector<int> Wait(Clock::time_point until) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, until, [this] { return !finished_.empty(); });
    std::vector<int> finished(finished_.begin(), finished_.end());
    finished_.clear();
    return finished;
  }

  absl::Status error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  // Takes the words and target tokens recorded since the last call.
  std::vector<WordTimes> TakeWords(int64_t* target_tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    *target_tokens = target_tokens_;
    target_tokens_ = 0;
    return std::exchange(words_, {});
  }

  // The steps planned at or after `from` (seconds since the origin), and their tokens.
  std::vector<eval::StepSpan> Steps(double from, int64_t* tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<eval::StepSpan> steps;
    *tokens = 0;
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (steps_[i].start < from) continue;
      steps.push_back(steps_[i]);
      *tokens += step_tokens_[i];
    }
    return steps;
  }

 private:
  // Per speaker: its running sentence's or segment's word_complete events, and when its last
  // token came.
  struct Tally {
    size_t words = 0;
    double last_token = 0;
  };

  void Finished(int slot) {
    finished_.push_back(slot);
    cv_.notify_all();
  }

  const Clock::time_point origin_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Tally> tallies_;         // guarded by mu_
  std::vector<eval::StepSpan> steps_;  // guarded by mu_, by start
  std::vector<int64_t> step_tokens_;   // guarded by mu_
  std::vector<WordTimes> words_;       // guarded by mu_
  int64_t target_tokens_ = 0;          // guarded by mu_
  std::deque<int> finished_;           // guarded by mu_
  absl::Status error_;                 // guarded by mu_
};

struct Row {
  int64_t words = 0;
  double p50 = 0, p99 = 0;            // seconds
  double waiting = 0, computing = 0;  // seconds, means over the words
  double steps_per_word = 0;
  double ms_per_step = 0;
  double tokens_per_step = 0;
  double target_tokens_per_second = 0;
};

// Runs `n` speakers for options.seconds of arrivals (each speaks at least one sentence), then
// until their sessions end.
absl::StatusOr<Row> RunRow(engine::Engine& eng, Recorder& recorder,
                           const engine::SessionConfig& config,
                           const std::vector<std::vector<std::string>>& sentences, int n,
                           const PaceOptions& options) {
  struct Speaker {
    std::shared_ptr<engine::SessionHandle> handle;
    size_t sentence = 0;    // index into `sentences` of the sentence being spoken
    size_t word = 0;        // its next word
    Clock::time_point due;  // when that word (or, with no session open, the next session) starts
    bool open = false;      // a session is open (its end not seen yet)
    bool speaking = false;  // the open session has words left to push
    bool retired = false;   // no more sessions
  };
  const auto duration = [](double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  const Clock::duration word_gap = duration(1.0 / options.words_per_second);
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop = start + duration(options.seconds);
  const double row_origin = recorder.Since(start);
  std::vector<Speaker> speakers(n);
  for (int i = 0; i < n; ++i) {
    // Spread over the corpus and over one word's time, so that the speakers are not in step.
    speakers[i].sentence = sentences.size() * i / n;
    speakers[i].due = start + word_gap * i / n;
  }
  Clock::time_point next = start;
  for (;;) {
    for (int slot : recorder.Wait(next)) {
      Speaker& s = speakers[slot];
      s.open = s.speaking = false;
      s.handle.reset();
      s.sentence = (s.sentence + 1) % sentences.size();
      s.word = 0;
      s.due = Clock::now();
      s.retired = options.long_form || s.due >= stop;
    }
    if (absl::Status error = recorder.error(); !error.ok()) return error;
    const Clock::time_point now = Clock::now();
    next = now + std::chrono::hours(1);  // only a session's end can come first
    bool any = false;
    for (int i = 0; i < n; ++i) {
      Speaker& s = speakers[i];
      if (s.retired) continue;
      any = true;
      if (!s.open && s.due <= now) {
        engine::SessionConfig session_config = config;
        if (options.target_tokens_per_word > 0 && !options.long_form) {
          int& target = session_config.options.policy.max_new_tokens;
          target = std::min<int>(
              target, std::ceil(options.target_tokens_per_word * sentences[s.sentence].size()));
        }
        auto handle = eng.Open(session_config, recorder.Callback(i));
        if (!handle.ok()) return handle.status();
        s.handle = *std::move(handle);
        s.open = s.speaking = true;
      }
      if (s.speaking && options.long_form && now >= stop) {
        s.handle->EndSource();
        s.speaking = false;
      }
      if (s.speaking && s.due <= now) {
        const std::vector<std::string>& words = sentences[s.sentence];
        s.handle->Push({words[s.word++]});
        s.due += word_gap;
        if (s.word == words.size()) {
          s.word = 0;
          if (options.long_form) {
            s.sentence = (s.sentence + 1) % sentences.size();
          } else {
            s.handle->EndSource();
            s.speaking = false;
          }
        }
      }
      if (!s.open || s.speaking) next = std::min(next, s.due);
      if (s.speaking && options.long_form) next = std::min(next, stop);
    }
    if (!any) break;
  }
  const double seconds = recorder.Since(Clock::now()) - row_origin;

  int64_t target_tokens = 0, step_tokens = 0;
  const std::vector<WordTimes> words = recorder.TakeWords(&target_tokens);
  const std::vector<eval::StepSpan> steps = recorder.Steps(row_origin, &step_tokens);
  Row row;
  row.words = static_cast<int64_t>(words.size());
  std::vector<double> lags;
  double waiting = 0, computing = 0, word_steps = 0;
  for (const WordTimes& w : words) {
    lags.push_back(w.delivered - w.arrived);
    const eval::WordLagSplit split = eval::SplitWordLag(steps, w.arrived, w.delivered);
    waiting += split.waiting;
    computing += split.computing;
    word_steps += split.steps;
  }
  row.p50 = eval::Percentile(lags, 50);
  row.p99 = eval::Percentile(lags, 99);
  if (!words.empty()) {
    row.waiting = waiting / words.size();
    row.computing = computing / words.size();
    row.steps_per_word = word_steps / words.size();
  }
  double step_seconds = 0;
  for (const eval::StepSpan& step : steps) step_seconds += step.end - step.start;
  if (!steps.empty()) {
    row.ms_per_step = 1e3 * step_seconds / steps.size();
    row.tokens_per_step = static_cast<double>(step_tokens) / steps.size();
  }
  row.target_tokens_per_second = seconds > 0 ? target_tokens / seconds : 0;
  return row;
}

// The corpus's English sentences as words.
std::vector<std::vector<std::string>> Sentences(uint64_t seed) {
  std::vector<std::vector<std::string>> sentences;
  for (const train::Translation& t : train::GenerateCorpus(seed, 500)) {
    const std::vector<std::string_view> words = eval::SplitWords(t.en);
    if (!words.empty()) sentences.emplace_back(words.begin(), words.end());
  }
  return sentences;
}

}  // namespace

int RunPaceRows(const std::shared_ptr<const model::Model>& model,
                engine::EngineConfig engine_config, engine::SessionConfig config,
                const std::vector<int>& counts, const PaceOptions& options) {
  const std::vector<std::vector<std::string>> sentences = Sentences(options.seed);
  size_t longest = 0, total_words = 0;
  int64_t source_tokens = 0;
  for (const auto& words : sentences) {
    longest = std::max(longest, words.size());
    total_words += words.size();
    auto ids = model->tokenizer()->Encode(absl::StrJoin(words, " "));
    if (ids.ok()) source_tokens += static_cast<int64_t>(ids->size());
  }
  config.long_form.enabled = options.long_form;
  const int most = *std::max_element(counts.begin(), counts.end());
  // Room for every session of the largest count: prompt, one sentence and its target, slack.
  const int64_t per_session =
      (160 + 4 * static_cast<int64_t>(longest) + config.options.policy.max_new_tokens) /
          engine_config.block_size +
      6;
  engine_config.kv_blocks = most * per_session + 16;
  engine_config.max_sessions = most + 1;
  Recorder recorder(Clock::now(), most);
  engine_config.on_step = [&recorder](const engine::StepReport& step) { recorder.Step(step); };
  auto eng = engine::Engine::Create(model, engine_config);
  if (!eng.ok()) {
    std::cerr << "gpe: " << eng.status().message() << "\n";
    return 1;
  }
  std::printf(
      "speakers at %.3g words/s, %s: corpus sentences of %.1f words (%.2f source tokens per "
      "word), wait_k %d, at most %d target tokens%s; %.0f s of arrivals per row\n",
      options.words_per_second,
      options.long_form ? "one long-form session each" : "a session per sentence",
      static_cast<double>(total_words) / sentences.size(),
      static_cast<double>(source_tokens) / total_words, config.options.policy.wait_k,
      config.options.policy.max_new_tokens,
      options.target_tokens_per_word > 0 && !options.long_form
          ? absl::StrFormat(" (%.3g per source word)", options.target_tokens_per_word).c_str()
          : "",
      options.seconds);
  // Warm-up: the first steps pay for allocations the rows should not see.
  PaceOptions warm = options;
  warm.seconds = 0;
  warm.long_form = false;
  engine::SessionConfig warm_config = config;
  warm_config.long_form.enabled = false;
  if (auto row = RunRow(**eng, recorder, warm_config, sentences, 1, warm); !row.ok()) {
    std::cerr << "gpe: " << row.status().message() << "\n";
    return 1;
  }
  std::printf("%8s %7s %8s %8s %8s %9s %10s %8s %8s %9s %s\n", "sessions", "words", "lag p50",
              "lag p99", "waiting", "computing", "steps/word", "ms/step", "tok/step", "tgt tok/s",
              absl::StrFormat("p99<=%.3gs", options.lag_slo_seconds).c_str());
  std::optional<int> capacity;
  for (int n : counts) {
    auto row = RunRow(**eng, recorder, config, sentences, n, options);
    if (!row.ok()) {
      std::cerr << "gpe: " << row.status().message() << "\n";
      return 1;
    }
    const bool within = row->words > 0 && row->p99 <= options.lag_slo_seconds;
    if (within && (!capacity || n > *capacity)) capacity = n;
    std::printf("%8d %7lld %7.2fs %7.2fs %7.2fs %8.2fs %10.2f %8.1f %8.1f %9.1f %s\n", n,
                static_cast<long long>(row->words), row->p50, row->p99, row->waiting,
                row->computing, row->steps_per_word, row->ms_per_step, row->tokens_per_step,
                row->target_tokens_per_second, within ? "yes" : "no");
    std::fflush(stdout);
  }
  std::printf("capacity at p99 word lag <= %.3g s: %d sessions (of %s)\n", options.lag_slo_seconds,
              capacity.value_or(0), absl::StrJoin(counts, ",").c_str());
  (*eng)->Shutdown();
  return 0;
}

}  // namespace gpeserve::cli
