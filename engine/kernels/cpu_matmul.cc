#include "engine/kernels/cpu_matmul.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "engine/kernels/cpu_matmul_isa.h"

namespace gpeserve::model::cpu {

const char* WeightTypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "fp32";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kF16:
      return "fp16";
    case WeightType::kInt8:
      return "int8";
    case WeightType::kQ8_0:
      return "q8_0";
    case WeightType::kQ4_0:
      return "q4_0";
    case WeightType::kQ4_1:
      return "q4_1";
  }
  return "?";
}

bool IsBlockType(WeightType type) {
  return type == WeightType::kQ8_0 || type == WeightType::kQ4_0 || type == WeightType::kQ4_1;
}

int64_t WeightBytes(WeightType type, int64_t count) {
  switch (type) {
    case WeightType::kF32:
      return 4 * count;
    case WeightType::kBF16:
    case WeightType::kF16:
      return 2 * count;
    case WeightType::kInt8:
      return count;
    case WeightType::kQ8_0:
      return count / kBlockWeights * 34;
    case WeightType::kQ4_0:
      return count / kBlockWeights * 18;
    case WeightType::kQ4_1:
      return count / kBlockWeights * 20;
  }
  return 0;
}

namespace internal {

float BlockWeight(WeightType type, const void* data, int64_t index) {
  const auto* b =
      static_cast<const uint8_t*>(data) + WeightBytes(type, index / kBlockWeights * kBlockWeights);
  const int j = static_cast<int>(index % kBlockWeights);
  uint16_t half[2];
  std::memcpy(half, b, 4);
  const float d = HalfToFloat(half[0]);
  if (type == WeightType::kQ8_0) return d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
  const uint8_t* q = b + (type == WeightType::kQ4_1 ? 4 : 2);
  const int nibble = j < 16 ? q[j] & 0x0F : q[j - 16] >> 4;
  if (type == WeightType::kQ4_0) return d * static_cast<float>(nibble - 8);
  return d * static_cast<float>(nibble) + HalfToFloat(half[1]);  // d q is exact: one rounding
}

}  // namespace internal

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool ParseIsa(std::string_view name, Isa* isa) {
  for (Isa candidate : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (name == IsaName(candidate)) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

Isa DetectedIsa() {
  static const Isa detected = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
      return Isa::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
      return Isa::kAvx2;
    }
    return Isa::kScalar;
  }();
  return detected;
}

namespace {

struct ActiveChoice {
  Isa isa;
  bool forced;
};

const ActiveChoice& Active() {
  static const ActiveChoice choice = [] {
    const Isa detected = DetectedIsa();
    const char* env = std::getenv("GPESERVE_CPU_ISA");
    if (env == nullptr || *env == '\0') return ActiveChoice{detected, false};
    Isa wanted;
    if (!ParseIsa(env, &wanted)) {
      std::cerr << "gpeserve: warning: GPESERVE_CPU_ISA=" << env
                << " is not scalar, avx2 or avx512; using " << IsaName(detected) << "\n";
      return ActiveChoice{detected, false};
    }
    if (static_cast<int>(wanted) > static_cast<int>(detected)) {
      std::cerr << "gpeserve: warning: GPESERVE_CPU_ISA=" << env << " but this CPU runs at most "
                << IsaName(detected) << "; using " << IsaName(detected) << "\n";
      return ActiveChoice{detected, false};
    }
    return ActiveChoice{wanted, wanted != detected};
  }();
  return choice;
}

}  // namespace

Isa ActiveIsa() { return Active().isa; }
bool IsaForced() { return Active().forced; }

void MatmulRows(Isa isa, const WeightView& w, const float* x, int64_t m, int64_t ldx,
                const float* bias, float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  switch (isa) {
    case Isa::kAvx512:
      if (IsBlockType(w.type) && HasVnni()) {
        return internal::MatmulBlocksVnni(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
      }
      return internal::MatmulRowsAvx512(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
    case Isa::kAvx2:
      return internal::MatmulRowsAvx2(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
    case Isa::kScalar:
      return internal::MatmulRowsScalar(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
  }
}

bool HasBf16Dot() {
  static const bool has = [] {
    __builtin_cpu_init();
    return ActiveIsa() == Isa::kAvx512 && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

bool HasVnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return ActiveIsa() == Isa::kAvx512 && __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}

void RoundToBf16(const float* x, int64_t n, uint16_t* out) {
  if (HasBf16Dot()) return internal::RoundToBf16Avx512(x, n, out);
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(x[i]);
}

void MatmulRowsBf16Dot(const WeightView& w, const uint16_t* x, int64_t m, int64_t ldx,
                       const float* bias, float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  internal::MatmulRowsBf16DotAvx512(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
}

void DequantizeRows(Isa isa, const WeightView& w, int64_t n_begin, int64_t n_end, float* out) {
  switch (isa) {
    case Isa::kAvx512:
      return internal::DequantizeRowsAvx512(w, n_begin, n_end, out);
    case Isa::kAvx2:
      return internal::DequantizeRowsAvx2(w, n_begin, n_end, out);
    case Isa::kScalar:
      return internal::DequantizeRowsScalar(w, n_begin, n_end, out);
  }
}

namespace {

// One block of 32 weights as ggml's reference quantizers round it (cpu_matmul.h).
void QuantizeBlock(WeightType type, const float* x, uint8_t* out) {
  auto put_half = [](float v, uint8_t* p) {
    const uint16_t h = FloatToHalf(v);
    std::memcpy(p, &h, 2);
  };
  if (type == WeightType::kQ8_0) {
    float max_abs = 0;
    for (int j = 0; j < kBlockWeights; ++j) max_abs = std::fmax(max_abs, std::fabs(x[j]));
    const float d = max_abs / 127.0f;
    const float inverse = d != 0 ? 1.0f / d : 0.0f;
    put_half(d, out);
    for (int j = 0; j < kBlockWeights; ++j) {
      out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * inverse)));
    }
    return;
  }
  float d, offset, lowest = 0;
  uint8_t* q;
  if (type == WeightType::kQ4_0) {
    float extreme = 0;  // the weight of largest magnitude, with its sign
    for (int j = 0; j < kBlockWeights; ++j) {
      if (std::fabs(x[j]) > std::fabs(extreme)) extreme = x[j];
    }
    d = extreme / -8.0f;
    offset = 8.5f;
    put_half(d, out);
    q = out + 2;
  } else {
    float highest = x[0];
    lowest = x[0];
    for (int j = 1; j < kBlockWeights; ++j) {
      lowest = std::fmin(lowest, x[j]);
      highest = std::fmax(highest, x[j]);
    }
    d = (highest - lowest) / 15.0f;
    offset = 0.5f;
    put_half(d, out);
    put_half(lowest, out + 2);
    q = out + 4;
  }
  const float inverse = d != 0 ? 1.0f / d : 0.0f;
  auto level = [&](float v) {
    const int l = static_cast<int>((v - lowest) * inverse + offset);  // truncates, as ggml's
    return static_cast<uint8_t>(l < 0 ? 0 : l > 15 ? 15 : l);
  };
  for (int j = 0; j < kBlockWeights / 2; ++j) {
    q[j] = static_cast<uint8_t>(level(x[j]) | (level(x[j + kBlockWeights / 2]) << 4));
  }
}

}  // namespace

void QuantizeRowsBlocks(WeightType type, const float* w, int64_t cols, int64_t n_begin,
                        int64_t n_end, void* out) {
  auto* bytes = static_cast<uint8_t*>(out);
  const int64_t block_bytes = WeightBytes(type, kBlockWeights);
  for (int64_t n = n_begin; n < n_end; ++n) {
    for (int64_t k = 0; k < cols; k += kBlockWeights) {
      QuantizeBlock(type, w + n * cols + k,
                    bytes + WeightBytes(type, n * cols) + k / kBlockWeights * block_bytes);
    }
  }
}

void QuantizeRowsInt8(const float* w, int64_t cols, int64_t n_begin, int64_t n_end, int8_t* q,
                      float* scale) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    const float* row = w + n * cols;
    float max_abs = 0;
    for (int64_t k = 0; k < cols; ++k) max_abs = std::fmax(max_abs, std::fabs(row[k]));
    const float s = max_abs > 0 ? max_abs / 127.0f : 1.0f;
    scale[n] = s;
    for (int64_t k = 0; k < cols; ++k) {
      const float v = std::nearbyint(row[k] / s);
      q[n * cols + k] = static_cast<int8_t>(v > 127 ? 127 : v < -127 ? -127 : v);
    }
  }
}

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
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
  } else if (exponent == 0x1F) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), static_cast<int>(exponent) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(a)) return sign | 0x7E00;
  if (a >= 65520.0f) return sign | 0x7C00;  // rounds to infinity
  if (a < 6.103515625e-05f) {               // subnormal: units of 2^-24, ties to even
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  int exponent;
  const float m = std::frexp(a, &exponent);  // a = m * 2^exponent, m in [0.5, 1)
  // 11 significant bits: round m * 2^11 to an integer in [1024, 2048].
  uint32_t significand = static_cast<uint32_t>(std::nearbyint(m * 2048.0f));
  if (significand == 2048) {
    significand = 1024;
    ++exponent;
  }
  const uint32_t biased = static_cast<uint32_t>(exponent - 1 + 15);
  if (biased >= 31) return sign | 0x7C00;
  return sign | static_cast<uint16_t>((biased << 10) | (significand & 0x3FF));
}

}  // namespace gpeserve::model::cpu
