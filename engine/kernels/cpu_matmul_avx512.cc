// The cpu_matmul kernels for AVX-512 F/BW/VL (16 fp32 lanes; fp16 through the F16C-equivalent
// AVX-512F conversion). Compiled with those target flags (CMakeLists.txt); called only when the
// CPU has them (cpu_matmul.cc). Weights become fp32 in registers and accumulate with fp32 FMA,
// as on AVX2, so every instruction set computes the same sums up to summation order.
#include <immintrin.h>

#include "engine/kernels/cpu_matmul_blocks.h"
#include "engine/kernels/cpu_matmul_tile.h"

// GCC 12 reports its own _mm512_reduce_add_ps as possibly uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace gpeserve::model::cpu::internal {
namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int kLanes = 16;
  // 32 registers: one activation row keeps 8 accumulators; more rows 4 x 4 (+ 4 activations).
  static constexpr int kRowsOne = 8;
  static constexpr int kRows = 4;
  static constexpr int kGroup = 4;

  static F Zero() { return _mm512_setzero_ps(); }
  static F Broadcast(float v) { return _mm512_set1_ps(v); }
  static F LoadX(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Fma(F a, F b, F acc) { return _mm512_fmadd_ps(a, b, acc); }
  static float Sum(F v) { return _mm512_reduce_add_ps(v); }
  template <WeightType T>
  static F LoadW(const void* data, int64_t index) {
    if constexpr (T == WeightType::kF32) {
      return _mm512_loadu_ps(static_cast<const float*>(data) + index);
    } else if constexpr (T == WeightType::kBF16) {
      const __m256i h = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(data) + index));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else if constexpr (T == WeightType::kF16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(data) + index)));
    } else {  // int8
      const __m128i q = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(data) + index));
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
    }
  }
  template <WeightType T>
  static void LoadBlock(const void* data, int64_t index, F* out) {
    const auto* b = static_cast<const uint8_t*>(data) +
                    (static_cast<uint64_t>(index) / kBlockWeights) * BlockBytes(T);
    const __m512 d = Half(b);
    if constexpr (T == WeightType::kQ8_0) {
      for (int j = 0; j < 2; ++j) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * j));
        out[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
      }
      return;
    }
    const __m128i bytes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (T == WeightType::kQ4_1 ? 4 : 2)));
    const __m128i mask = _mm_set1_epi8(0x0F);
    // Q4_0: d q - 8 d = d (q - 8) exactly (both products are exact); Q4_1: d q + m (d q is
    // exact: one rounding, as ggml decodes it).
    const __m512 offset =
        T == WeightType::kQ4_0 ? _mm512_mul_ps(d, _mm512_set1_ps(-8.0f)) : Half(b + 2);
    const auto widen = [&](__m128i q) {
      return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q)), d, offset);
    };
    out[0] = widen(_mm_and_si128(bytes, mask));
    out[1] = widen(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
  }
  // The fp16 at p in every lane.
  static F Half(const uint8_t* p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h)));
  }
};

}  // namespace
}  // namespace gpeserve::model::cpu::internal

GPESERVE_DEFINE_CPU_MATMUL(Avx512, Avx512)
