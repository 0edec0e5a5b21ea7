// What `gpe score --latency` reads, scored (docs/GPE.md 6; docs/server.md "The step log"):
// JSON lines of delay lists ({"delays": [...], "source_length": X, "target_length": Y}), or a
// gpe-client --log step log (its lines have a "kind"): per sentence session and per long-form
// segment, ideal AL and LAAL from the server's delays (|X| = words + 1, |Y| = output words) and
// computation-aware AL and LAAL in ms from the client's receipt of each completed word against
// the source as it was sent. Plain C++ over text: the entry point for fuzzing.
//
// Thread-safety: a function of its arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gpeserve::eval {

struct LatencyScore {
  int64_t session = 0;             // delay lists: the line's index among the scored ones
  std::optional<int64_t> segment;  // step log: a long-form session's segment
  double al = 0, laal = 0;         // in the delays' unit (source units, or ms)
  // Step log: computation-aware, in ms on the client's clock.
  std::optional<double> al_ms, laal_ms;
};

struct LatencyScores {
  bool step_log = false;  // the input was a gpe-client --log
  std::vector<LatencyScore> scores;
};

// Errors are InvalidArgument naming `name`, the line (from 1) and what is wrong with it.
absl::StatusOr<LatencyScores> ScoreLatencyInput(std::string_view text, const std::string& name);

}  // namespace gpeserve::eval
