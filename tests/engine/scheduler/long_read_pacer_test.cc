#include "engine/scheduler/long_read_pacer.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace gpeserve::scheduler {
namespace {

// A simulated engine: every step has other work costing `light`; a long read's tokens add
// `fixed` (its context's share, paid once per step) plus `per_token` each.
struct CostModel {
  double light, fixed, per_token;
};

struct Simulation {
  double mean_step = 0;     // over all steps
  int64_t long_tokens = 0;  // read by the long read
};

Simulation Simulate(double slowdown, const CostModel& cost, int steps) {
  LongReadPacer pacer(slowdown);
  Simulation run;
  double total = 0;
  for (int i = 0; i < steps; ++i) {
    const LongReadBudget budget = pacer.Budget();
    const int64_t n = budget.with_others < 0 ? 512 : std::min<int64_t>(512, budget.with_others);
    const double seconds = cost.light + (n > 0 ? cost.fixed + cost.per_token * n : 0);
    pacer.Observe(n, /*others=*/true, seconds);
    total += seconds;
    run.long_tokens += n;
  }
  run.mean_step = total / steps;
  return run;
}

// Whatever a long read costs (a large fixed part or a large part per token), the steps of the
// others take on average at most `slowdown` times their own length (and a little for the first
// steps, which learn the costs), and the long read still makes progress.
TEST(LongReadPacerTest, OthersAreSlowedAtMostByTheFactor) {
  for (const double slowdown : {1.25, 1.5, 2.0, 3.0}) {
    for (const CostModel& cost :
         {CostModel{1, 0, 0.05}, CostModel{1, 3, 0.05}, CostModel{1, 20, 0.5},
          CostModel{2, 0.1, 0.001}, CostModel{1, 100, 0.01}}) {
      const Simulation run = Simulate(slowdown, cost, 5000);
      EXPECT_LE(run.mean_step, slowdown * cost.light * 1.03)
          << "slowdown " << slowdown << " fixed " << cost.fixed << " per token " << cost.per_token;
      EXPECT_GT(run.long_tokens, 100) << "slowdown " << slowdown << " fixed " << cost.fixed;
      // It uses what it may: the average is not far below the bound (or below what the whole
      // step budget of 512 tokens costs).
      const double most = std::min((slowdown - 1) * cost.light, cost.fixed + 512 * cost.per_token);
      EXPECT_GE(run.mean_step, cost.light + 0.6 * most)
          << "slowdown " << slowdown << " fixed " << cost.fixed;
    }
  }
}

TEST(LongReadPacerTest, AloneStepsAreAFewLightStepsLong) {
  LongReadPacer pacer(1.5);
  EXPECT_EQ(pacer.Budget().alone, -1);  // nothing measured: no limit
  pacer.Observe(0, /*others=*/true, 0.002);
  pacer.Observe(512, /*others=*/false, 0.512);  // 1 ms per token alone
  // Four light steps (8 ms) at 1 ms a token.
  EXPECT_EQ(pacer.Budget().alone, 16);
  pacer.Observe(0, true, 0.010);
  pacer.Observe(0, true, 0.010);
  pacer.Observe(0, true, 0.010);
  EXPECT_GT(pacer.Budget().alone, 16);
}

TEST(LongReadPacerTest, ZeroTurnsPacingOff) {
  LongReadPacer pacer(0);
  pacer.Observe(0, true, 0.001);
  pacer.Observe(100, true, 1.0);
  EXPECT_EQ(pacer.Budget().with_others, -1);
  EXPECT_EQ(pacer.Budget().alone, -1);
}

}  // namespace
}  // namespace gpeserve::scheduler
