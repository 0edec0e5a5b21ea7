// One row of `gpe bench`: a number of sessions run at once on an engine, each streaming the same
// source through its policy, measured from the client's side (time to first token, inter-token
// latency, latency to the end) and the engine's (tokens and sessions per forward step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace gpeserve::cli {

struct Row {
  int sessions = 0;
  double seconds = 0;
  int64_t target_tokens = 0;
  int64_t source_tokens = 0;
  double ttft_p50 = 0, ttft_p99 = 0;  // ms from Open to the first token
  double itl_p50 = 0, itl_p99 = 0;    // ms between consecutive tokens of a session
  double tokens_per_step = 0;
  double sessions_per_step = 0;
  int64_t steps = 0;
  std::vector<double> latencies;  // ms from Open to the final event, per session
};

// Runs `n` sessions at once on `eng` and measures them; session i runs adapter
// adapters[i % size] (none: the base).
absl::StatusOr<Row> RunRow(engine::Engine& eng, engine::SessionConfig config,
                           const std::vector<std::string>& words, int n,
                           const std::vector<std::string>& adapters = {});

}  // namespace gpeserve::cli
