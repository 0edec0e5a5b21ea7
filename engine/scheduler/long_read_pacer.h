// Pacing of long reads for the engine loop: how many tokens of long reads (a prompt of thousands
// of tokens, read in chunks; scheduler.h) the next step may take, from the measured times of the
// steps before it, so that the other sessions' steps take on average at most `slowdown` times as
// long as they take without them.
//
// Steps without a long read ("light" steps, with other sessions in them) earn credit: (slowdown
// - 1) times their length. A step with a long read and others spends what it costs beyond
// `slowdown` light steps. Long reads sit out steps with others while the credit is negative;
// otherwise they get as many tokens as the credit pays for at their measured cost per token
// (which grows with the context they attend to). The credit is capped at a few light steps'
// worth, so that one long step never holds the others up for long. With nobody else in a step,
// long reads take steps of a few light steps' length (a session that arrives meanwhile waits at
// most that), or no limit before any light step has been measured.
//
// Thread-safety: not thread-safe; the engine loop's.
#pragma once

#include <cstdint>

#include "engine/scheduler/scheduler.h"

namespace gpeserve::scheduler {

class LongReadPacer {
 public:
  // `slowdown`: 0 (no pacing: every budget unlimited) or at least 1.
  explicit LongReadPacer(double slowdown) : slowdown_(slowdown) {}

  // What long reads may take in the next step.
  LongReadBudget Budget() const;

  // A step ran for `seconds` with `long_tokens` tokens of long reads; `others`: it had other
  // pieces.
  void Observe(int64_t long_tokens, bool others, double seconds);

 private:
  static constexpr int64_t kMinTokens = 16;  // a long step reads at least this much
  static constexpr double kWindowSteps = 4;  // the credit's cap and an alone step, in light steps

  const double slowdown_;
  double light_ = 0;            // seconds of a recent light step (moving average)
  double per_token_ = 0;        // seconds a long-read token adds to a step with others
  double alone_per_token_ = 0;  // seconds per token of a step of long reads alone
  double credit_ = 0;           // seconds the others may still be slowed by
};

}  // namespace gpeserve::scheduler
