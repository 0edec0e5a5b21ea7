#include "engine/eval/word_lag.h"

#include <algorithm>

namespace gpeserve::eval {

WordLagSplit SplitWordLag(const std::vector<StepSpan>& steps, double arrived, double delivered) {
  const auto by_start = [](const StepSpan& step, double t) { return step.start < t; };
  const auto first = std::lower_bound(steps.begin(), steps.end(), arrived, by_start);
  const auto after = std::lower_bound(first, steps.end(), delivered, by_start);
  WordLagSplit split;
  if (first == after) {
    split.waiting = delivered - arrived;
    return split;
  }
  split.waiting = first->start - arrived;
  split.computing = delivered - first->start;
  split.steps = static_cast<int>(after - first);
  return split;
}

}  // namespace gpeserve::eval
