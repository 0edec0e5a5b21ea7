// MatmulRowsBf16Dot (cpu_matmul.h): bf16 activations times bf16 weights with AVX512-BF16's dot
// product. vdpbf16ps multiplies 32 pairs of bf16 values exactly and adds each pair's two
// products into one of 16 fp32 lanes, so a weight is neither widened nor shifted: twice the
// multiply-adds of an fp32 FMA per instruction. Compiled with AVX-512 F/BW/VL + BF16 target
// flags (CMakeLists.txt); called only when HasBf16Dot().
//
// A tile keeps R weight rows x G activation rows of accumulators (4 x 4 of the 32 registers, 8 x
// 1 for a single row) and walks the columns 32 at a time; every output is one lane-wise sum over
// all columns in order, then the lanes' sum: the same order whatever the number of rows.
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/cpu_matmul.h"

// GCC 12 reports its own _mm512_reduce_add_ps as (possibly) uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace gpeserve::model::cpu::internal {
namespace {

constexpr int64_t kPair = 32;  // bf16 values per vdpbf16ps operand

inline __m512bh Load(const uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(reinterpret_cast<const void*>(p)));
}

template <int R, int G>
inline void Tile(const uint16_t* w, int64_t cols, int64_t n, const uint16_t* x, int64_t ldx,
                 const float* bias, float* y, int64_t ldy, int64_t i) {
  const uint16_t* rows = w + n * cols;
  const int64_t vector_end = cols / kPair * kPair;
  // The next tile's rows, one contiguous stream read at this tile's pace (cpu_matmul_tile.h).
  const char* next = reinterpret_cast<const char*>(rows + R * cols);
  __m512 acc[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < vector_end; k += kPair) {
#pragma GCC unroll 8
    for (int64_t b = 0; b < R * kPair * 2; b += 64) __builtin_prefetch(next + k * R * 2 + b, 0, 3);
    __m512bh xv[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) xv[g] = Load(x + g * ldx + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = Load(rows + r * cols + k);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], wv, xv[g]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < G; ++g) {
      float sum = _mm512_reduce_add_ps(acc[r][g]);
      for (int64_t k = vector_end; k < cols; ++k) {
        sum += Bf16ToFloat(rows[r * cols + k]) * Bf16ToFloat(x[g * ldx + k]);
      }
      if (bias != nullptr) sum += bias[n + r];
      y[(i + g) * ldy + n + r] = sum;
    }
  }
}

// Rows [n, n + R) of W against all m activation rows, 4 at a time.
template <int R>
inline void RowBlock(const uint16_t* w, int64_t cols, int64_t n, const uint16_t* x, int64_t m,
                     int64_t ldx, const float* bias, float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) Tile<R, 4>(w, cols, n, x + i * ldx, ldx, bias, y, ldy, i);
  switch (m - i) {
    case 3:
      return Tile<R, 3>(w, cols, n, x + i * ldx, ldx, bias, y, ldy, i);
    case 2:
      return Tile<R, 2>(w, cols, n, x + i * ldx, ldx, bias, y, ldy, i);
    case 1:
      return Tile<R, 1>(w, cols, n, x + i * ldx, ldx, bias, y, ldy, i);
    default:
      return;
  }
}

}  // namespace

void MatmulRowsBf16DotAvx512(const WeightView& w, const uint16_t* x, int64_t m, int64_t ldx,
                             const float* bias, float* y, int64_t ldy, int64_t n_begin,
                             int64_t n_end) {
  const auto* data = static_cast<const uint16_t*>(w.data);
  int64_t n = n_begin;
  if (m == 1) {
    for (; n + 8 <= n_end; n += 8) Tile<8, 1>(data, w.cols, n, x, ldx, bias, y, ldy, 0);
    for (; n < n_end; ++n) Tile<1, 1>(data, w.cols, n, x, ldx, bias, y, ldy, 0);
    return;
  }
  for (; n + 4 <= n_end; n += 4) RowBlock<4>(data, w.cols, n, x, m, ldx, bias, y, ldy);
  for (; n < n_end; ++n) RowBlock<1>(data, w.cols, n, x, m, ldx, bias, y, ldy);
}

void RoundToBf16Avx512(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(reinterpret_cast<void*>(out + i), reinterpret_cast<__m512i>(v));
  }
  for (; i < n; ++i) out[i] = FloatToBf16(x[i]);
}

}  // namespace gpeserve::model::cpu::internal
