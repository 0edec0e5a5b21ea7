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
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "gpeserve/v1/gpeserve.pb.h"
#include "grpcpp/support/status.h"
#include "server/metrics.h"

namespace gpeserve::server {

// Converts a Status to a gRPC status (same code and message).
grpc::Status ToGrpc(const absl::Status& status);

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

  // `metrics` may be null; a client more than `max_queued` responses behind gets its session
  // cancelled.
  Pipe(Sink* sink, Metrics* metrics, size_t max_queued)
      : sink_(sink), metrics_(metrics), max_queued_(max_queued) {}

  // Source units arrived (the reactor's thread): their arrival times, for word lag.
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
  // Starts the next write, or finishes the call when everything is written. Called with mu_
  // held; releases it before calling into gRPC (a reaction may run inline).
  void Pump(std::unique_lock<std::mutex>& lock);
  void ObserveTokens(Clock::time_point now, size_t count);
  // A target word ended with `units_read` source units read.
  void ObserveWord(Clock::time_point now, int64_t units_read);
  double MsSinceFirstArrival(Clock::time_point now) const;

  std::mutex mu_;
  Sink* sink_;  // guarded by mu_; null after Detach
  Metrics* const metrics_;
  const size_t max_queued_;
  const Clock::time_point opened_ = Clock::now();
  std::deque<v1::StreamResponse> queue_;     // guarded by mu_; front is being written if writing_
  bool writing_ = false;                     // guarded by mu_
  std::optional<grpc::Status> end_;          // guarded by mu_: finish with this once drained
  bool ended_ = false;                       // guarded by mu_: Finish was called (or detached)
  std::vector<Clock::time_point> arrivals_;  // guarded by mu_: per source unit
  std::vector<double> word_ms_;              // guarded by mu_: per target word
  std::optional<Clock::time_point> last_token_;  // guarded by mu_
};

}  // namespace gpeserve::server
