// The CPU matrix kernels against a double-precision reference, on every instruction set this
// CPU runs (so an AVX-512 machine tests its AVX2 and scalar paths too), every weight type, and
// odd shapes: rows and columns that are not multiples of any vector width or tile (the block
// types: columns a multiple of their 32), one and several activation rows, sub-ranges of output
// rows. The block types' values come from ggml_quants' own decoder, and their vector kernels'
// activations are rounded as they round them (RoundedActivations).
#include "engine/kernels/cpu_matmul.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/ggml_quants.h"
#include "tests/engine/kernels/isas_here.h"

namespace gpeserve::model::cpu {
namespace {

using testing::IsasHere;

// A random matrix in one weight type, with the exact fp32 value of every element.
struct Matrix {
  WeightType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  std::vector<double> value;  // rows x cols, what the kernel must multiply by

  WeightView view() const {
    return {bytes.data(), type == WeightType::kInt8 ? scale.data() : nullptr, type, rows, cols};
  }
};

// ggml's type number of a block type (ggml_quants.h).
uint32_t GgmlTypeOf(WeightType type) {
  return type == WeightType::kQ8_0 ? 8 : type == WeightType::kQ4_0 ? 2 : 3;
}

// Columns a test of `cols` uses for `type`: the block types round up to whole blocks.
int64_t ColsFor(WeightType type, int64_t cols) {
  return IsBlockType(type) ? (cols + kBlockWeights - 1) / kBlockWeights * kBlockWeights : cols;
}

Matrix RandomMatrix(WeightType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Matrix m{type, rows, cols, {}, {}, {}};
  m.bytes.resize(static_cast<size_t>(WeightBytes(type, rows * cols)));
  m.value.resize(static_cast<size_t>(rows * cols));
  std::vector<float> f32(m.value.size());
  for (float& v : f32) v = normal(rng);
  switch (type) {
    case WeightType::kF32:
      std::memcpy(m.bytes.data(), f32.data(), f32.size() * 4);
      for (size_t i = 0; i < f32.size(); ++i) m.value[i] = f32[i];
      break;
    case WeightType::kBF16:
    case WeightType::kF16: {
      auto* h = reinterpret_cast<uint16_t*>(m.bytes.data());
      for (size_t i = 0; i < f32.size(); ++i) {
        h[i] = type == WeightType::kBF16 ? FloatToBf16(f32[i]) : FloatToHalf(f32[i]);
        m.value[i] = type == WeightType::kBF16 ? Bf16ToFloat(h[i]) : HalfToFloat(h[i]);
      }
      break;
    }
    case WeightType::kInt8: {
      m.scale.resize(static_cast<size_t>(rows));
      auto* q = reinterpret_cast<int8_t*>(m.bytes.data());
      QuantizeRowsInt8(f32.data(), cols, 0, rows, q, m.scale.data());
      for (size_t i = 0; i < f32.size(); ++i) {
        m.value[i] = static_cast<double>(q[i]) * m.scale[i / static_cast<size_t>(cols)];
      }
      break;
    }
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1: {
      QuantizeRowsBlocks(type, f32.data(), cols, 0, rows, m.bytes.data());
      std::vector<float> decoded(f32.size());
      DequantizeGgml(GgmlTypeOf(type), m.bytes.data(), rows * cols, decoded.data());
      for (size_t i = 0; i < f32.size(); ++i) m.value[i] = decoded[i];
      break;
    }
  }
  return m;
}

// The block types' vector kernels round each activation row to int8 blocks of 32
// (cpu_matmul_blocks.h); the scalar ones multiply the fp32 activations.
bool RoundsActivations(Isa isa, WeightType type) {
  return IsBlockType(type) && isa != Isa::kScalar;
}

// x rounded as those kernels round it: per block of 32, d = max |x| / 127 and q = x * (127 /
// max |x|) rounded to nearest even, in fp32; the values q d.
std::vector<double> RoundedActivations(const std::vector<float>& x, int64_t m, int64_t ldx,
                                       int64_t cols) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < cols; b += kBlockWeights) {
      const float* p = x.data() + i * ldx + b;
      float max_abs = 0;
      for (int j = 0; j < kBlockWeights; ++j) max_abs = std::max(max_abs, std::fabs(p[j]));
      const float d = max_abs / 127.0f;
      const float inverse = max_abs > 0 ? 127.0f / max_abs : 0.0f;
      for (int j = 0; j < kBlockWeights; ++j) {
        out[static_cast<size_t>(i * ldx + b + j)] =
            static_cast<double>(std::nearbyint(p[j] * inverse)) * d;
      }
    }
  }
  return out;
}

constexpr WeightType kTypes[] = {WeightType::kF32,  WeightType::kBF16, WeightType::kF16,
                                 WeightType::kInt8, WeightType::kQ8_0, WeightType::kQ4_0,
                                 WeightType::kQ4_1};

// An output's place, for failure messages: the matrix, the call's rows and range, y[i, n].
std::string Where(int64_t rows, int64_t cols, int64_t m, int64_t begin, int64_t end, int64_t i,
                  int64_t n) {
  return std::to_string(rows) + "x" + std::to_string(cols) + " m=" + std::to_string(m) + " rows [" +
         std::to_string(begin) + ", " + std::to_string(end) + ") at y[" + std::to_string(i) + ", " +
         std::to_string(n) + "]";
}

// Output n of W times the activation row x (w.cols values) plus bias, in double precision, and
// how far an fp32 sum of its terms may be from it: |error| <= cols * 2^-24 * sum |terms| (with
// room for the scale and bias roundings).
struct Expected {
  double value, bound;
};
Expected ExpectedOutput(const Matrix& w, int64_t n, const double* x, double bias) {
  double value = bias, magnitude = 0;
  for (int64_t k = 0; k < w.cols; ++k) {
    const double term = w.value[static_cast<size_t>(n * w.cols + k)] * x[k];
    value += term;
    magnitude += std::fabs(term);
  }
  return {value, (w.cols + 4) * std::ldexp(1.0, -24) * (magnitude + 1.0)};
}

TEST(CpuMatmulTest, EqualsDoubleReferenceOnOddShapes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t row_counts[] = {1, 3, 8, 13, 37};
  const int64_t col_counts[] = {1, 7, 8, 9, 16, 17, 31, 33, 100, 4103};
  // 13 rows x 4103 columns pass the L2 budget: the columns are split into chunks.
  const int64_t activation_rows[] = {1, 2, 3, 4, 5, 8, 11, 13};
  int checked = 0;
  for (Isa isa : IsasHere()) {
    for (WeightType type : kTypes) {
      for (int64_t rows : row_counts) {
        for (int64_t odd_cols : col_counts) {
          const int64_t cols = ColsFor(type, odd_cols);
          const Matrix w = RandomMatrix(type, rows, cols, rng);
          std::vector<float> bias(static_cast<size_t>(rows));
          for (float& b : bias) b = normal(rng);
          for (int64_t m : activation_rows) {
            const int64_t ldx = cols + 3, ldy = rows + 2;  // strides wider than the rows
            std::vector<float> x(static_cast<size_t>(m * ldx));
            for (float& v : x) v = normal(rng);
            // What the kernel multiplies by: x, or the block types' rounded activations.
            const std::vector<double> effective = RoundsActivations(isa, type)
                                                      ? RoundedActivations(x, m, ldx, cols)
                                                      : std::vector<double>(x.begin(), x.end());
            // A sub-range of output rows, and the whole matrix.
            for (auto [begin, end] : {std::pair<int64_t, int64_t>{rows / 3, rows - rows / 4},
                                      std::pair<int64_t, int64_t>{0, rows}}) {
              const bool with_bias = (m + cols) % 2 == 0;
              std::vector<float> y(static_cast<size_t>(m * ldy), -12345.0f);
              MatmulRows(isa, w.view(), x.data(), m, ldx, with_bias ? bias.data() : nullptr,
                         y.data(), ldy, begin, end);
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t n = 0; n < ldy; ++n) {
                  const float got = y[static_cast<size_t>(i * ldy + n)];
                  const std::string where = std::string(IsaName(isa)) + " " + WeightTypeName(type) +
                                            " " + Where(rows, cols, m, begin, end, i, n);
                  if (n < begin || n >= end) {
                    ASSERT_EQ(got, -12345.0f) << where << ": written outside the range";
                    continue;
                  }
                  const Expected want =
                      ExpectedOutput(w, n, effective.data() + i * ldx,
                                     with_bias ? bias[static_cast<size_t>(n)] : 0.0);
                  ASSERT_NEAR(got, want.value, want.bound) << where;
                  ++checked;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

// Batched equals alone, bit for bit: each activation row's outputs are the same whether the
// call has that row alone or it among others (every row count, blocks of weight rows and chunks
// of columns included), so a session's tokens never depend on who shares its step.
TEST(CpuMatmulTest, EachRowIsComputedAsIfAlone) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int checked = 0;
  for (Isa isa : IsasHere()) {
    for (WeightType type : kTypes) {
      for (auto [rows, odd_cols] :
           {std::pair<int64_t, int64_t>{37, 33}, {101, 200}, {250, 896}, {29, 4103}, {7, 9000}}) {
        const int64_t cols = ColsFor(type, odd_cols);
        const Matrix w = RandomMatrix(type, rows, cols, rng);
        std::vector<float> bias(static_cast<size_t>(rows));
        for (float& b : bias) b = normal(rng);
        for (int64_t m : {2, 3, 5, 8, 13, 32, 64}) {
          const int64_t ldx = cols + 1, ldy = rows;
          std::vector<float> x(static_cast<size_t>(m * ldx));
          for (float& v : x) v = normal(rng);
          std::vector<float> together(static_cast<size_t>(m * ldy));
          MatmulRows(isa, w.view(), x.data(), m, ldx, bias.data(), together.data(), ldy, 0, rows);
          for (int64_t i = 0; i < m; ++i) {
            std::vector<float> alone(static_cast<size_t>(rows));
            MatmulRows(isa, w.view(), x.data() + i * ldx, 1, ldx, bias.data(), alone.data(), rows,
                       0, rows);
            for (int64_t n = 0; n < rows; ++n) {
              ASSERT_EQ(together[static_cast<size_t>(i * ldy + n)], alone[static_cast<size_t>(n)])
                  << IsaName(isa) << " " << WeightTypeName(type) << " " << rows << "x" << cols
                  << " m=" << m << " row " << i << " output " << n;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100000);
}

TEST(CpuMatmulTest, DequantizeRowsIsExact) {
  std::mt19937 rng(3);
  for (Isa isa : IsasHere()) {
    for (WeightType type : kTypes) {
      for (int64_t odd_cols : {1, 15, 16, 17, 100}) {
        const int64_t cols = ColsFor(type, odd_cols);
        const Matrix w = RandomMatrix(type, 9, cols, rng);
        std::vector<float> out(static_cast<size_t>(5 * cols), NAN);
        DequantizeRows(isa, w.view(), 2, 7, out.data());
        for (int64_t n = 2; n < 7; ++n) {
          for (int64_t k = 0; k < cols; ++k) {
            // bf16/fp16 to fp32 is exact; int8 is one fp32 product; the block types are
            // ggml_quants' decode, exactly.
            ASSERT_EQ(out[static_cast<size_t>((n - 2) * cols + k)],
                      static_cast<float>(w.value[static_cast<size_t>(n * cols + k)]))
                << IsaName(isa) << " " << WeightTypeName(type) << " cols " << cols << " [" << n
                << ", " << k << "]";
          }
        }
      }
    }
  }
}

TEST(CpuMatmulTest, Int8QuantizationIsWithinHalfAStepAndUsesTheFullRange) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t rows = 6, cols = 301;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = normal(rng);
  for (int64_t k = 0; k < cols; ++k) w[static_cast<size_t>(5 * cols + k)] = 0;  // a zero row
  std::vector<int8_t> q(w.size());
  std::vector<float> scale(static_cast<size_t>(rows));
  QuantizeRowsInt8(w.data(), cols, 0, rows, q.data(), scale.data());
  for (int64_t n = 0; n < rows; ++n) {
    int max_q = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = static_cast<size_t>(n * cols + k);
      EXPECT_LE(std::fabs(q[i] * scale[static_cast<size_t>(n)] - w[i]),
                0.5f * scale[static_cast<size_t>(n)] * (1 + 1e-5f));
      max_q = std::max(max_q, std::abs(static_cast<int>(q[i])));
    }
    EXPECT_EQ(max_q, n == 5 ? 0 : 127) << "row " << n;
  }
  EXPECT_EQ(scale[5], 1.0f);
}

// Each block of 32 is rounded to within half a step of its own scale (after the scale's and
// minimum's fp16 rounding; Q4_0 one step at one end), its weight of largest magnitude is kept,
// and a block of zeros stays zero.
TEST(CpuMatmulTest, BlockQuantizationIsWithinHalfAStepOfEachBlock) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t rows = 5, cols = 128;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = normal(rng) * (i / 32 % 3 == 1 ? 40.0f : 1.0f);
  for (int64_t k = 32; k < 64; ++k) w[static_cast<size_t>(2 * cols + k)] = 0;  // a zero block
  for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1}) {
    std::vector<uint8_t> bytes(static_cast<size_t>(WeightBytes(type, rows * cols)));
    QuantizeRowsBlocks(type, w.data(), cols, 0, rows, bytes.data());
    std::vector<float> decoded(w.size());
    DequantizeGgml(GgmlTypeOf(type), bytes.data(), rows * cols, decoded.data());
    for (size_t b = 0; b < w.size() / 32; ++b) {
      const float* x = w.data() + 32 * b;
      const float* y = decoded.data() + 32 * b;
      float lo = x[0], hi = x[0], amax = 0;
      for (int j = 0; j < 32; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
        amax = std::max(amax, std::fabs(x[j]));
      }
      const float step = type == WeightType::kQ8_0   ? amax / 127
                         : type == WeightType::kQ4_0 ? amax / 8
                                                     : (hi - lo) / 15;
      // Half a step (Q4_0: a whole one at the end opposite the extreme, whose level -8 has no
      // mirror +8), and the fp16 roundings (2^-11 relative) of the scale times up to 16 levels
      // and of the minimum.
      const float rounding = type == WeightType::kQ4_0 ? step : 0.5f * step;
      const float bound = rounding + std::ldexp(1.0f, -11) * (16 * step + std::fabs(lo)) + 1e-7f;
      float top = 0;
      for (int j = 0; j < 32; ++j) {
        ASSERT_LE(std::fabs(y[j] - x[j]), bound) << WeightTypeName(type) << " block " << b;
        top = std::max(top, std::fabs(y[j]));
      }
      if (amax == 0) {
        EXPECT_EQ(top, 0.0f) << WeightTypeName(type) << " block " << b;
      } else if (type != WeightType::kQ4_1) {
        // The weight of largest magnitude lands on the extreme level.
        EXPECT_NEAR(top, amax, std::ldexp(1.0f, -10) * amax) << WeightTypeName(type);
      }
    }
  }
}

__attribute__((target("f16c"))) uint16_t HardwareHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

TEST(CpuMatmulTest, HalfConversionsMatchTheHardwareAndRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ((h >> 10) & 0x1F, 0x1Fu);
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << h;
  }
  if (DetectedIsa() == Isa::kScalar) GTEST_SKIP() << "no F16C on this CPU to compare with";
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = bits(rng);
    // Mostly values in half's range (exponent near the middle), some anywhere.
    if (i % 4 != 0) b = (b & 0x807FFFFF) | ((100 + b % 56) << 23);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), HardwareHalf(f)) << "float bits 0x" << std::hex << b;
  }
}

TEST(CpuMatmulTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  float f;
  uint32_t b = 0x3F808000;  // exactly halfway between 0x3F80 and 0x3F81: to even
  std::memcpy(&f, &b, 4);
  EXPECT_EQ(FloatToBf16(f), 0x3F80);
  b = 0x3F818000;  // halfway between 0x3F81 and 0x3F82: to even
  std::memcpy(&f, &b, 4);
  EXPECT_EQ(FloatToBf16(f), 0x3F82);
  b = 0x3F808001;  // just above halfway: up
  std::memcpy(&f, &b, 4);
  EXPECT_EQ(FloatToBf16(f), 0x3F81);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = Bf16ToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(v)) {
      ASSERT_EQ(FloatToBf16(v), h);
    }
  }
}

// bf16 activations (MatmulRowsBf16Dot, AVX512-BF16): against a double-precision reference on
// the bf16 values, odd shapes (column tails past the last 32, sub-ranges, wide strides, nothing
// written outside), and each row as if alone, bit for bit.
TEST(CpuMatmulTest, Bf16DotEqualsTheReferenceAndEachRowIsAlone) {
  if (!HasBf16Dot()) GTEST_SKIP() << "no AVX512-BF16 here (or GPESERVE_CPU_ISA lowers it)";
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int checked = 0;
  for (int64_t rows : {1, 5, 8, 13, 37}) {
    for (int64_t cols : {1, 31, 32, 33, 96, 100, 896, 4103}) {
      const Matrix w = RandomMatrix(WeightType::kBF16, rows, cols, rng);
      std::vector<float> bias(static_cast<size_t>(rows));
      for (float& b : bias) b = normal(rng);
      for (int64_t m : {1, 2, 3, 4, 5, 8, 11, 13}) {
        const int64_t ldx = cols + 5, ldy = rows + 2;
        std::vector<uint16_t> x(static_cast<size_t>(m * ldx));
        for (uint16_t& v : x) v = FloatToBf16(normal(rng));
        std::vector<double> x_value(x.size());
        for (size_t k = 0; k < x.size(); ++k) x_value[k] = Bf16ToFloat(x[k]);
        for (auto [begin, end] : {std::pair<int64_t, int64_t>{rows / 3, rows - rows / 4},
                                  std::pair<int64_t, int64_t>{0, rows}}) {
          const bool with_bias = (m + cols) % 2 == 0;
          const float* b = with_bias ? bias.data() : nullptr;
          std::vector<float> y(static_cast<size_t>(m * ldy), -12345.0f);
          MatmulRowsBf16Dot(w.view(), x.data(), m, ldx, b, y.data(), ldy, begin, end);
          for (int64_t i = 0; i < m; ++i) {
            std::vector<float> alone(static_cast<size_t>(rows), -12345.0f);
            MatmulRowsBf16Dot(w.view(), x.data() + i * ldx, 1, ldx, b, alone.data(), rows, begin,
                              end);
            for (int64_t n = 0; n < ldy; ++n) {
              const float got = y[static_cast<size_t>(i * ldy + n)];
              const std::string where = Where(rows, cols, m, begin, end, i, n);
              if (n < begin || n >= end) {
                ASSERT_EQ(got, -12345.0f) << where << ": written outside the range";
                continue;
              }
              const Expected want = ExpectedOutput(w, n, x_value.data() + i * ldx,
                                                   with_bias ? bias[static_cast<size_t>(n)] : 0.0);
              ASSERT_NEAR(got, want.value, want.bound) << where;
              ASSERT_EQ(got, alone[static_cast<size_t>(n)]) << where << ": batched != alone";
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

// RoundToBf16 (vector code where HasBf16Dot()) rounds as FloatToBf16: ties to even, tails.
TEST(CpuMatmulTest, RoundToBf16EqualsTheScalarRounding) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  std::vector<float> x(100003);
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t b = bits(rng);
    if (i % 3 == 0) b = (b & 0xFFFF0000u) | 0x8000u;         // exactly halfway
    if ((b & 0x7F800000u) == 0x7F800000u) b &= 0xBFFFFFFFu;  // no NaN or infinity
    std::memcpy(&x[i], &b, 4);
  }
  std::vector<uint16_t> out(x.size());
  RoundToBf16(x.data(), static_cast<int64_t>(x.size()), out.data());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fpclassify(x[i]) == FP_SUBNORMAL) continue;  // the vector rounding may flush them
    ASSERT_EQ(out[i], FloatToBf16(x[i])) << "element " << i << " = " << x[i];
  }
}

TEST(CpuMatmulTest, IsaNamesParse) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    Isa parsed;
    ASSERT_TRUE(ParseIsa(IsaName(isa), &parsed));
    EXPECT_EQ(parsed, isa);
  }
  Isa parsed;
  EXPECT_FALSE(ParseIsa("sse2", &parsed));
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(DetectedIsa()));
}

}  // namespace
}  // namespace gpeserve::model::cpu
