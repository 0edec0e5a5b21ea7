#include "engine/eval/latency.h"

#include "gtest/gtest.h"

namespace gpeserve::eval {
namespace {

TEST(LatencyTest, WaitKOnEqualLengthsLagsByK) {
  // 3 words + end (|X| = 4), wait-2, one target word per source word: delays 2, 3, 4, 4.
  const std::vector<double> delays = {2, 3, 4, 4};
  EXPECT_DOUBLE_EQ(AverageLagging(delays, 4, 4), 2.0);  // tau = 3: (2 + 2 + 2) / 3
  EXPECT_DOUBLE_EQ(LengthAdaptiveAverageLagging(delays, 4, 4), 2.0);
}

TEST(LatencyTest, HandComputedCases) {
  // |X| = 5, |Y| = 2 (gamma = 0.4): t=1: 3 - 0 = 3; t=2: 5 - 1/0.4 = 2.5 (reaches |X|) -> 2.75.
  EXPECT_DOUBLE_EQ(AverageLagging({3, 5, 5}, 5, 2), 2.75);
  // LAAL uses max(|Y|, 3 delays) = 3 (gamma = 0.6): 3, 5 - 1/0.6 -> (3 + 3.3333) / 2.
  EXPECT_DOUBLE_EQ(LengthAdaptiveAverageLagging({3, 5, 5}, 5, 2), (3 + (5 - 1 / 0.6)) / 2);
  // First delay beyond the source: AL = LAAL = d1.
  EXPECT_DOUBLE_EQ(AverageLagging({6, 6}, 5, 2), 6);
  EXPECT_DOUBLE_EQ(LengthAdaptiveAverageLagging({6, 6}, 5, 2), 6);
  // Offline (everything read first): AL = |X| - (tau-1)/gamma with tau = 1.
  EXPECT_DOUBLE_EQ(AverageLagging({4, 4, 4}, 4, 3), 4);
  EXPECT_DOUBLE_EQ(AverageLagging({}, 4, 3), 0);
}

TEST(LatencyTest, NearestRankPercentile) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({5, 1, 3, 2, 4}, 50), 3);  // rank ceil(2.5) = 3
  EXPECT_EQ(Percentile({5, 1, 3, 2, 4}, 99), 5);  // rank ceil(4.95) = 5
  EXPECT_EQ(Percentile({5, 1, 3, 2, 4}, 0), 1);   // rank 0 reads the smallest
  EXPECT_EQ(Percentile({7, 9}, 51), 9);
}

}  // namespace
}  // namespace gpeserve::eval
