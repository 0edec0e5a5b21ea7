#include "engine/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::sampler {
namespace {

TEST(SamplerTest, GreedyTakesTheFirstLargest) {
  Sampler s({}, 1);
  EXPECT_EQ(s.Sample(std::vector<float>{0.5f, 2.f, -1.f, 2.f}), 1);
}

// Frequencies follow softmax(logits / T) restricted by top-k and top-p (a chi-square-like
// bound on 20000 draws), and tokens outside the kept set never appear.
TEST(SamplerTest, FrequenciesFollowTheTruncatedDistribution) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  struct Case {
    SamplingParams params;
    std::vector<int> kept;
  };
  std::vector<Case> cases = {
      {{.temperature = 1.0}, {0, 1, 2, 3, 4, 5}},
      {{.temperature = 0.7, .top_k = 3}, {0, 1, 2}},
      // At T=1: p(0)=0.561, p(1)=0.206, p(2)=0.125: 0.561 < 0.75 <= 0.561 + 0.206.
      {{.temperature = 1.0, .top_p = 0.75}, {0, 1}},
      {{.temperature = 1.0, .top_p = 0.8}, {0, 1, 2}},
      {{.temperature = 2.0, .top_k = 5, .top_p = 0.5}, {0, 1}},
  };
  for (const Case& c : cases) {
    std::vector<double> expected(logits.size(), 0);
    double total = 0;
    for (int i : c.kept) total += expected[i] = std::exp(logits[i] / c.params.temperature);
    Sampler s(c.params, 42);
    std::map<int32_t, int> counts;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++counts[s.Sample(logits)];
    for (size_t i = 0; i < logits.size(); ++i) {
      const double p = expected[i] / total;
      const double freq = counts[static_cast<int32_t>(i)] / static_cast<double>(n);
      EXPECT_NEAR(freq, p, 4 * std::sqrt(p * (1 - p) / n) + 1e-9)
          << "token " << i << " temperature " << c.params.temperature;
    }
  }
}

TEST(SamplerTest, SameSeedSameSequence) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingParams params{.temperature = 1.0, .top_p = 0.9, .seed = 7};
  Sampler a(params, 1), b(params, 2), c({.temperature = 1.0, .top_p = 0.9}, 3);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    const int32_t x = a.Sample(logits), y = b.Sample(logits), z = c.Sample(logits);
    EXPECT_EQ(x, y);
    differ += x != z;
  }
  EXPECT_GT(differ, 50);  // another seed gives another sequence
}

// Without top-k and top-p the candidates are taken in id order: the token is the inverse
// transform of the same 53-bit draw over the probabilities in that order (what a given seed
// gives, on any standard library).
TEST(SamplerTest, PlainTemperatureDrawsInIdOrder) {
  std::vector<float> logits(5000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.01f * std::cos(0.37f * i);
  const double t = 0.8;
  Sampler sampler({.temperature = t, .seed = 11}, 1);
  std::mt19937_64 rng(11);
  const float best = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) total += p[i] = std::exp((logits[i] - best) / t);
  for (int draw = 0; draw < 200; ++draw) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
    size_t expected = 0;
    for (double sum = p[0]; sum <= u && expected + 1 < p.size();) sum += p[++expected];
    EXPECT_EQ(sampler.Sample(logits), static_cast<int32_t>(expected)) << "draw " << draw;
  }
}

TEST(SamplerTest, ValidateNamesTheField) {
  EXPECT_TRUE(Validate({}).ok());
  EXPECT_NE(Validate({.temperature = -1}).message().find("temperature"), std::string::npos);
  EXPECT_NE(Validate({.temperature = NAN}).message().find("temperature"), std::string::npos);
  EXPECT_NE(Validate({.top_k = -2}).message().find("top_k"), std::string::npos);
  EXPECT_NE(Validate({.top_p = 0}).message().find("top_p"), std::string::npos);
  EXPECT_NE(Validate({.top_p = 1.5}).message().find("top_p"), std::string::npos);
}

}  // namespace
}  // namespace gpeserve::sampler
