// Prometheus metrics of the server, in the style of vLLM's (prefix `gpeserve:`, label `model`).
// Families are registered once at start-up and references kept; observing is thread-safe and
// cheap (the engine loop thread observes per step and per event).
// /metrics is served by MetricsHttpServer (metrics_http.h).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "server/metrics_http.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace gpeserve::server {

class Metrics {
 public:
  // `model`: the value of the `model` label on every series.
  explicit Metrics(const std::string& model);
  ~Metrics();

  // Serves /metrics on `address` (IPv4 host:port; port 0 picks one) from a thread of its own.
  // Errors: a bad address, the port in use.
  absl::Status Serve(const std::string& address);
  // The port /metrics is served on (0 before Serve).
  int port() const;
  // The exposition text, as a scrape returns it (engine statistics read at that moment).
  std::string Render();

  // ---- Observations ----
  void ObserveStep(int64_t tokens);       // tokens in one forward step
  void ObserveQueueTime(double seconds);  // from open to first step
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveSessionLatency(double seconds);         // from open to done
  void ObserveWordLag(double words, double seconds);  // per target word
  void SessionFinished(const std::string& reason);    // done reasons and "error"
  // A failed call (Stream or Generate ended with a non-OK status), by gRPC status code name.
  void CallFailed(const std::string& code);
  // Where Render reads the engine's statistics; what `source` reports now (e.g. a warm-up
  // session) is the baseline and is not counted.
  void SetStatsSource(std::function<engine::EngineStats()> source);

 private:
  // Engine statistics: gauges are set, counters advance by what is new since the last call.
  void UpdateLocked(const engine::EngineStats& stats) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stats_mu_);

  std::shared_ptr<prometheus::Registry> registry_;
  std::string model_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;
  prometheus::Histogram* iteration_tokens_;
  prometheus::Histogram* word_lag_words_;
  prometheus::Histogram* word_lag_seconds_;
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* kv_usage_;
  prometheus::Counter* source_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Counter* preemptions_;
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;
  prometheus::Family<prometheus::Counter>* call_errors_;
  prometheus::Family<prometheus::Counter>* finished_;
  // One scrape at a time reads and counts the engine's statistics.
  absl::Mutex stats_mu_;
  std::function<engine::EngineStats()> stats_source_ ABSL_GUARDED_BY(stats_mu_);
  engine::EngineStats last_ ABSL_GUARDED_BY(stats_mu_);
  // Last: destroyed (its thread stopped) before the families its scrapes read.
  std::unique_ptr<MetricsHttpServer> http_;
};

}  // namespace gpeserve::server
