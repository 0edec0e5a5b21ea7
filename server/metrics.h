// Prometheus metrics of the server, in the style of vLLM's (prefix `gpeserve:`, label `model`).
// Families are registered once at start-up and references kept; observing is thread-safe and
// cheap (the engine loop thread observes per step and per event).
//
// /metrics is served by a small HTTP/1.0 loop of our own (one thread, one request per
// connection) rather than prometheus-cpp's civetweb exposer: civetweb's worker threads have a
// fixed small stack that cannot hold the static TLS of libtorch's dependencies, so it fails to
// start in this process ("Cannot create first worker thread").
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "engine/engine.h"

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
  void ServeLoop();
  // Engine statistics: gauges are set, counters advance by what is new since the last call.
  // REQUIRES: stats_mu_ held.
  void UpdateLocked(const engine::EngineStats& stats);

  std::shared_ptr<prometheus::Registry> registry_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread http_thread_;
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
  std::function<engine::EngineStats()> stats_source_;  // guarded by stats_mu_
  prometheus::Family<prometheus::Counter>* finished_;
  engine::EngineStats last_;  // guarded by stats_mu_
  std::mutex stats_mu_;
};

}  // namespace gpeserve::server
