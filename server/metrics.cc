#include "server/metrics.h"

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace gpeserve::server {
namespace {

using prometheus::Histogram;

const Histogram::BucketBoundaries kLatencyBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0};
const Histogram::BucketBoundaries kSessionBuckets = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,
                                                     2.5,  5.0,  10.0, 15.0,  20.0,  30.0,
                                                     40.0, 50.0, 60.0, 120.0, 240.0, 480.0};
const Histogram::BucketBoundaries kTokenBuckets = {1,   2,   4,   8,    16,   32,   64,
                                                   128, 256, 512, 1024, 2048, 4096, 8192};
const Histogram::BucketBoundaries kWordBuckets = {0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50};
const Histogram::BucketBoundaries kBlockBuckets = {1,   2,   4,   8,    16,   32,  64,
                                                   128, 256, 512, 1024, 2048, 4096};

}  // namespace

Metrics::Metrics(const std::string& model, const std::vector<std::string>& adapters,
                 const std::string& base_label)
    : registry_(std::make_shared<prometheus::Registry>()), model_(model), base_label_(base_label) {
  const prometheus::Labels labels{{"model", model}};
  auto histogram_family = [&](const std::string& name, const std::string& help) {
    return &prometheus::BuildHistogram().Name("gpeserve:" + name).Help(help).Register(*registry_);
  };
  auto gauge = [&](const std::string& name, const std::string& help) {
    return &prometheus::BuildGauge()
                .Name("gpeserve:" + name)
                .Help(help)
                .Register(*registry_)
                .Add(labels);
  };
  auto counter = [&](const std::string& name, const std::string& help) {
    return &prometheus::BuildCounter()
                .Name("gpeserve:" + name)
                .Help(help)
                .Register(*registry_)
                .Add(labels);
  };
  // Per session, by adapter.
  auto* ttft = histogram_family("time_to_first_token_seconds",
                                "Time from the session's config to its first target token.");
  auto* itl = histogram_family("inter_token_latency_seconds",
                               "Time between consecutive target tokens of a session.");
  auto* e2e =
      histogram_family("e2e_session_latency_seconds", "Time from a session's config to its end.");
  auto* queue = histogram_family("queue_time_seconds",
                                 "Time a session waited before its first forward step.");
  auto* word_lag_words = histogram_family(
      "word_lag_words",
      "Per target word: source words read when it was complete, beyond the words it could have "
      "followed (its delay minus its index).");
  auto* word_lag_seconds = histogram_family(
      "word_lag_seconds",
      "Per target word: wall time from the arrival of the last source word it read to its "
      "emission.");
  auto* segments =
      &prometheus::BuildCounter()
           .Name("gpeserve:segments_total")
           .Help("Segments finished by long-form sessions (rate(): segments per second).")
           .Register(*registry_);
  auto* long_form_kv = histogram_family(
      "long_form_kv_blocks",
      "Per finished segment of a long-form session: the most KV blocks the session has held "
      "(bounded by the prompt and one segment, however long the stream).");
  auto* finished = &prometheus::BuildCounter()
                        .Name("gpeserve:session_finished_total")
                        .Help(
                            "Sessions ended, by reason (end_of_sequence, max_new_tokens, max_lag, "
                            "cancelled, error; long-form: end_of_source).")
                        .Register(*registry_);
  std::vector<std::string> names = {base_label};
  names.insert(names.end(), adapters.begin(), adapters.end());
  for (const std::string& adapter : names) {
    const prometheus::Labels l{{"model", model}, {"adapter", adapter}};
    SessionSeries& series = series_[adapter];
    series.ttft = &ttft->Add(l, kLatencyBuckets);
    series.itl = &itl->Add(l, kLatencyBuckets);
    series.e2e = &e2e->Add(l, kSessionBuckets);
    series.queue = &queue->Add(l, kLatencyBuckets);
    series.word_lag_words = &word_lag_words->Add(l, kWordBuckets);
    series.word_lag_seconds = &word_lag_seconds->Add(l, kLatencyBuckets);
    series.segments = &segments->Add(l);
    series.long_form_kv_blocks = &long_form_kv->Add(l, kBlockBuckets);
    for (const char* reason :
         {"end_of_sequence", "max_new_tokens", "max_lag", "cancelled", "error", "end_of_source"}) {
      prometheus::Labels with_reason = l;
      with_reason["reason"] = reason;
      series.finished[reason] = &finished->Add(with_reason);
    }
  }
  iteration_tokens_ = &histogram_family("iteration_tokens", "Tokens computed in one forward step.")
                           ->Add(labels, kTokenBuckets);
  running_ = gauge("num_sessions_running", "Sessions admitted to the engine.");
  waiting_ = gauge("num_sessions_waiting", "Sessions waiting for admission (new or preempted).");
  kv_usage_ = gauge("kv_cache_usage_perc", "Fraction of KV cache blocks in use (0 to 1).");
  kv_cached_ = gauge("kv_cache_cached_blocks",
                     "Free KV cache blocks that keep a prompt prefix for later sessions (the "
                     "prefix cache; reused, or evicted when a block is needed).");
  source_tokens_ = counter("source_tokens_total", "Prompt and source tokens read.");
  generation_tokens_ = counter("generation_tokens_total", "Target tokens generated.");
  preemptions_ = counter("num_preemptions_total", "Sessions preempted by recompute.");
  prefix_queries_ = counter("prefix_cache_queries_total",
                            "Prompt prefix tokens looked up in the prefix cache (the tokens of "
                            "full KV blocks; a prompt's partial last block is not looked up).");
  prefix_hits_ = counter("prefix_cache_hits_total",
                         "Prompt prefix tokens found in the prefix cache (not computed again).");
  call_errors_ = &prometheus::BuildCounter()
                      .Name("gpeserve:request_errors_total")
                      .Help(
                          "Stream and Generate calls that ended with an error, by gRPC status "
                          "code (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE, ...), "
                          "refusals before a session started included.")
                      .Register(*registry_);
  limit_hits_ = &prometheus::BuildCounter()
                     .Name("gpeserve:limit_refusals_total")
                     .Help(
                         "Sessions refused or ended by a per-client limit, by the gpeserve flag "
                         "that sets it (max_sessions_per_connection, max_session_source_bytes, "
                         "session_idle_seconds, max_unread_source_units).")
                     .Register(*registry_);
  for (const char* limit : kLimits) {
    limit_counters_[limit] = &limit_hits_->Add({{"model", model}, {"limit", limit}});
  }
  // The codes a client can cause, present from the start so that rate() sees them at zero.
  for (const char* code : {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNAVAILABLE",
                           "UNAUTHENTICATED", "CANCELLED", "INTERNAL"}) {
    call_errors_->Add({{"model", model}, {"code", code}});
  }
}

Metrics::~Metrics() = default;

absl::Status Metrics::Serve(const std::string& address) {
  auto http = MetricsHttpServer::Start(address, [this] { return Render(); });
  if (!http.ok()) return http.status();
  http_ = *std::move(http);
  return absl::OkStatus();
}

int Metrics::port() const { return http_ ? http_->port() : 0; }

std::string Metrics::Render() {
  {
    // One scrape at a time reads and counts the engine's statistics: two interleaved ones could
    // move the counters' baseline back and count the same tokens twice.
    MutexLock lock(&stats_mu_);
    if (stats_source_) UpdateLocked(stats_source_());
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

const Metrics::SessionSeries& Metrics::Series(const std::string& adapter) const {
  const auto it = series_.find(adapter.empty() ? base_label_ : adapter);
  return it != series_.end() ? it->second : series_.at(base_label_);
}

void Metrics::ObserveStep(int64_t tokens) { iteration_tokens_->Observe(tokens); }
void Metrics::ObserveQueueTime(const SessionSeries& s, double seconds) {
  s.queue->Observe(seconds);
}
void Metrics::ObserveTimeToFirstToken(const SessionSeries& s, double seconds) {
  s.ttft->Observe(seconds);
}
void Metrics::ObserveInterTokenLatency(const SessionSeries& s, double seconds) {
  s.itl->Observe(seconds);
}
void Metrics::ObserveSessionLatency(const SessionSeries& s, double seconds) {
  s.e2e->Observe(seconds);
}
void Metrics::ObserveWordLag(const SessionSeries& s, double words, double seconds) {
  s.word_lag_words->Observe(words);
  s.word_lag_seconds->Observe(seconds);
}

void Metrics::SegmentFinished(const SessionSeries& s, int64_t kv_blocks_high_water) {
  s.segments->Increment();
  s.long_form_kv_blocks->Observe(static_cast<double>(kv_blocks_high_water));
}

void Metrics::SessionFinished(const SessionSeries& s, const std::string& reason) {
  if (const auto it = s.finished.find(reason); it != s.finished.end()) it->second->Increment();
}

void Metrics::CallFailed(const std::string& code) {
  call_errors_->Add({{"model", model_}, {"code", code}}).Increment();
}

void Metrics::LimitHit(const std::string& limit) {
  if (const auto it = limit_counters_.find(limit); it != limit_counters_.end()) {
    it->second->Increment();
  }
}

void Metrics::SetStatsSource(std::function<engine::EngineStats()> source) {
  MutexLock lock(&stats_mu_);
  if (source) last_ = source();
  stats_source_ = std::move(source);
}

void Metrics::UpdateLocked(const engine::EngineStats& stats) {
  running_->Set(static_cast<double>(stats.sessions_running));
  waiting_->Set(static_cast<double>(stats.sessions_waiting));
  kv_usage_->Set(stats.kv.total_blocks > 0
                     ? 1.0 - static_cast<double>(stats.kv.free_blocks) / stats.kv.total_blocks
                     : 0.0);
  kv_cached_->Set(static_cast<double>(stats.kv.cached_blocks));
  auto advance = [](prometheus::Counter* c, int64_t now, int64_t before) {
    if (now > before) c->Increment(static_cast<double>(now - before));
  };
  advance(source_tokens_, stats.source_tokens, last_.source_tokens);
  advance(generation_tokens_, stats.generated_tokens, last_.generated_tokens);
  advance(preemptions_, stats.preemptions, last_.preemptions);
  advance(limit_counters_.at("session_idle_seconds"), stats.idle_timeouts, last_.idle_timeouts);
  advance(limit_counters_.at("max_unread_source_units"), stats.unread_limit_hits,
          last_.unread_limit_hits);
  // In tokens, as vLLM counts them (the block size is fixed for the server's life).
  const int64_t bs = stats.kv.block_size;
  advance(prefix_queries_, bs * (stats.kv.prefix_hits + stats.kv.prefix_misses),
          bs * (last_.kv.prefix_hits + last_.kv.prefix_misses));
  advance(prefix_hits_, bs * stats.kv.prefix_hits, bs * last_.kv.prefix_hits);
  last_ = stats;
}

}  // namespace gpeserve::server
