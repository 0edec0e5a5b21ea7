// The cpu_matmul kernels for AVX2 + FMA + F16C (8 fp32 lanes). Compiled with those target
// flags (CMakeLists.txt); called only when the CPU has them (cpu_matmul.cc).
#include <immintrin.h>

#include "engine/kernels/cpu_matmul_blocks.h"
#include "engine/kernels/cpu_matmul_tile.h"

namespace gpeserve::model::cpu::internal {
namespace {

struct Avx2 {
  using F = __m256;
  static constexpr int kLanes = 8;
  // 16 registers: one activation row keeps 8 accumulators; more rows 3 x 4 (+ 1 weight; the
  // activations come from L1 as FMA operands). Measured best of 4x2, 2x4, 4x3 and 3x4 on Zen 3.
  static constexpr int kRowsOne = 8;
  static constexpr int kRows = 3;
  static constexpr int kGroup = 4;

  static F Zero() { return _mm256_setzero_ps(); }
  static F Broadcast(float v) { return _mm256_set1_ps(v); }
  static F LoadX(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Fma(F a, F b, F acc) { return _mm256_fmadd_ps(a, b, acc); }
  static float Sum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  template <WeightType T>
  static F LoadW(const void* data, int64_t index) {
    if constexpr (T == WeightType::kF32) {
      return _mm256_loadu_ps(static_cast<const float*>(data) + index);
    } else if constexpr (T == WeightType::kBF16) {
      const __m128i h = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(data) + index));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else if constexpr (T == WeightType::kF16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(data) + index)));
    } else {  // int8
      const __m128i q = _mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(data) + index));
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    }
  }
  template <WeightType T>
  static void LoadBlock(const void* data, int64_t index, F* out) {
    const auto* b = static_cast<const uint8_t*>(data) +
                    (static_cast<uint64_t>(index) / kBlockWeights) * BlockBytes(T);
    const __m256 d = Half(b);
    if constexpr (T == WeightType::kQ8_0) {
      for (int j = 0; j < 4; ++j) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * j));
        out[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
      }
      return;
    }
    const __m128i bytes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (T == WeightType::kQ4_1 ? 4 : 2)));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(bytes, mask);
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    // Q4_0: d q - 8 d = d (q - 8) exactly (both products are exact); Q4_1: d q + m (d q is
    // exact: one rounding, as ggml decodes it).
    const __m256 offset =
        T == WeightType::kQ4_0 ? _mm256_mul_ps(d, _mm256_set1_ps(-8.0f)) : Half(b + 2);
    const auto widen = [&](__m128i q) {
      return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), d, offset);
    };
    out[0] = widen(low);
    out[1] = widen(_mm_srli_si128(low, 8));
    out[2] = widen(high);
    out[3] = widen(_mm_srli_si128(high, 8));
  }
  // The fp16 at p in every lane.
  static F Half(const uint8_t* p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h)));
  }
};

}  // namespace
}  // namespace gpeserve::model::cpu::internal

GPESERVE_DEFINE_CPU_MATMUL(Avx2, Avx2)
