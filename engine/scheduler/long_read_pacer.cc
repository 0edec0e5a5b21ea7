#include "engine/scheduler/long_read_pacer.h"

#include <algorithm>

namespace gpeserve::scheduler {
namespace {

double Average(double old, double sample, double weight) {
  return old == 0 ? sample : (1 - weight) * old + weight * sample;
}

}  // namespace

LongReadBudget LongReadPacer::Budget() const {
  if (slowdown_ <= 0) return {};
  LongReadBudget budget;
  if (credit_ < 0) {
    budget.with_others = 0;
  } else if (per_token_ <= 0) {
    budget.with_others = kMinTokens;  // their cost is not known yet
  } else {
    budget.with_others = std::max<int64_t>(
        kMinTokens, static_cast<int64_t>((credit_ + (slowdown_ - 1) * light_) / per_token_));
  }
  if (light_ > 0 && alone_per_token_ > 0) {
    budget.alone = std::max<int64_t>(
        kMinTokens, static_cast<int64_t>(kWindowSteps * light_ / alone_per_token_));
  }
  return budget;
}

void LongReadPacer::Observe(int64_t long_tokens, bool others, double seconds) {
  if (slowdown_ <= 0) return;
  if (!others) {
    if (long_tokens > 0) {
      alone_per_token_ = Average(alone_per_token_, seconds / static_cast<double>(long_tokens), 0.5);
    }
    return;
  }
  if (long_tokens == 0) {
    light_ = Average(light_, seconds, 0.2);
  } else {
    const double extra = std::max(0.0, seconds - light_) / static_cast<double>(long_tokens);
    per_token_ = Average(per_token_, extra, 0.5);
  }
  credit_ =
      std::min(credit_ + slowdown_ * light_ - seconds, kWindowSteps * (slowdown_ - 1) * light_);
}

}  // namespace gpeserve::scheduler
