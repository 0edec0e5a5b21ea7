// Word lag at speech pace, split by its causes (gpe bench --pace, docs/streaming.md).
//
// A target word's lag is the time from the arrival of the source unit whose read completed it
// (the last source word it had read, or the end of the source) to the word's delivery: what the
// engine reports as SessionEvent::lag_ms and the server's word-lag histogram observes. It splits
// into waiting (from the arrival to the start of the first engine step planned after it: the
// step then running, if any, could not take the word) and computing (from there to the
// delivery), and the computing part into the steps it took.
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

namespace gpeserve::eval {

// One engine step, in seconds of one clock: planned at `start`, its forward pass ended at `end`.
struct StepSpan {
  double start = 0;
  double end = 0;
};

// Where one word's lag went: lag = waiting + computing.
struct WordLagSplit {
  double waiting = 0;
  double computing = 0;
  int steps = 0;  // steps started from the arrival on and before the delivery
};

// `steps` sorted by start; `arrived` <= `delivered` on the same clock as the steps. With no step
// started in between, the whole lag is waiting.
WordLagSplit SplitWordLag(const std::vector<StepSpan>& steps, double arrived, double delivered);

}  // namespace gpeserve::eval
