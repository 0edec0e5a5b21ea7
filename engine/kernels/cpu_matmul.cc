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
  }
  return "?";
}

int WeightTypeBytes(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return 4;
    case WeightType::kBF16:
    case WeightType::kF16:
      return 2;
    case WeightType::kInt8:
      return 1;
  }
  return 0;
}

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
      return internal::MatmulRowsAvx512(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
    case Isa::kAvx2:
      return internal::MatmulRowsAvx2(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
    case Isa::kScalar:
      return internal::MatmulRowsScalar(w, x, m, ldx, bias, y, ldy, n_begin, n_end);
  }
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
