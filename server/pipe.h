// The output side of a call: what a reactor (gRPC threads) and its engine session's callback
// (the engine loop thread) share. Engine events become queued responses, written one at a time
// through the reactor; the call finishes once the final response is written. Per-session
// metrics (time to first token, inter-token latency, word lag, session time) are observed here.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "engine/engine.h"
#include "engine/util/mutex.h"
#include "gpeserve/v1/gpeserve.pb.h"
#include "grpcpp/support/status.h"
#include "server/metrics.h"

namespace gpeserve::server {

class Pipe {
 public:
  using Clock = std::chrono::steady_clock;

  // What the pipe writes into: the reactor.
  class Sink {
   public:
    virtual ~Sink() = default;
    virtual void Write(const v1::StreamResponse& response) = 0;  // StartWrite
    virtual void End(const grpc::Status& status) = 0;            // Finish
  };

  // `metrics` may be null, or must outlive the engine's last event to this pipe (a session's
  // end is counted even after Detach); a client more than `max_queued` responses behind gets
  // its session cancelled.
  Pipe(Sink* sink, Metrics* metrics, size_t max_queued)
      : metrics_(metrics),
        max_queued_(max_queued),
        sink_(sink),
        series_(metrics != nullptr ? &metrics->Series("") : nullptr) {}

  // The session's adapter (empty: the base, the default), for its metrics' series; before
  // the session opens.
  void SetAdapter(const std::string& adapter);
  // Source units arrived (the reactor's thread): the first one's time starts the session's
  // delays_ms.
  void SourceArrived(size_t units);
  // The engine's callback (loop thread). False when the client is too far behind.
  bool OnEvent(const engine::SessionEvent& e);
  // Ends the call with `status` once what is queued is written (any thread).
  void Fail(const grpc::Status& status);
  // The reactor's OnWriteDone.
  void OnWriteDone(bool ok);
  // The reactor's OnDone: nothing may touch the sink from now on.
  void Detach();

 private:
  // What to do with the sink once mu_ is released (gRPC may run a reaction inline, which
  // takes mu_ again).
  struct Action {
    Sink* sink = nullptr;
    const v1::StreamResponse* write = nullptr;  // stays put until OnWriteDone pops it
    std::optional<grpc::Status> end;
  };
  // The next write, or the end of the call once everything is written.
  Action Next() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Perform(const Action& action);
  void ObserveTokens(Clock::time_point now, size_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The session's end (kDone, kError) in the metrics.
  void ObserveEnd(Clock::time_point now, const engine::SessionEvent& e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A target word ended (event `e`: its units read, its lag).
  void ObserveWord(Clock::time_point now, const engine::SessionEvent& e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double MsSinceFirstArrival(Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Microseconds since the session opened.
  int64_t SessionMicros(Clock::time_point now) const;

  Metrics* const metrics_;
  const size_t max_queued_;
  const Clock::time_point opened_ = Clock::now();
  Mutex mu_;
  Sink* sink_ ABSL_GUARDED_BY(mu_);  // null after Detach
  // Front is being written if writing_.
  std::deque<v1::StreamResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> end_ ABSL_GUARDED_BY(mu_);  // finish with this once drained
  bool ended_ ABSL_GUARDED_BY(mu_) = false;               // Finish was called (or detached)
  std::optional<Clock::time_point> first_arrival_ ABSL_GUARDED_BY(mu_);
  // Per target word (of the segment, long-form): ms since the first arrival.
  std::vector<double> word_ms_ ABSL_GUARDED_BY(mu_);
  int64_t segment_words_ ABSL_GUARDED_BY(mu_) = 0;  // target words of the running segment
  std::optional<Clock::time_point> last_token_ ABSL_GUARDED_BY(mu_);
  // The session's series in metrics_ (null without metrics).
  const Metrics::SessionSeries* series_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace gpeserve::server
