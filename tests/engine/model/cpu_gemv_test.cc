#include "engine/model/cpu_gemv.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::model {
namespace {

uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float FromBf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(Bf16GemvTest, MatchesDoublePrecisionReference) {
  if (!Bf16GemvSupported()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t cols : {32, 64, 96, 896}) {
    for (int64_t rows : {1, 3, 4, 5, 13, 64}) {
      std::vector<uint16_t> w(rows * cols), x(cols), bias(rows), y(rows, 0xFFFF);
      for (auto& v : w) v = ToBf16(normal(rng));
      for (auto& v : x) v = ToBf16(normal(rng));
      for (auto& v : bias) v = ToBf16(normal(rng));
      for (const bool with_bias : {false, true}) {
        // Rows split in two calls, as two threads would.
        Bf16Gemv(w.data(), x.data(), with_bias ? bias.data() : nullptr, y.data(), cols, 0,
                 rows / 2);
        Bf16Gemv(w.data(), x.data(), with_bias ? bias.data() : nullptr, y.data(), cols, rows / 2,
                 rows);
        for (int64_t r = 0; r < rows; ++r) {
          double ref = with_bias ? FromBf16(bias[r]) : 0.0;
          double magnitude = std::abs(ref);
          for (int64_t c = 0; c < cols; ++c) {
            ref += double(FromBf16(w[r * cols + c])) * FromBf16(x[c]);
            magnitude += std::abs(double(FromBf16(w[r * cols + c])) * FromBf16(x[c]));
          }
          // One bf16 rounding of the result plus fp32 summation error.
          const double tolerance = std::abs(ref) * (1.0 / 256) + magnitude * 1e-6 + 1e-30;
          EXPECT_NEAR(FromBf16(y[r]), ref, tolerance)
              << "rows " << rows << " cols " << cols << " row " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpeserve::model
