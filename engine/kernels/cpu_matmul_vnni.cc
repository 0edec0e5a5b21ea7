// The block types' products (Q8_0, Q4_0, Q4_1) with AVX512-VNNI: cpu_matmul_blocks.h's integer
// dot products, 512 bits at a time. One vpdpbusd multiplies 64 unsigned bytes by 64 signed
// bytes and adds each four products into one of 16 int32 lanes: two blocks of 32 at once, where
// AVX2 takes vpmaddubsw and vpmaddwd for one. The sums are the same integers (exact); only the
// fp32 accumulation of the scaled blocks runs over 16 lanes instead of 8, so results differ from
// the AVX2 path by summation order, and each activation row is still computed alone (batched
// equals alone). Compiled with AVX-512 F/BW/VL + VNNI target flags (CMakeLists.txt); called
// only when HasVnni().
#include <immintrin.h>

#include "engine/kernels/cpu_matmul_blocks.h"

// GCC 12 reports its own _mm512_reduce_add_ps as (possibly) uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace gpeserve::model::cpu::internal {
namespace {

// R weight rows' blocks decoded once for all the activation rows of a call (decoding per group
// of activation rows would cost more than the dot products; one activation row reads the values
// in place): per row, the values as the unsigned
// bytes vpdpbusd takes (the 4-bit types' nibbles as they are, Q8_0's signed values plus 128, whose
// excess VnniTile takes back), each block's scale d and the 4-bit types' offset (Q4_0: -8 d,
// Q4_1: m) that enters through the activations' block sums.
struct Decoded {
  uint8_t* values;  // [R][blocks * 32]; null: read from the blocks in place (one activation row)
  float* scale;     // [R][blocks]
  float* offset;    // [R][blocks]
  int64_t blocks;
};

// A block's values as vpdpbusd's unsigned bytes.
template <WeightType T>
inline __m256i Unsigned(__m256i v) {
  if constexpr (T == WeightType::kQ8_0) {
    return _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  return v;
}

template <WeightType T, int R>
inline void Decode(const WeightView& w, int64_t n, const Decoded& out) {
  const int64_t row_bytes = out.blocks * BlockBytes(T);
  for (int r = 0; r < R; ++r) {
    const auto* row = static_cast<const uint8_t*>(w.data) + (n + r) * row_bytes;
    for (int64_t b = 0; b < out.blocks; ++b) {
      const uint8_t* block = row + b * BlockBytes(T);
      if (out.values != nullptr) {
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(out.values + (r * out.blocks + b) * kBlockWeights),
            Unsigned<T>(BlockValues<T>(block)));
      }
      const float d = HalfAt(block);
      out.scale[r * out.blocks + b] = d;
      out.offset[r * out.blocks + b] = T == WeightType::kQ4_1 ? HalfAt(block + 2) : -8.0f * d;
    }
  }
}

// 64 bytes from p, or 32 and zeros.
inline __m512i LoadPair(const void* p, bool two) {
  return two ? _mm512_loadu_si512(p)
             : _mm512_zextsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

// Block pair's scales d[b] (lanes 0-7) and d[b + 1] (lanes 8-15; 0 when absent).
inline __m512 ScalePair(const float* d, bool two) {
  const __m512d low = _mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(d[0])));
  const __m256 high = _mm256_set1_ps(two ? d[1] : 0.0f);
  return _mm512_castpd_ps(_mm512_insertf64x4(low, _mm256_castps_pd(high), 1));
}

// sum_b a[b] * c[b] over n values, 16 lanes then across.
inline float Dot(const float* a, const float* c, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 16 <= n; b += 16) {
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + b), _mm512_loadu_ps(c + b), acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  for (; b < n; ++b) sum = __builtin_fmaf(a[b], c[b], sum);
  return sum;
}

// The decoded rows [n, n + R) against the G activation rows from i, into y.
template <WeightType T, int R, int G>
inline void VnniTile(const WeightView& view, const Decoded& w, int64_t n, const Q8Rows& x,
                     int64_t i, const float* bias, float* y, int64_t ldy) {
  const int64_t row_bytes = w.blocks * BlockBytes(T);
  const auto* rows = static_cast<const uint8_t*>(view.data) + n * row_bytes;
  __m512 acc[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < x.blocks; b += 2) {
    const bool two = b + 1 < x.blocks;
    __m512i wq[R];
    __m512 dw[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (w.values != nullptr) {
        wq[r] = LoadPair(w.values + (r * w.blocks + b) * kBlockWeights, two);
      } else {
        // The same bytes, straight from the blocks (the next tile's rows prefetched).
        const uint8_t* block = rows + r * row_bytes + b * BlockBytes(T);
        __builtin_prefetch(block + R * row_bytes, 0, 3);
        __builtin_prefetch(block + R * row_bytes + 64, 0, 3);
        const __m256i lo = Unsigned<T>(BlockValues<T>(block));
        const __m256i hi =
            two ? Unsigned<T>(BlockValues<T>(block + BlockBytes(T))) : _mm256_setzero_si256();
        wq[r] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      }
      dw[r] = ScalePair(w.scale + r * w.blocks + b, two);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512i xq = LoadPair(x.q + (i + g) * x.cols + 32 * b, two);
      const __m512 dx = ScalePair(x.d + (i + g) * x.blocks + b, two);
      // Q8_0: (w + 128) . x - 128 * (sum of x), lane by lane, in exact integers.
      __m512i correction = _mm512_setzero_si512();
      if constexpr (T == WeightType::kQ8_0) {
        correction = _mm512_dpbusd_epi32(correction, _mm512_set1_epi8(static_cast<char>(0x80)), xq);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[r], xq);
        if constexpr (T == WeightType::kQ8_0) dot = _mm512_sub_epi32(dot, correction);
        acc[r][g] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(dot), acc[r][g]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < G; ++g) {
      float sum = _mm512_reduce_add_ps(acc[r][g]);
      if constexpr (T != WeightType::kQ8_0) {
        // The weights' offsets times d_x times the blocks' sums of q_x (x.s holds d_x sum q_x).
        sum += Dot(w.offset + r * w.blocks, x.s + (i + g) * x.blocks, x.blocks);
      }
      if (bias != nullptr) sum += bias[n + r];
      y[(i + g) * ldy + n + r] = sum;
    }
  }
}

// Weight rows [n, n + R): decoded once, then against all m activation rows, four at a time.
template <WeightType T, int R>
inline void VnniRows(const WeightView& w, const Decoded& d, int64_t n, const Q8Rows& x, int64_t m,
                     const float* bias, float* y, int64_t ldy) {
  Decode<T, R>(w, n, d);
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) VnniTile<T, R, 4>(w, d, n, x, i, bias, y, ldy);
  switch (m - i) {
    case 3:
      return VnniTile<T, R, 3>(w, d, n, x, i, bias, y, ldy);
    case 2:
      return VnniTile<T, R, 2>(w, d, n, x, i, bias, y, ldy);
    case 1:
      return VnniTile<T, R, 1>(w, d, n, x, i, bias, y, ldy);
  }
}

template <WeightType T>
void MatmulVnni(const WeightView& w, const float* x, int64_t m, int64_t ldx, const float* bias,
                float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  const Q8Rows rows = RoundRows<T>(x, m, ldx, w.cols);
  const int64_t blocks = rows.blocks;
  constexpr int kMaxRows = 4;
  // One activation row reads each weight once: decoding its values first would only add a pass.
  uint8_t* values = m > 1 ? new uint8_t[kMaxRows * w.cols] : nullptr;
  float* decoded_scales = new float[2 * kMaxRows * blocks];
  const Decoded d{values, decoded_scales, decoded_scales + kMaxRows * blocks, blocks};
  int64_t n = n_begin;
  if (m == 1) {
    for (; n + 4 <= n_end; n += 4) VnniRows<T, 4>(w, d, n, rows, m, bias, y, ldy);
  } else {
    for (; n + 2 <= n_end; n += 2) VnniRows<T, 2>(w, d, n, rows, m, bias, y, ldy);
  }
  for (; n < n_end; ++n) VnniRows<T, 1>(w, d, n, rows, m, bias, y, ldy);
  delete[] values;
  delete[] decoded_scales;
  FreeRows(rows);
}

}  // namespace

void MatmulBlocksVnni(const WeightView& w, const float* x, int64_t m, int64_t ldx,
                      const float* bias, float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  switch (w.type) {
    case WeightType::kQ8_0:
      return MatmulVnni<WeightType::kQ8_0>(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
    case WeightType::kQ4_0:
      return MatmulVnni<WeightType::kQ4_0>(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
    case WeightType::kQ4_1:
      return MatmulVnni<WeightType::kQ4_1>(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
    default:
      return;  // not a block type: MatmulRows never sends one here
  }
}

}  // namespace gpeserve::model::cpu::internal
