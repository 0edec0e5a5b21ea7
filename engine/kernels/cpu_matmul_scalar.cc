// The cpu_matmul kernels in plain C++: the path for CPUs without AVX2, and the one forced by
// GPESERVE_CPU_ISA=scalar. One weight row at a time against every activation row (the row
// stays in cache), fp32 accumulation.
#include <cstdint>

#include "engine/kernels/cpu_matmul.h"
#include "engine/kernels/cpu_matmul_isa.h"

namespace gpeserve::model::cpu::internal {
namespace {

float WeightAt(const WeightView& w, int64_t index) {
  switch (w.type) {
    case WeightType::kF32:
      return static_cast<const float*>(w.data)[index];
    case WeightType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(w.data)[index]);
    case WeightType::kF16:
      return HalfToFloat(static_cast<const uint16_t*>(w.data)[index]);
    case WeightType::kInt8:
      return static_cast<float>(static_cast<const int8_t*>(w.data)[index]);
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
      return BlockWeight(w.type, w.data, index);
  }
  return 0;
}

}  // namespace

void MatmulRowsScalar(const WeightView& w, const float* x, int64_t m, int64_t ldx,
                      const float* bias, float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  // Converted once per weight row, then used for all m activation rows.
  float row[4096];
  for (int64_t n = n_begin; n < n_end; ++n) {
    const float scale = w.type == WeightType::kInt8 ? w.scale[n] : 1.0f;
    for (int64_t i = 0; i < m; ++i) y[i * ldy + n] = 0;
    for (int64_t k0 = 0; k0 < w.cols; k0 += 4096) {
      const int64_t k1 = k0 + 4096 < w.cols ? k0 + 4096 : w.cols;
      for (int64_t k = k0; k < k1; ++k) row[k - k0] = WeightAt(w, n * w.cols + k);
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * ldx;
        float sum = 0;
        for (int64_t k = k0; k < k1; ++k) sum += row[k - k0] * xi[k];
        y[i * ldy + n] += sum;
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      y[i * ldy + n] = y[i * ldy + n] * scale + (bias != nullptr ? bias[n] : 0.0f);
    }
  }
}

void DequantizeRowsScalar(const WeightView& w, int64_t n_begin, int64_t n_end, float* out) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    const float scale = w.type == WeightType::kInt8 ? w.scale[n] : 1.0f;
    for (int64_t k = 0; k < w.cols; ++k) {
      out[(n - n_begin) * w.cols + k] = WeightAt(w, n * w.cols + k) * scale;
    }
  }
}

}  // namespace gpeserve::model::cpu::internal
