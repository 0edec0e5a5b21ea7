#include "engine/eval/word_lag.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::eval {
namespace {

// Steps of 0.1 s planned back to back from t = 1.0: [1.0, 1.1), [1.1, 1.2), ...
std::vector<StepSpan> BackToBack(int count) {
  std::vector<StepSpan> steps;
  for (int i = 0; i < count; ++i) steps.push_back({1.0 + 0.1 * i, 1.0 + 0.1 * (i + 1)});
  return steps;
}

TEST(WordLagTest, AWordArrivingDuringAStepWaitsForTheNext) {
  // Arrives at 1.04 while the step of 1.0 runs: waits 0.06 for the step of 1.1, then the steps
  // of 1.1 and 1.2 compute it; delivered at the end of the second, 1.3.
  const WordLagSplit split = SplitWordLag(BackToBack(10), 1.04, 1.3);
  EXPECT_NEAR(split.waiting, 0.06, 1e-12);
  EXPECT_NEAR(split.computing, 0.2, 1e-12);
  EXPECT_EQ(split.steps, 2);
}

TEST(WordLagTest, AStepPlannedAtTheArrivalTakesTheWord) {
  const WordLagSplit split = SplitWordLag(BackToBack(10), 1.2, 1.3);
  EXPECT_EQ(split.waiting, 0);
  EXPECT_NEAR(split.computing, 0.1, 1e-12);
  EXPECT_EQ(split.steps, 1);
}

TEST(WordLagTest, NoStepInBetweenIsAllWaiting) {
  EXPECT_EQ(SplitWordLag({}, 2.0, 2.5).steps, 0);
  EXPECT_DOUBLE_EQ(SplitWordLag({}, 2.0, 2.5).waiting, 0.5);
  const WordLagSplit split = SplitWordLag(BackToBack(3), 1.35, 1.5);  // after the last step
  EXPECT_DOUBLE_EQ(split.waiting, 0.15);
  EXPECT_EQ(split.computing, 0);
  EXPECT_EQ(split.steps, 0);
}

// Against a linear scan over random steps with gaps: the parts add up to the lag, and the steps
// counted are those started in [arrived, delivered).
TEST(WordLagTest, MatchesALinearScan) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> length(0.01, 0.2), gap(0.0, 0.05), when(0.0, 12.0);
  std::vector<StepSpan> steps;
  double t = 0;
  while (t < 10) {
    const double start = t + gap(rng);
    t = start + length(rng);
    steps.push_back({start, t});
  }
  for (int trial = 0; trial < 2000; ++trial) {
    double arrived = when(rng), delivered = when(rng);
    if (delivered < arrived) std::swap(arrived, delivered);
    int count = 0;
    double first_start = -1;
    for (const StepSpan& step : steps) {
      if (step.start < arrived || step.start >= delivered) continue;
      if (count++ == 0) first_start = step.start;
    }
    const WordLagSplit split = SplitWordLag(steps, arrived, delivered);
    EXPECT_EQ(split.steps, count);
    EXPECT_NEAR(split.waiting + split.computing, delivered - arrived, 1e-9);
    EXPECT_NEAR(split.waiting, count > 0 ? first_start - arrived : delivered - arrived, 1e-9);
  }
}

}  // namespace
}  // namespace gpeserve::eval
