// gpe bench-long: long-form sessions (docs/GPE.md 9) over a long stream, to show that their
// cost per step and their memory stay flat however long the stream runs: the project's corpus
// sentences, --sentences per session, fed as a live client would (a few sentences ahead of the
// finished segments, a boundary after each), through one session and then --sessions
// concurrent ones on one engine. Per run: steps, the mean step time of the first and the last
// tenth of the steps and their ratio, segments per second, the sessions' KV high-water mark and
// the process's resident memory after each tenth of the segments.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/eval/words.h"
#include "engine/model/model.h"
#include "engine/train/corpus.h"
#include "flags/groups.h"

namespace gpeserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Resident memory of this process in MiB (/proc/self/statm).
double RssMib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) /
         (1024.0 * 1024.0);
}

struct LongRun {
  int64_t steps = 0;
  double first_decile_ms = 0, last_decile_ms = 0;  // mean step time
  double seconds = 0;
  int64_t segments = 0;
  int64_t high_water = 0;       // blocks, the most any session held
  std::vector<double> rss_mib;  // after each tenth of the segments
  int64_t kv_blocks_in_use_after = 0;
};

absl::StatusOr<LongRun> RunStreams(std::shared_ptr<const model::Model> model,
                                   engine::EngineConfig config,
                                   const engine::SessionConfig& session_config,
                                   const std::vector<std::vector<std::string>>& sentences,
                                   int sessions) {
  // Each session starts at its own place in the corpus (wrapping), so that the sessions are
  // not in lockstep.
  std::mutex step_mu;
  std::vector<double> step_ms;  // guarded by step_mu
  Clock::time_point last_step = Clock::now();
  config.on_step = [&](const engine::StepReport&) {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(step_mu);
    step_ms.push_back(std::chrono::duration<double, std::milli>(now - last_step).count());
    last_step = now;
  };
  config.max_sessions = sessions;
  auto eng = engine::Engine::Create(std::move(model), config);
  if (!eng.ok()) return eng.status();
  struct Stream {
    std::shared_ptr<engine::SessionHandle> handle;
    size_t offset = 0, pushed = 0, finished = 0;
    bool ended = false;
  };
  std::vector<Stream> streams(sessions);
  for (int i = 0; i < sessions; ++i) streams[i].offset = sentences.size() * i / sessions;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, engine::SessionEvent>> events;
  constexpr size_t kAhead = 4;
  auto feed = [&](Stream& s) {
    while (s.pushed < sentences.size() && s.pushed < s.finished + kAhead) {
      s.handle->Push(sentences[(s.offset + s.pushed++) % sentences.size()]);
      s.handle->Boundary();
    }
    if (s.pushed == sentences.size() && !s.ended) {
      s.handle->EndSource();
      s.ended = true;
    }
  };
  const Clock::time_point start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(step_mu);
    last_step = start;
  }
  for (int i = 0; i < sessions; ++i) {
    auto handle = (*eng)->Open(session_config, [&, i](const engine::SessionEvent& e) {
      if (e.kind == engine::SessionEvent::Kind::kTokens) return true;
      {
        std::lock_guard<std::mutex> lock(mu);
        events.emplace_back(i, e);
      }
      cv.notify_one();
      return true;
    });
    if (!handle.ok()) return handle.status();
    streams[i].handle = *handle;
    feed(streams[i]);
  }
  LongRun run;
  const int64_t total = static_cast<int64_t>(sentences.size()) * sessions;
  int open = sessions;
  absl::Status failure;
  while (open > 0) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !events.empty(); });
    auto [i, e] = std::move(events.front());
    events.pop_front();
    lock.unlock();
    switch (e.kind) {
      case engine::SessionEvent::Kind::kSegment:
        ++streams[i].finished;
        ++run.segments;
        run.high_water = std::max(run.high_water, e.counters.kv_blocks_high_water);
        if (run.segments * 10 / total != (run.segments - 1) * 10 / total) {
          run.rss_mib.push_back(RssMib());
        }
        feed(streams[i]);
        break;
      case engine::SessionEvent::Kind::kDone:
        --open;
        break;
      case engine::SessionEvent::Kind::kError:
        --open;
        if (failure.ok()) failure = e.status;
        break;
      default:
        break;
    }
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const engine::EngineStats stats = (*eng)->stats();
  run.kv_blocks_in_use_after = stats.kv.total_blocks - stats.kv.free_blocks;
  (*eng)->Shutdown();
  if (!failure.ok()) return failure;
  std::lock_guard<std::mutex> lock(step_mu);
  run.steps = static_cast<int64_t>(step_ms.size());
  const size_t tenth = std::max<size_t>(1, step_ms.size() / 10);
  auto mean = [](auto begin, auto end) {
    double sum = 0;
    for (auto it = begin; it != end; ++it) sum += *it;
    return end > begin ? sum / static_cast<double>(end - begin) : 0.0;
  };
  run.first_decile_ms = mean(step_ms.begin(), step_ms.begin() + tenth);
  run.last_decile_ms = mean(step_ms.end() - tenth, step_ms.end());
  return run;
}

}  // namespace

int BenchLongCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe bench-long [--model DIR] [options]",
      "Long-form sessions over a long stream (docs/GPE.md 9): --sentences of the\n"
      "project's corpus per session, fed a few sentences ahead of the finished segments\n"
      "with a boundary after each, through one session and then --sessions concurrent\n"
      "ones. Prints, per run, the mean step time of the first and last tenth of the steps\n"
      "and their ratio (flat cost: near 1), segments per second, the KV high-water mark of\n"
      "a session, the KV blocks in use afterwards, and the resident memory after each\n"
      "tenth of the segments (flat memory). Without --model: the built-in model.");
  flags::ModelFlags model_flags;
  flags::AddModelFlags(flags, &model_flags);
  flags::SessionFlags session;
  session.options.policy.max_new_tokens = 80;
  flags::AddSessionFlags(flags, &session);
  int sentences = 10000, sessions = 4;
  uint64_t seed = 5;
  flags.Add("sentences", "N", "sentences streamed through each session", &sentences, {.min = 1});
  flags.Add("sessions", "N", "concurrent sessions of the second run (1: one run only)", &sessions,
            {.min = 1});
  flags.Add("seed", "N", "corpus seed", &seed);
  engine::EngineConfig engine_config;
  engine_config.kv_blocks = 1024;
  flags::AddKvCacheFlags(flags, &engine_config);
  flags::AddSchedulerFlags(flags, &engine_config);
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  auto loaded = LoadCommandModel(model_flags);
  if (!loaded.ok()) {
    std::cerr << "gpe: " << loaded.status().message() << "\n";
    return 1;
  }
  auto resolved = session.Resolve(loaded->model->config().model_type(),
                                  loaded->model->chat_template(), loaded->instruction);
  if (!resolved.ok()) {
    std::cerr << "gpe: " << resolved.status().message() << "\n";
    return 1;
  }
  std::vector<std::vector<std::string>> source;
  for (const train::Translation& t : train::GenerateCorpus(seed, sentences)) {
    const std::vector<std::string_view> words = eval::SplitWords(t.en);
    source.emplace_back(words.begin(), words.end());
  }
  engine::SessionConfig session_config;
  session_config.options = *resolved;
  session_config.long_form.enabled = true;
  std::printf("gpe bench-long: %d sentences per session, wait-k %d, %s\nCPU: %s\n%s\n", sentences,
              resolved->policy.wait_k,
              std::string(session::ParadigmName(resolved->paradigm)).c_str(), CpuName().c_str(),
              loaded->model->kernel_path().c_str());
  std::printf("%-9s %7s %8s %8s %7s %9s %10s %9s  %s\n", "sessions", "steps", "first ms", "last ms",
              "ratio", "segs/s", "KV hw blk", "KV after", "RSS MiB per tenth");
  std::vector<int> runs = {1};
  if (sessions > 1) runs.push_back(sessions);
  for (int n : runs) {
    auto run = RunStreams(loaded->model, engine_config, session_config, source, n);
    if (!run.ok()) {
      std::cerr << "gpe: " << run.status().message() << "\n";
      return 1;
    }
    std::string rss;
    for (double r : run->rss_mib) rss += absl::StrFormat("%s%.0f", rss.empty() ? "" : " ", r);
    std::printf("%-9d %7lld %8.2f %8.2f %7.3f %9.1f %10lld %9lld  %s\n", n,
                static_cast<long long>(run->steps), run->first_decile_ms, run->last_decile_ms,
                run->first_decile_ms > 0 ? run->last_decile_ms / run->first_decile_ms : 0.0,
                static_cast<double>(run->segments) / run->seconds,
                static_cast<long long>(run->high_water),
                static_cast<long long>(run->kv_blocks_in_use_after), rss.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace gpeserve::cli
