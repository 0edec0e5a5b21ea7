// Matrix products of fp32 activations with weights stored as fp32, bf16, fp16, int8 (one
// scale per output row) or ggml's blocks of 32 weights with a scale each (Q8_0, Q4_0, Q4_1, as
// GGUF files hold them), for the linear layers of a model served on the CPU. The weights are
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

// The block types keep ggml's layouts (ggml_quants.h): a row of `cols` weights (a multiple of
// kBlockWeights) is cols / 32 blocks, each an fp16 scale d (Q4_1: and an fp16 minimum m) and 32
// values q: Q8_0 int8, w = d q; Q4_0 nibbles, w = d (q - 8); Q4_1 nibbles, w = d q + m (weight j
// of a block in the low nibble of byte j, weight j + 16 in its high nibble). The kernels widen
// them to exactly those fp32 values (d q is exact in fp32), as DequantizeGgml does.
enum class WeightType { kF32, kBF16, kF16, kInt8, kQ8_0, kQ4_0, kQ4_1 };
// "fp32", "bf16", "fp16", "int8", "q8_0", "q4_0", "q4_1"
const char* WeightTypeName(WeightType type);
bool IsBlockType(WeightType type);  // Q8_0, Q4_0, Q4_1
inline constexpr int64_t kBlockWeights = 32;
// Bytes of `count` weights (a multiple of kBlockWeights for the block types).
int64_t WeightBytes(WeightType type, int64_t count);

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

// A weight matrix [rows, cols], row-major (the block types: cols a multiple of kBlockWeights).
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

// bf16 activations (ModelOptions::cpu_activations): AVX512-BF16's dot product (vdpbf16ps, 32
// bf16 products a instruction, summed pairwise into 16 fp32 lanes) for bf16 weights.
// True when the CPU has AVX512-BF16 and ActiveIsa() is avx512 (GPESERVE_CPU_ISA=avx2 turns it
// off). Read once.
bool HasBf16Dot();
// True when the CPU has AVX512-VNNI and ActiveIsa() is avx512: MatmulRows then takes the block
// types' integer dot products 64 bytes at a time (vpdpbusd; cpu_matmul_vnni.cc). Read once.
bool HasVnni();
// x rounded to bf16 (to nearest even, as FloatToBf16): n values. Vector code where HasBf16Dot().
void RoundToBf16(const float* x, int64_t n, uint16_t* out);
// y[i * ldy + n] = sum_k x[i * ldx + k] * W[n, k] + bias[n] for bf16 weights and the m bf16
// activation rows x: products exact, sums in fp32 (vdpbf16ps treats denormal inputs and results
// as zero), each row's in one order whatever m. bias may be null.
// REQUIRES: HasBf16Dot(); w.type == kBF16.
void MatmulRowsBf16Dot(const WeightView& w, const uint16_t* x, int64_t m, int64_t ldx,
                       const float* bias, float* y, int64_t ldy, int64_t n_begin, int64_t n_end);

// Rows [n_begin, n_end) of W as fp32 (scale applied), packed: out[(n - n_begin) * cols + k].
void DequantizeRows(Isa isa, const WeightView& w, int64_t n_begin, int64_t n_end, float* out);

// Rows [n_begin, n_end) of the fp32 matrix w [rows, cols] in a block type, as ggml's reference
// quantizers round (Q8_0: d = max |w| / 127, q = round(w / d); Q4_0: d = -(the weight of
// largest magnitude) / 8, q = min(15, trunc(w / d + 8.5)); Q4_1: d = (max - min) / 15, m = min,
// q = min(15, trunc((w - m) / d + 0.5))), written to out at WeightBytes(type, n_begin * cols).
// REQUIRES: IsBlockType(type), cols a multiple of kBlockWeights.
void QuantizeRowsBlocks(WeightType type, const float* w, int64_t cols, int64_t n_begin,
                        int64_t n_end, void* out);

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
