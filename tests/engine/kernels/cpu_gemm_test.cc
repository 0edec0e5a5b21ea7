// oneDNN's sgemm as the kernels room calls it, against a double-precision reference on odd
// shapes with leading dimensions wider than the rows; the BLAS report's warning rule.
#include "engine/kernels/cpu_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/kernels/cpu_matmul.h"

namespace gpeserve::model::cpu {
namespace {

TEST(CpuGemmTest, SgemmEqualsDoubleReferenceOnOddShapes) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int checked = 0;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {65, 7, 33},
                         {130, 257, 96},
                         {3, 1000, 17},
                         {200, 64, 1025}}) {
    const int64_t ldx = k + 3, ldw = k + 1, ldy = n + 5;
    std::vector<float> x(static_cast<size_t>(m * ldx)), w(static_cast<size_t>(n * ldw));
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = normal(rng);
    std::vector<float> y(static_cast<size_t>(m * ldy), -12345.0f);
    ASSERT_EQ(Sgemm(m, n, k, x.data(), ldx, w.data(), ldw, y.data(), ldy), "");
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < ldy; ++j) {
        const float got = y[static_cast<size_t>(i * ldy + j)];
        const std::string where = std::to_string(m) + "x" + std::to_string(n) + "x" +
                                  std::to_string(k) + " at y[" + std::to_string(i) + ", " +
                                  std::to_string(j) + "]";
        if (j >= n) {
          ASSERT_EQ(got, -12345.0f) << where << ": written outside the output";
          continue;
        }
        double ref = 0, magnitude = 0;
        for (int64_t l = 0; l < k; ++l) {
          const double term = static_cast<double>(x[static_cast<size_t>(i * ldx + l)]) *
                              w[static_cast<size_t>(j * ldw + l)];
          ref += term;
          magnitude += std::fabs(term);
        }
        ASSERT_NEAR(got, ref, (k + 4) * std::ldexp(1.0, -24) * (magnitude + 1.0)) << where;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 30000);
}

TEST(CpuGemmTest, TheReportWarnsOfACoreOlderThanTheCpu) {
  EXPECT_NE(BlasCoreReport("").find("not OpenBLAS"), std::string::npos);
  const std::string avx512 = BlasCoreReport("SkylakeX");
  EXPECT_NE(avx512.find("core SkylakeX"), std::string::npos);
  EXPECT_EQ(avx512.find("warning"), std::string::npos) << avx512;
  if (DetectedIsa() == Isa::kScalar) GTEST_SKIP() << "no core is older than this CPU";
  const std::string prescott = BlasCoreReport("Prescott");
  EXPECT_NE(prescott.find("warning: older than this CPU"), std::string::npos) << prescott;
  EXPECT_NE(prescott.find("OPENBLAS_CORETYPE="), std::string::npos) << prescott;
  // Zen's kernels are AVX2: older than an AVX-512 CPU only (first seen on a Zen 4).
  const std::string zen = BlasCoreReport("Zen");
  EXPECT_EQ(zen.find("warning") != std::string::npos, DetectedIsa() == Isa::kAvx512) << zen;
  // What this process's OpenBLAS detected, for the log of this test.
  std::cout << BlasCoreReport(OpenBlasCore()) << "\n";
}

}  // namespace
}  // namespace gpeserve::model::cpu
