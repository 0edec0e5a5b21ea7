// The paged CPU attention kernel against a double-precision reference that builds each row's
// mask the long way (every context key, the run's own keys causally or in its leading block,
// then the last `window` of them counted from the right), on every instruction set this CPU
// runs, fp32, bf16 and fp16 pools, grouped and plain heads, head sizes off the vector width,
// scattered slots, soft caps and windows.
#include "engine/kernels/cpu_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "tests/engine/kernels/isas_here.h"

namespace gpeserve::model::cpu {
namespace {

using testing::IsasHere;

// A pool of `slots` random K and V rows in one element type, with the exact values stored.
struct Pool {
  WeightType type;
  int64_t kv_heads, dim;
  std::vector<uint8_t> k, v;
  std::vector<double> k_value, v_value;  // [slots, kv_heads, dim]

  Pool(WeightType t, int64_t slots, int64_t heads, int64_t d, std::mt19937& rng)
      : type(t), kv_heads(heads), dim(d) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t n = slots * heads * d;
    Fill(n, rng, normal, k, k_value);
    Fill(n, rng, normal, v, v_value);
  }

  void Fill(int64_t n, std::mt19937& rng, std::normal_distribution<float>& normal,
            std::vector<uint8_t>& bytes, std::vector<double>& value) const {
    bytes.resize(n * (type == WeightType::kF32 ? 4 : 2));
    value.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      const float x = normal(rng);
      if (type == WeightType::kF32) {
        std::memcpy(bytes.data() + 4 * i, &x, 4);
        value[i] = x;
      } else {
        const uint16_t h = type == WeightType::kBF16 ? FloatToBf16(x) : FloatToHalf(x);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
        value[i] = type == WeightType::kBF16 ? Bf16ToFloat(h) : HalfToFloat(h);
      }
    }
  }

  KvLayerView view() const { return {k.data(), v.data(), type, kv_heads, dim}; }
};

// The keys row `row` of a run may see, as a mask over its key list.
std::vector<bool> ReferenceMask(const AttentionRun& run, int64_t row, int64_t window) {
  const int64_t keys = run.context + run.length;
  std::vector<bool> allowed(keys, false);
  for (int64_t j = 0; j < run.context; ++j) allowed[j] = true;
  for (int64_t own = 0; own < run.length; ++own) {
    const bool both_ways = row < run.noncausal && own < run.noncausal;
    if (own <= row || both_ways) allowed[run.context + own] = true;
  }
  if (window > 0) {
    int64_t seen = 0;
    for (int64_t j = keys - 1; j >= 0; --j) {
      if (allowed[j] && ++seen > window) allowed[j] = false;
    }
  }
  return allowed;
}

// out[h, :] for the heads of kv_head, in double precision.
std::vector<double> Reference(const Pool& pool, const AttentionSpec& spec, const AttentionRun& run,
                              int64_t row, int64_t kv_head, const std::vector<float>& q) {
  const int64_t group = spec.heads / pool.kv_heads, d = pool.dim;
  const std::vector<bool> allowed = ReferenceMask(run, row, spec.window);
  std::vector<double> out(group * d, 0.0);
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = kv_head * group + g;
    std::vector<double> score(allowed.size(), -INFINITY);
    for (size_t j = 0; j < allowed.size(); ++j) {
      if (!allowed[j]) continue;
      const int64_t base = (run.key_slots[j] * pool.kv_heads + kv_head) * d;
      double s = 0;
      for (int64_t i = 0; i < d; ++i)
        s += static_cast<double>(q[h * d + i]) * pool.k_value[base + i];
      s *= spec.scale;
      if (spec.softcap > 0) s = std::tanh(s / spec.softcap) * spec.softcap;
      score[j] = s;
    }
    const double top = *std::max_element(score.begin(), score.end());
    double sum = 0;
    for (double& s : score) sum += (s = std::exp(s - top));
    for (size_t j = 0; j < allowed.size(); ++j) {
      const int64_t base = (run.key_slots[j] * pool.kv_heads + kv_head) * d;
      for (int64_t i = 0; i < d; ++i) out[g * d + i] += score[j] / sum * pool.v_value[base + i];
    }
  }
  return out;
}

struct Case {
  WeightType type;
  int64_t heads, kv_heads, dim;
  int64_t context, length, noncausal, window;
  float softcap;
};

TEST(CpuAttentionTest, EveryRowEqualsTheReference) {
  std::mt19937 rng(7);
  const std::vector<Case> cases = {
      {WeightType::kF32, 14, 2, 64, 37, 1, 0, 0, 0.0f},    // a decode row, Qwen2.5-0.5B's heads
      {WeightType::kF32, 4, 4, 13, 0, 9, 0, 0, 0.0f},      // a prompt's first chunk, no context
      {WeightType::kF32, 8, 2, 24, 20, 6, 4, 0, 0.0f},     // a leading block seen both ways
      {WeightType::kBF16, 6, 3, 64, 50, 5, 0, 8, 0.0f},    // a window inside the context
      {WeightType::kF16, 8, 1, 72, 11, 7, 0, 3, 0.0f},     // a window within the run itself
      {WeightType::kF32, 4, 2, 256, 30, 3, 0, 0, 20.0f},   // Gemma 2's soft cap, a long head
      {WeightType::kBF16, 2, 1, 7, 5, 12, 12, 100, 0.5f},  // all both ways, a wide window
  };
  for (const Case& c : cases) {
    const int64_t keys = c.context + c.length, slots = 3 * keys + 5;
    const Pool pool(c.type, slots, c.kv_heads, c.dim, rng);
    // Scattered, out-of-order slots, as a block table gives them.
    std::vector<int64_t> order(slots);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const std::vector<int64_t> key_slots(order.begin(), order.begin() + keys);
    const AttentionRun run{key_slots.data(), c.context, c.length, c.noncausal};
    const AttentionSpec spec{c.heads, 1.0f / std::sqrt(static_cast<float>(c.dim)), c.softcap,
                             c.window};
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (Isa isa : IsasHere()) {
      for (int64_t row = 0; row < c.length; ++row) {
        std::vector<float> q(c.heads * c.dim);
        for (float& x : q) x = normal(rng);
        std::vector<float> out(c.heads * c.dim, NAN);
        for (int64_t g = 0; g < c.kv_heads; ++g) {
          AttendRow(isa, pool.view(), spec, run, row, g, q.data(), out.data());
          const std::vector<double> want = Reference(pool, spec, run, row, g, q);
          const int64_t group = c.heads / c.kv_heads;
          for (int64_t i = 0; i < group * c.dim; ++i) {
            // The output is a convex mix of V's values (|v| < ~5): fp32 rounding of the scores
            // and the sum over at most ~60 keys stays far below 1e-4.
            ASSERT_NEAR(out[g * group * c.dim + i], want[i], 1e-4)
                << IsaName(isa) << " " << WeightTypeName(c.type) << " heads " << c.heads << "/"
                << c.kv_heads << " dim " << c.dim << " context " << c.context << " row " << row
                << " window " << c.window << " element " << i;
          }
        }
      }
    }
  }
}

TEST(CpuAttentionTest, VisibleKeysArePrefixesTrimmedByTheWindow) {
  const AttentionRun run{nullptr, 10, 6, 3};
  for (int64_t window : {0, 1, 4, 12, 40}) {
    for (int64_t row = 0; row < run.length; ++row) {
      const std::vector<bool> mask = ReferenceMask(run, row, window);
      const KeyRange range = VisibleKeys(run, row, window);
      for (int64_t j = 0; j < static_cast<int64_t>(mask.size()); ++j) {
        EXPECT_EQ(mask[j], j >= range.begin && j < range.end)
            << "row " << row << " window " << window << " key " << j;
      }
    }
  }
}

}  // namespace
}  // namespace gpeserve::model::cpu
