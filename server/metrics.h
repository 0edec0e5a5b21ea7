// Prometheus metrics of the server, in the style of vLLM's (prefix `gpeserve:`, label `model`).
// Families are registered once at start-up and references kept; observing is thread-safe and
// cheap (the engine loop thread observes per step and per event).
// /metrics is served by MetricsHttpServer (metrics_http.h).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "engine/engine.h"
#include "engine/util/mutex.h"
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
  // The series of one adapter's sessions (label adapter="<name>", "base" for the model alone).
  struct SessionSeries {
    prometheus::Histogram* ttft;
    prometheus::Histogram* itl;
    prometheus::Histogram* e2e;
    prometheus::Histogram* queue;
    prometheus::Histogram* word_lag_words;
    prometheus::Histogram* word_lag_seconds;
    prometheus::Counter* segments;               // long-form segments finished
    prometheus::Histogram* long_form_kv_blocks;  // per segment: the session's KV high-water
    std::map<std::string, prometheus::Counter*> finished;  // by reason
  };
  // The `adapter` label of sessions on the model alone.
  static constexpr char kBaseAdapter[] = "base";

  // `model`: the value of the `model` label on every series; `adapters`: the adapters sessions
  // may pick (besides the base), each with its own per-session series.
  // `base_label`: the adapter label of sessions that name no adapter.
  explicit Metrics(const std::string& model, const std::vector<std::string>& adapters = {},
                   const std::string& base_label = kBaseAdapter);
  ~Metrics();

  // Serves /metrics on `address` (IPv4 host:port; port 0 picks one) from a thread of its own.
  // Errors: a bad address, the port in use.
  absl::Status Serve(const std::string& address);
  // The port /metrics is served on (0 before Serve).
  int port() const;
  // The exposition text, as a scrape returns it (engine statistics read at that moment).
  std::string Render();

  // The series of sessions of `adapter` (empty: the base); the base's for an unknown name.
  const SessionSeries& Series(const std::string& adapter) const;

  // ---- Observations ----
  void ObserveStep(int64_t tokens);  // tokens in one forward step
  // A session's: from open to first step; to its first token; between tokens; from open to
  // done; per target word (words beyond its index, seconds since the source word it needed);
  // its end, by reason (done reasons and "error").
  static void ObserveQueueTime(const SessionSeries& s, double seconds);
  static void ObserveTimeToFirstToken(const SessionSeries& s, double seconds);
  static void ObserveInterTokenLatency(const SessionSeries& s, double seconds);
  static void ObserveSessionLatency(const SessionSeries& s, double seconds);
  static void ObserveWordLag(const SessionSeries& s, double words, double seconds);
  static void SessionFinished(const SessionSeries& s, const std::string& reason);
  // A long-form session finished a segment; the most KV blocks it has held so far.
  static void SegmentFinished(const SessionSeries& s, int64_t kv_blocks_high_water);
  // A failed call (Stream or Generate ended with a non-OK status), by gRPC status code name.
  void CallFailed(const std::string& code);
  // The per-client limits, by their gpeserve flag (the `limit` label); the engine's two
  // (session_idle_seconds, max_unread_source_units) are counted from its statistics.
  static constexpr const char* kLimits[] = {"max_sessions_per_connection",
                                            "max_session_source_bytes", "session_idle_seconds",
                                            "max_unread_source_units"};
  // A session refused or ended by the server's limit `limit` (one of kLimits).
  void LimitHit(const std::string& limit);
  // Where Render reads the engine's statistics; what `source` reports now (e.g. a warm-up
  // session) is the baseline and is not counted.
  void SetStatsSource(std::function<engine::EngineStats()> source);

 private:
  // Engine statistics: gauges are set, counters advance by what is new since the last call.
  void UpdateLocked(const engine::EngineStats& stats) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stats_mu_);

  std::shared_ptr<prometheus::Registry> registry_;
  std::string model_;
  std::map<std::string, SessionSeries> series_;  // by adapter label
  std::string base_label_;
  prometheus::Histogram* iteration_tokens_;
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* kv_usage_;
  prometheus::Gauge* kv_cached_;
  prometheus::Counter* source_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Counter* preemptions_;
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;
  prometheus::Family<prometheus::Counter>* call_errors_;
  prometheus::Family<prometheus::Counter>* limit_hits_;
  std::map<std::string, prometheus::Counter*> limit_counters_;  // by limit
  // One scrape at a time reads and counts the engine's statistics.
  Mutex stats_mu_;
  std::function<engine::EngineStats()> stats_source_ ABSL_GUARDED_BY(stats_mu_);
  engine::EngineStats last_ ABSL_GUARDED_BY(stats_mu_);
  // Last: destroyed (its thread stopped) before the families its scrapes read.
  std::unique_ptr<MetricsHttpServer> http_;
};

}  // namespace gpeserve::server
