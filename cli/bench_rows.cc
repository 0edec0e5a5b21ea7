#include "cli/bench_rows.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "engine/eval/latency.h"

namespace gpeserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

absl::StatusOr<Row> RunRow(engine::Engine& eng, engine::SessionConfig config,
                           const std::vector<std::string>& words, int n,
                           const std::vector<std::string>& adapters) {
  struct Trace {
    Clock::time_point open, end;
    std::vector<Clock::time_point> tokens;  // arrival of each token (loop thread)
    int64_t source_tokens = 0;
    int64_t output_tokens = 0;
    absl::Status status;
    bool done = false;
  };
  std::vector<Trace> traces(n);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;  // guarded by mu
  const engine::EngineStats before = eng.stats();
  std::vector<std::shared_ptr<engine::SessionHandle>> handles;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < n; ++i) {
    traces[i].open = Clock::now();
    if (!adapters.empty()) config.adapter = adapters[i % adapters.size()];
    auto handle = eng.Open(config, [&, i](const engine::SessionEvent& e) {
      Trace& t = traces[i];
      if (e.kind == engine::SessionEvent::Kind::kTokens) {
        t.tokens.insert(t.tokens.end(), e.ids.size(), Clock::now());
        return true;
      }
      t.end = Clock::now();
      t.source_tokens = e.counters.source_tokens;
      t.output_tokens = static_cast<int64_t>(e.output.size());
      t.status = e.kind == engine::SessionEvent::Kind::kError ? e.status : absl::OkStatus();
      {
        std::lock_guard<std::mutex> lock(mu);
        t.done = true;
        ++finished;
      }
      cv.notify_one();
      return true;
    });
    if (!handle.ok()) return handle.status();
    (*handle)->Push(words);
    (*handle)->EndSource();
    handles.push_back(*handle);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return finished == n; });
  }
  const Clock::time_point end = Clock::now();
  const engine::EngineStats after = eng.stats();
  Row row;
  row.sessions = n;
  row.seconds = std::chrono::duration<double>(end - start).count();
  std::vector<double> ttft, itl;
  for (const Trace& t : traces) {
    if (!t.status.ok()) return t.status;
    row.source_tokens += t.source_tokens;
    row.target_tokens += t.output_tokens;
    row.latencies.push_back(Ms(t.end - t.open));
    if (t.tokens.empty()) continue;
    ttft.push_back(Ms(t.tokens.front() - t.open));
    for (size_t j = 1; j < t.tokens.size(); ++j) itl.push_back(Ms(t.tokens[j] - t.tokens[j - 1]));
  }
  row.ttft_p50 = eval::Percentile(ttft, 50);
  row.ttft_p99 = eval::Percentile(ttft, 99);
  row.itl_p50 = eval::Percentile(itl, 50);
  row.itl_p99 = eval::Percentile(itl, 99);
  const int64_t steps = after.steps - before.steps;
  row.steps = steps;
  row.tokens_per_step =
      steps > 0 ? static_cast<double>(after.step_tokens - before.step_tokens) / steps : 0;
  row.sessions_per_step =
      steps > 0 ? static_cast<double>(after.step_sessions - before.step_sessions) / steps : 0;
  return row;
}

}  // namespace gpeserve::cli
