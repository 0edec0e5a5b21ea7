// The block types' products (Q8_0, Q4_0, Q4_1 weights) on AVX2, as llama.cpp computes them: each
// activation row is rounded to int8 in blocks of 32 with an fp32 scale each (Q8_0's layout,
// d = max |x| / 127), and a block's dot product is an integer one (`vpmaddubsw` and `vpmaddwd`:
// 32 products a few instructions) scaled once by d_w d_x. Widening the weights to fp32 instead
// costs about four instructions per eight weights, which makes a 4-bit step compute-bound on
// AVX2 at a third of the memory's pace. The price is the activations' rounding: half a step of
// their block's scale, within 1/254 of the block's largest magnitude.
//
// Each activation row is rounded on its own and every output sums its blocks in one order, so a
// row's result never depends on how many rows share the call (batched equals alone). Included
// by the AVX2 and AVX-512 kernel files after cpu_matmul_tile.h (the same rules: internal
// linkage, no std:: templates); both are compiled with AVX2.
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/cpu_matmul.h"
#include "engine/kernels/cpu_matmul_isa.h"

namespace gpeserve::model::cpu::internal {
namespace {

// Activation rows rounded to int8 blocks: row i's block b is q[i * cols + 32 b ...] with scale
// d[i * blocks + b] and (for the 4-bit types' offsets) s = d times the block's sum of q.
struct Q8Rows {
  int8_t* q;
  float* d;
  float* s;
  int64_t cols, blocks;
};

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rounds one row of `cols` activations (a multiple of 32) into row i of `out`.
inline void QuantizeActivations(const float* x, int64_t i, const Q8Rows& out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < out.blocks; ++b) {
    const float* p = x + 32 * b;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(p + 8 * j);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float max_abs = _mm_cvtss_f32(m);
    const float d = max_abs / 127.0f;
    const __m256 inverse = _mm256_set1_ps(max_abs > 0 ? 127.0f / max_abs : 0.0f);
    __m256i q[4];
    for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inverse));
    // Packing works within 128-bit lanes: put the eight groups of four back in order.
    const __m256i q16 = _mm256_packs_epi32(q[0], q[1]), r16 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16, r16), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + i * out.cols + 32 * b), q8);
    out.d[i * out.blocks + b] = d;
    if (out.s != nullptr) {
      const __m256i sum16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q8);
      const __m256i sum32 = _mm256_madd_epi16(sum16, _mm256_set1_epi16(1));
      out.s[i * out.blocks + b] = d * HorizontalSum(_mm256_cvtepi32_ps(sum32));
    }
  }
}

// The m activation rows of x (row stride ldx, `cols` a multiple of 32) rounded into new buffers
// (the 4-bit types' block sums too); FreeRows frees them. (No std:: containers here; see
// cpu_matmul_tile.h.)
template <WeightType T>
inline Q8Rows RoundRows(const float* x, int64_t m, int64_t ldx, int64_t cols) {
  const int64_t blocks = cols / kBlockWeights;
  float* scales = new float[2 * m * blocks];
  const Q8Rows rows{new int8_t[m * cols], scales,
                    T == WeightType::kQ8_0 ? nullptr : scales + m* blocks, cols, blocks};
  for (int64_t i = 0; i < m; ++i) QuantizeActivations(x + i * ldx, i, rows);
  return rows;
}

inline void FreeRows(const Q8Rows& rows) {
  delete[] rows.q;
  delete[] rows.d;
}

// The 32 values q of a weight block as int8 (Q4_0 and Q4_1: the nibbles, unsigned; Q4_0's
// offset of 8 is applied through the activations' sums).
template <WeightType T>
inline __m256i BlockValues(const uint8_t* b) {
  if constexpr (T == WeightType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  }
  const __m128i bytes =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (T == WeightType::kQ4_1 ? 4 : 2)));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask),
                          _mm_and_si128(bytes, mask));
}

// Eight int32 partial sums of w . x over one block (w as BlockValues gives it, x signed int8).
template <WeightType T>
inline __m256i BlockDot(__m256i w, __m256i x) {
  __m256i products;
  if constexpr (T != WeightType::kQ8_0) {
    products = _mm256_maddubs_epi16(w, x);  // w unsigned (0..15): no saturation
  } else {
    // |w| times x with w's sign: |w| <= 128, |x| <= 127, two products fit an int16.
    products = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  }
  return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
}

// Weight rows [n, n + R) against the G activation rows from i, into y.
template <WeightType T, int R, int G>
inline void BlockTile(const WeightView& w, int64_t n, const Q8Rows& x, int64_t i, const float* bias,
                      float* y, int64_t ldy) {
  const int64_t row_bytes = x.blocks * BlockBytes(T);
  const auto* rows = static_cast<const uint8_t*>(w.data) + n * row_bytes;
  __m256 acc[R][G];
  // Q4_0 and Q4_1: the sum over blocks of the weights' offset (Q4_0: -8 d_w, Q4_1: m_w) times
  // d_x times the sum of the block's activations q_x.
  float minimum[R][G];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      acc[r][g] = _mm256_setzero_ps();
      minimum[r][g] = 0;
    }
  }
  for (int64_t b = 0; b < x.blocks; ++b) {
    __m256i wq[R];
    float dw[R], offset[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* block = rows + r * row_bytes + b * BlockBytes(T);
      __builtin_prefetch(block + R * row_bytes, 0, 3);  // the next tile's rows
      wq[r] = BlockValues<T>(block);
      dw[r] = HalfAt(block);
      offset[r] = T == WeightType::kQ4_1 ? HalfAt(block + 2) : -8.0f * dw[r];
    }
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      const __m256i xq =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + (i + g) * x.cols + 32 * b));
      const float dx = x.d[(i + g) * x.blocks + b];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256 dot = _mm256_cvtepi32_ps(BlockDot<T>(wq[r], xq));
        acc[r][g] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), dot, acc[r][g]);
        if constexpr (T != WeightType::kQ8_0) {
          // Fused explicitly: contraction must not depend on the tile's shape.
          minimum[r][g] = __builtin_fmaf(offset[r], x.s[(i + g) * x.blocks + b], minimum[r][g]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < G; ++g) {
      float sum = HorizontalSum(acc[r][g]) + minimum[r][g];
      if (bias != nullptr) sum += bias[n + r];
      y[(i + g) * ldy + n + r] = sum;
    }
  }
}

// Weight rows [n, n + R) against all m activation rows, four at a time.
template <WeightType T, int R>
inline void BlockRows(const WeightView& w, int64_t n, const Q8Rows& x, int64_t m, const float* bias,
                      float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) BlockTile<T, R, 4>(w, n, x, i, bias, y, ldy);
  switch (m - i) {
    case 3:
      return BlockTile<T, R, 3>(w, n, x, i, bias, y, ldy);
    case 2:
      return BlockTile<T, R, 2>(w, n, x, i, bias, y, ldy);
    case 1:
      return BlockTile<T, R, 1>(w, n, x, i, bias, y, ldy);
  }
}

// MatmulRows for a block type: rounds the m activation rows, then tiles of 4 weight rows for
// one activation row (decode), 2 x 4 otherwise.
template <WeightType T>
void MatmulBlocks(const WeightView& w, const float* x, int64_t m, int64_t ldx, const float* bias,
                  float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  const Q8Rows rows = RoundRows<T>(x, m, ldx, w.cols);
  constexpr int R = 4;
  int64_t n = n_begin;
  if (m == 1) {
    for (; n + R <= n_end; n += R) BlockTile<T, R, 1>(w, n, rows, 0, bias, y, ldy);
  } else {
    for (; n + 2 <= n_end; n += 2) BlockRows<T, 2>(w, n, rows, m, bias, y, ldy);
  }
  for (; n < n_end; ++n) BlockRows<T, 1>(w, n, rows, m, bias, y, ldy);
  FreeRows(rows);
}

}  // namespace
}  // namespace gpeserve::model::cpu::internal
