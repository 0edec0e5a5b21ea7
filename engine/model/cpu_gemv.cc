#include "engine/model/cpu_gemv.h"

#include <immintrin.h>

#include <cstring>

namespace gpeserve::model {
namespace {

// GCC 12 reports its own _mm512_reduce_add_ps as possibly uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define GPE_TARGET __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))

float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7FFF + ((bits >> 16) & 1);  // round to nearest even, as torch does
  return static_cast<uint16_t>(bits >> 16);
}

// Dot products of 4 consecutive rows with x (chunks of 32 bf16 values).
GPE_TARGET void Dot4(const uint16_t* w, const uint16_t* xp, int64_t chunks, int64_t cols,
                     float* out) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  const uint16_t* w0 = w;
  const uint16_t* w1 = w + cols;
  const uint16_t* w2 = w + 2 * cols;
  const uint16_t* w3 = w + 3 * cols;
  for (int64_t c = 0; c < chunks; ++c) {
    const __m512bh x = (__m512bh)_mm512_loadu_si512(xp + 32 * c);  // stays in L1
    acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(w0 + 32 * c), x);
    acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(w1 + 32 * c), x);
    acc2 = _mm512_dpbf16_ps(acc2, (__m512bh)_mm512_loadu_si512(w2 + 32 * c), x);
    acc3 = _mm512_dpbf16_ps(acc3, (__m512bh)_mm512_loadu_si512(w3 + 32 * c), x);
  }
  out[0] = _mm512_reduce_add_ps(acc0);
  out[1] = _mm512_reduce_add_ps(acc1);
  out[2] = _mm512_reduce_add_ps(acc2);
  out[3] = _mm512_reduce_add_ps(acc3);
}

GPE_TARGET float Dot1(const uint16_t* w, const uint16_t* xp, int64_t chunks) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w + 32 * c),
                           (__m512bh)_mm512_loadu_si512(xp + 32 * c));
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace

bool Bf16GemvSupported() {
  static const bool supported = __builtin_cpu_supports("avx512bf16") != 0;
  return supported;
}

GPE_TARGET void Bf16Gemv(const uint16_t* w, const uint16_t* x, const uint16_t* bias, uint16_t* y,
                         int64_t cols, int64_t row_begin, int64_t row_end) {
  const int64_t chunks = cols / 32;
  auto store = [&](int64_t r, float value) {
    if (bias != nullptr) value += Bf16ToFloat(bias[r]);
    y[r] = FloatToBf16(value);
  };
  int64_t r = row_begin;
  for (; r + 4 <= row_end; r += 4) {
    float out[4];
    Dot4(w + r * cols, x, chunks, cols, out);
    for (int i = 0; i < 4; ++i) store(r + i, out[i]);
  }
  for (; r < row_end; ++r) store(r, Dot1(w + r * cols, x, chunks));
}

#undef GPE_TARGET

}  // namespace gpeserve::model
