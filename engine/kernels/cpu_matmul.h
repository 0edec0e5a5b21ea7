// Matrix products of fp32 activations with weights stored as fp32, bf16, fp16 or int8 (one
// scale per output row), for the linear layers of a model served on the CPU. The weights are
// read once for all the activation rows of a call, so a decode step of a few rows costs about
// what one row costs; prefill converts tiles of weights to fp32 for a matrix-matrix product
// (linear.cc).
//
// One source file per instruction set (cpu_matmul_scalar.cc, cpu_matmul_avx2.cc,
// cpu_matmul_avx512.cc), each compiled with its own target flags and chosen at run time from
// the CPU's features; the rest of the build stays at the generic x86-64 target.
//
// Thread-safety: pure functions; callers split output rows across threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gpeserve::model::cpu {

enum class WeightType { kF32, kBF16, kF16, kInt8 };
const char* WeightTypeName(WeightType type);  // "fp32", "bf16", "fp16", "int8"
int WeightTypeBytes(WeightType type);         // bytes per element

// Instruction sets with kernels, slowest first.
enum class Isa { kScalar, kAvx2, kAvx512 };
const char* IsaName(Isa isa);  // "scalar", "avx2", "avx512"
// Parses IsaName's names; false for anything else.
bool ParseIsa(std::string_view name, Isa* isa);

// The best instruction set this CPU runs: avx512 needs AVX-512 F/BW/VL, avx2 needs AVX2, FMA
// and F16C.
Isa DetectedIsa();
// What the kernels use unless a caller names one: DetectedIsa(), lowered to the value of the
// environment variable GPESERVE_CPU_ISA (scalar | avx2 | avx512) when that is set, so that a
// machine can test its slower paths. A value above DetectedIsa() or not a name is ignored with
// a warning on stderr. Read once.
Isa ActiveIsa();
// True when ActiveIsa() is below DetectedIsa() because of GPESERVE_CPU_ISA.
bool IsaForced();

// A weight matrix [rows, cols], row-major.
struct WeightView {
  const void* data = nullptr;
  const float* scale = nullptr;  // [rows]; int8 only: W[n, k] = data[n, k] * scale[n]
  WeightType type = WeightType::kF32;
  int64_t rows = 0, cols = 0;
};

// For the m rows of x (row stride ldx) and output rows n in [n_begin, n_end):
//   y[i * ldy + n] = sum_k x[i * ldx + k] * W[n, k] + bias[n]   (fp32 accumulation)
// bias may be null. Each weight is read from memory once for all m rows.
void MatmulRows(Isa isa, const WeightView& w, const float* x, int64_t m, int64_t ldx,
                const float* bias, float* y, int64_t ldy, int64_t n_begin, int64_t n_end);

// Rows [n_begin, n_end) of W as fp32 (scale applied), packed: out[(n - n_begin) * cols + k].
void DequantizeRows(Isa isa, const WeightView& w, int64_t n_begin, int64_t n_end, float* out);

// Symmetric per-row int8 of rows [n_begin, n_end) of the fp32 matrix w [rows, cols]:
// scale[n] = max_k |w[n, k]| / 127 (1 for an all-zero row), q[n, k] = round(w[n, k] / scale[n])
// (to nearest, ties to even).
void QuantizeRowsInt8(const float* w, int64_t cols, int64_t n_begin, int64_t n_end, int8_t* q,
                      float* scale);

// Scalar conversions (round to nearest even, as torch does), for tests and tails.
float Bf16ToFloat(uint16_t h);
uint16_t FloatToBf16(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

}  // namespace gpeserve::model::cpu
