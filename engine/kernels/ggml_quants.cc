#include "engine/kernels/ggml_quants.h"

#include <cstring>

#include "engine/kernels/cpu_matmul.h"

namespace gpeserve::model::cpu {
namespace {

// ggml's type numbers (gguf.h's GgmlType; the kernels room reads no file formats).
enum : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};
constexpr int64_t kBlock = 32;        // weights per block of the 32-weight types
constexpr int64_t kSuperBlock = 256;  // weights per block of the K-quants

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// Block layouts (bytes): Q8_0 {d: f16, q: int8[32]}; Q4_0 {d, q: 16 bytes of nibbles: weight j
// in the low nibble of byte j, weight j + 16 in its high nibble, offset by 8}; Q4_1 {d, m: f16,
// nibbles, no offset: w = d q + m}; Q5_0 {d, qh: 32 fifth bits (uint32), nibbles; offset 16};
// Q5_1 {d, m, qh, nibbles}.
void Q8_0(const uint8_t* b, float* out) {
  const float d = Half(b);
  for (int j = 0; j < kBlock; ++j) out[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

void Q4(const uint8_t* b, bool has_min, float* out) {
  const float d = Half(b);
  const float m = has_min ? Half(b + 2) : 0.0f;
  const uint8_t* q = b + (has_min ? 4 : 2);
  const int offset = has_min ? 0 : 8;
  for (int j = 0; j < kBlock / 2; ++j) {
    out[j] = d * static_cast<float>((q[j] & 0x0F) - offset) + m;
    out[j + kBlock / 2] = d * static_cast<float>((q[j] >> 4) - offset) + m;
  }
}

void Q5(const uint8_t* b, bool has_min, float* out) {
  const float d = Half(b);
  const float m = has_min ? Half(b + 2) : 0.0f;
  const uint8_t* p = b + (has_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const uint8_t* q = p + 4;
  const int offset = has_min ? 0 : 16;
  for (int j = 0; j < kBlock / 2; ++j) {
    const int lo = (q[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
    const int hi = (q[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    out[j] = d * static_cast<float>(lo - offset) + m;
    out[j + kBlock / 2] = d * static_cast<float>(hi - offset) + m;
  }
}

// The K-quants: a super-block of 256 weights in sub-blocks of 32 (Q4_K, Q5_K) or 16 (Q6_K),
// each with its own 6- or 8-bit scale (and 6-bit minimum) times the super-block's fp16 d (dmin).

// Q4_K's and Q5_K's twelve scale bytes hold eight 6-bit (scale, min) pairs: pairs 0-3 in the low
// six bits of bytes 0-3 (scales) and 4-7 (mins); pairs 4-7 in the nibbles of bytes 8-11 with
// their top two bits in the high bits of bytes 0-3 (scales) and 4-7 (mins).
void ScaleMin(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K {d, dmin: f16; scales: 12 bytes; qs: 128 bytes}; Q5_K adds qh: 32 bytes (the fifth bits)
// before qs. Each 64 weights: 32 bytes of qs, low nibbles the first 32, high nibbles the next;
// w = d * scale * q - dmin * min.
void Q45_K(const uint8_t* b, bool five, float* out) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + (five ? 48 : 16);
  for (int j = 0; j < 4; ++j, q += 32, out += 64) {
    int sc1, m1, sc2, m2;
    ScaleMin(2 * j, scales, &sc1, &m1);
    ScaleMin(2 * j + 1, scales, &sc2, &m2);
    const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
    const float d2 = d * static_cast<float>(sc2), min2 = dmin * static_cast<float>(m2);
    for (int l = 0; l < 32; ++l) {
      const int hi1 = five ? ((qh[l] >> (2 * j)) & 1) << 4 : 0;
      const int hi2 = five ? ((qh[l] >> (2 * j + 1)) & 1) << 4 : 0;
      out[l] = d1 * static_cast<float>((q[l] & 0x0F) | hi1) - min1;
      out[l + 32] = d2 * static_cast<float>((q[l] >> 4) | hi2) - min2;
    }
  }
}

// Q6_K {ql: 128 bytes (low four bits); qh: 64 bytes (high two bits); scales: 16 int8; d: f16}.
// Each 128 weights: 64 bytes of ql, 32 of qh, 8 scales (one per 16 weights); q in [-32, 31].
void Q6_K(const uint8_t* b, float* out) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, out += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

}  // namespace

bool CanDequantizeGgml(uint32_t t) {
  return t == kF32 || t == kF16 || t == kBF16 || t == kQ8_0 || t == kQ4_0 || t == kQ4_1 ||
         t == kQ5_0 || t == kQ5_1 || t == kQ4_K || t == kQ5_K || t == kQ6_K;
}

void DequantizeGgml(uint32_t t, const void* blocks, int64_t n, float* out) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  switch (t) {
    case kF32:
      std::memcpy(out, b, static_cast<size_t>(n) * 4);
      return;
    case kF16:
    case kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        out[i] = t == kF16 ? HalfToFloat(h) : Bf16ToFloat(h);
      }
      return;
    case kQ4_K:
    case kQ5_K:
    case kQ6_K: {
      const int64_t bytes = t == kQ4_K ? 144 : t == kQ5_K ? 176 : 210;
      for (int64_t i = 0; i < n / kSuperBlock; ++i, b += bytes, out += kSuperBlock) {
        if (t == kQ6_K) {
          Q6_K(b, out);
        } else {
          Q45_K(b, t == kQ5_K, out);
        }
      }
      return;
    }
    default:
      break;
  }
  const int64_t bytes = t == kQ8_0 ? 34 : t == kQ4_0 ? 18 : t == kQ4_1 ? 20 : t == kQ5_0 ? 22 : 24;
  for (int64_t i = 0; i < n / kBlock; ++i, b += bytes, out += kBlock) {
    switch (t) {
      case kQ8_0:
        Q8_0(b, out);
        break;
      case kQ4_0:
      case kQ4_1:
        Q4(b, t == kQ4_1, out);
        break;
      default:
        Q5(b, t == kQ5_1, out);
        break;
    }
  }
}

}  // namespace gpeserve::model::cpu
